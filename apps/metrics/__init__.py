"""Metrics ingest and rollups."""
