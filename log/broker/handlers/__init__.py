"""One module per Kafka API; ``dispatcher`` maps API keys to them."""
