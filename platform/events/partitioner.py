"""Kafka's murmur2 key hash and librdkafka's ``murmur2_random`` partitioner, in pure Python.

A keyed record's partition must be the same whichever client wrote it, or
per-key ordering and compaction break. The Java producer's default
partitioner and librdkafka's ``murmur2_random`` agree on keyed records:

* the hash is MurmurHash2 (32-bit, seed ``0x9747b28c``) over the key bytes,
  read as little-endian 4-byte words, exactly as Kafka's ``Utils.murmur2``;
* the partition is ``(hash & 0x7fffffff) % partition_count``, which is
  Kafka's ``Utils.toPositive`` followed by a modulo;
* an empty key (``b""``) is a key like any other and is hashed;
* a record without a key (``None``) goes to a random partition. The Java
  producer instead sticks to one partition per batch; no reader may rely on
  where keyless records land.

Everything here is a pure function of its arguments. The entity store sends an
entity's reads and conditional appends to the partition the event producer (librdkafka)
puts its events in, and the tests check that the broker, librdkafka, kafka-python and
aiokafka put a keyed record where this module says.
"""

from __future__ import annotations

import random

MURMUR2_SEED = 0x9747B28C
MURMUR2_MULTIPLIER = 0x5BD1E995
MURMUR2_SHIFT = 24
UINT32_MASK = 0xFFFFFFFF
POSITIVE_MASK = 0x7FFFFFFF
WORD_BYTES = 4


def murmur2(data: bytes) -> int:
    """The 32-bit MurmurHash2 of ``data`` that Kafka and librdkafka compute.

    Returns the hash as an unsigned integer in ``[0, 2**32)``: the same bits
    as the signed ``int`` Java's ``Utils.murmur2`` returns (use
    :func:`to_signed_int32` to compare with Java values).
    """
    length = len(data)
    hash_value = (MURMUR2_SEED ^ length) & UINT32_MASK
    whole_words_end = length - length % WORD_BYTES
    for start in range(0, whole_words_end, WORD_BYTES):
        word = int.from_bytes(data[start : start + WORD_BYTES], "little")
        word = (word * MURMUR2_MULTIPLIER) & UINT32_MASK
        word ^= word >> MURMUR2_SHIFT
        word = (word * MURMUR2_MULTIPLIER) & UINT32_MASK
        hash_value = (hash_value * MURMUR2_MULTIPLIER) & UINT32_MASK
        hash_value ^= word
    tail = data[whole_words_end:]
    if tail:
        hash_value ^= int.from_bytes(tail, "little")
        hash_value = (hash_value * MURMUR2_MULTIPLIER) & UINT32_MASK
    hash_value ^= hash_value >> 13
    hash_value = (hash_value * MURMUR2_MULTIPLIER) & UINT32_MASK
    hash_value ^= hash_value >> 15
    return hash_value


def to_signed_int32(value: int) -> int:
    """``value``'s low 32 bits read as a two's-complement ``int``, as Java holds them."""
    value &= UINT32_MASK
    return value - (1 << 32) if value & 0x80000000 else value


def to_positive(value: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``, which overflows)."""
    return value & POSITIVE_MASK


def partition_for_key(key: bytes, partition_count: int) -> int:
    """The partition every Java-compatible client picks for ``key`` among ``partition_count``."""
    if partition_count < 1:
        raise ValueError(f"partition_count must be at least 1, not {partition_count}")
    return to_positive(murmur2(key)) % partition_count


def murmur2_random_partition(
    key: bytes | None, partition_count: int, *, random_source: random.Random | None = None
) -> int:
    """librdkafka's ``murmur2_random``: hash a key; a missing key picks any partition.

    ``random_source`` chooses the partition of a keyless record (the module's
    shared generator when omitted), so tests can make that choice repeatable.
    """
    if key is None:
        if partition_count < 1:
            raise ValueError(f"partition_count must be at least 1, not {partition_count}")
        if random_source is None:
            return random.randrange(partition_count)
        return random_source.randrange(partition_count)
    return partition_for_key(key, partition_count)
