"""The names this log adds to the Kafka protocol, for every client to use.

* ``eventplatform.entity.versions.enable`` (a topic config): the topic's partitions
  count each key's records, the version of the key's entity;
* ``eventplatform.expected.version`` (a record header, ASCII decimal): append this
  record only if its key has exactly that many records before it (``0``: the entity
  must not exist yet); otherwise the whole batch is refused with INVALID_RECORD.

This module imports nothing, so a client (the event SDK, a Spark worker) reads the
names without loading the broker.
"""

ENTITY_VERSIONS_CONFIG = "eventplatform.entity.versions.enable"
EXPECTED_VERSION_HEADER = "eventplatform.expected.version"
