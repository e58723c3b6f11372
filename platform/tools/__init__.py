"""Operator tools behind the ``platform`` command line: topics, produce, consume, groups,
erase.

Every tool talks to the cluster through confluent-kafka (librdkafka), so it
works against any Kafka-compatible cluster; ``erase`` also sends this log's own
EraseRecords, which only this platform's brokers answer. Each command is one application
function that takes plain values and callables for output; parsing, table
layout and offset arithmetic are pure functions beside it. Failures a person
can act on raise :class:`eventplatform.tools.errors.ToolError` with a
one-line message.
"""
