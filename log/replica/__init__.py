"""The replica layer: a partition as one replica holds it (its log, producer state and
high watermark), the leader's view of its followers (the ISR), the registry of topics a
node holds, and which replica a consumer reads from. It builds on storage only."""
