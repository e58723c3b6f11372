"""The Kafka-compatible broker: trio server, connections, topics and one handler per API."""
