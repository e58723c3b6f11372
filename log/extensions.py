"""The names this log adds to the Kafka protocol, for every client to use.

* ``eventplatform.entity.versions.enable`` (a topic config): the topic's partitions
  count each key's records, the version of the key's entity;
* ``eventplatform.expected.version`` (a record header, ASCII decimal): append this
  record only if its key has exactly that many records before it (``0``: the entity
  must not exist yet); otherwise the whole batch is refused with INVALID_RECORD;
* ``EntityRead`` (API key ``ENTITY_READ_API_KEY``): the batches of a partition that
  hold one key's records, found through the partition's entity index, so reading one
  entity costs what it holds. It is not listed by ApiVersions: Kafka clients have no
  use for it, and the event SDK asks for it only of topics that keep versions.
* ``EraseRecords`` (API key ``ERASE_RECORDS_API_KEY``): empty records of a partition in
  place, on every replica: each keeps its offset, timestamp and key, its value becomes
  null and its one header ``ERASED_HEADER``. Not listed by ApiVersions either.
* ``ERASED_HEADER`` (a record header, empty value): the record was erased; its value
  is gone for good, and readers skip it.

This module imports nothing, so a client (the event SDK, a Spark worker) reads the
names without loading the broker.
"""

ENTITY_VERSIONS_CONFIG = "eventplatform.entity.versions.enable"
EXPECTED_VERSION_HEADER = "eventplatform.expected.version"
ENTITY_READ_API_KEY = 32_000
"""This log's own APIs take keys from 32000 on, far past Kafka's."""
ERASE_RECORDS_API_KEY = 32_001
ERASED_HEADER = "eventplatform.erased"
