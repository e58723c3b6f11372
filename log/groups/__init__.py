"""The classic consumer-group coordinator and committed offsets."""
