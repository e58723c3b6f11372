"""Spark replay and backfill of projections from the log."""
