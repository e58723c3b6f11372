"""SQL projections: the projection model, the consumer-group runner and the SQL stores."""
