"""Log aggregation."""
