"""The broker's entity rule against a sequential model, under everything that moves it.

A hypothesis state machine drives a leader replica and a follower of one versioned
partition: conditional and plain appends from a plain producer and two idempotent ones
(retries of their last batch included), replication of some or all of the leader's log,
leader changes (the follower takes over; the old leader truncates to it and follows),
clean restarts, and kills that tear the leader's tail. After every step:

- the leader accepted or refused each batch exactly as the model did (the model counts
  the records of the leader's log, and accepts a batch when every conditional record
  expects its key's count plus the records ahead of it in the batch);
- each replica's versions equal a scan of its own log, and its entity index names the
  batches a scan would.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path

import hypothesis.strategies as st
from crash_simulation import crash_partition
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.entity_versions import EXPECTED_VERSION_HEADER
from eventplatform.log.replica.partition import Partition
from eventplatform.log.storage import LogConfig
from eventplatform.log.storage.record_batch import (
    Record,
    decode_record_set,
    encode_batch,
    parse_header,
)

KEYS = [b"a", b"b", b"c"]
CONFIG = LogConfig(eventplatform_entity_versions_enable=True, segment_bytes=2048)
PRODUCERS = 3  # 0: plain; 1 and 2: idempotent
FIRST_PRODUCER_ID = 1_000

records_strategy = st.lists(
    st.tuples(st.sampled_from([*KEYS, None]), st.sampled_from(["plain", "right", "wrong"])),
    min_size=1,
    max_size=4,
)


def scan_versions(partition: Partition) -> Counter[bytes]:
    counts: Counter[bytes] = Counter()
    for batch in partition.log.iter_batches():
        for record in batch.records:
            if record.key is not None:
                counts[record.key] += 1
    return counts


def scan_batches(partition: Partition, key: bytes) -> list[int]:
    return [
        batch.header.base_offset
        for batch in partition.log.iter_batches()
        if any(record.key == key for record in batch.records)
    ]


class EntityRule(RuleBasedStateMachine):
    """See the module docstring."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(os.environ.get("TMPDIR", "/tmp")) / f"entity-sm-{os.getpid()}-{id(self)}"
        shutil.rmtree(self.root, ignore_errors=True)
        self.paths = [self.root / "one", self.root / "two"]
        self.replicas = [Partition.open("accounts", 0, path, CONFIG) for path in self.paths]
        self.leader = 0
        self.producer_ids = [-1, FIRST_PRODUCER_ID, FIRST_PRODUCER_ID + 1]
        self.sequences = [0] * PRODUCERS
        self.last_batch: list[bytes | None] = [None] * PRODUCERS

    # ------------------------------------------------------------ helpers

    @property
    def leading(self) -> Partition:
        return self.replicas[self.leader]

    @property
    def following(self) -> Partition:
        return self.replicas[1 - self.leader]

    def model(self) -> Counter[bytes]:
        """The model counts the leader's log: what it holds is what was accepted."""
        return scan_versions(self.leading)

    def replicate(self, up_to: int | None = None) -> None:
        """The follower fetches the leader's log from its own end (up to ``up_to``)."""
        follower, leader = self.following, self.leading
        end = leader.log.log_end_offset if up_to is None else up_to
        while follower.log.log_end_offset < end:
            piece = leader.read_for_replica(follower.log.log_end_offset, 1 << 20)
            if piece is None:
                return
            batches = [
                b for b in decode_record_set(piece.read_bytes()) if b.header.base_offset < end
            ]
            if not batches:
                return
            data = piece.read_bytes()
            cut = sum(b.header.size_bytes for b in batches)
            follower.append_replicated(data[:cut], leader.log.log_end_offset)

    # ------------------------------------------------------------ rules

    @rule(producer=st.integers(0, PRODUCERS - 1), records=records_strategy)
    def append(self, producer: int, records: list[tuple[bytes | None, str]]) -> None:
        versions = self.model()
        ahead: Counter[bytes] = Counter()
        accept = True
        built = []
        for index, (key, kind) in enumerate(records):
            headers: tuple[tuple[str, bytes], ...] = ()
            if key is not None and kind != "plain":
                right = versions[key] + ahead[key]
                expected = right if kind == "right" else right + 1
                accept = accept and expected == right
                headers = ((EXPECTED_VERSION_HEADER, str(expected).encode()),)
            if key is not None:
                ahead[key] += 1
            built.append(Record(index, 1_000, key, b"v", headers))
        idempotent = producer > 0
        batch = encode_batch(
            built,
            producer_id=self.producer_ids[producer],
            producer_epoch=0 if idempotent else -1,
            base_sequence=self.sequences[producer] if idempotent else -1,
        )
        before = self.leading.log.log_end_offset
        result = self.leading.append(batch)
        if accept:
            assert result.error == ErrorCode.NONE, result
            assert result.base_offset == before
            if idempotent:
                self.sequences[producer] += len(built)
                self.last_batch[producer] = batch
        else:
            assert result.error == ErrorCode.INVALID_RECORD, result
            assert result.record_errors
            assert self.leading.log.log_end_offset == before, "nothing of a refused batch"

    @rule(producer=st.integers(1, PRODUCERS - 1))
    def retry_last_batch(self, producer: int) -> None:
        """An idempotent producer sends its last acknowledged batch again."""
        batch = self.last_batch[producer]
        if batch is None:
            return
        before = self.leading.log.log_end_offset
        result = self.leading.append(batch)
        assert result.error == ErrorCode.NONE, result
        assert self.leading.log.log_end_offset == before, "a duplicate is not appended again"

    @rule(fraction=st.floats(0, 1))
    def replicate_some(self, fraction: float) -> None:
        start = self.following.log.log_end_offset
        end = self.leading.log.log_end_offset
        self.replicate(start + int((end - start) * fraction))

    @rule(fraction=st.floats(0, 1))
    def leader_change(self, fraction: float) -> None:
        """The follower, holding some of the leader's tail, takes over; the old leader
        drops what the new one lacks and follows it."""
        self.replicate_some(fraction)
        old = self.leading
        self.leader = 1 - self.leader
        old.truncate_to(self.leading.log.log_end_offset)
        self.reset_producers()

    @rule(which=st.integers(0, 1))
    def restart(self, which: int) -> None:
        self.replicas[which].close()
        self.replicas[which] = Partition.open("accounts", 0, self.paths[which], CONFIG)

    @rule(which=st.integers(0, 1), torn=st.integers(0, 200))
    def kill(self, which: int, torn: int) -> None:
        """SIGKILL a replica: nothing flushed or snapshotted beyond what was; a torn tail."""
        crash_partition(self.replicas[which])
        segments = sorted(self.paths[which].glob("*.log"))
        size = segments[-1].stat().st_size
        os.truncate(segments[-1], max(0, size - torn))
        self.replicas[which] = Partition.open("accounts", 0, self.paths[which], CONFIG)
        follower = self.following
        if follower.log.log_end_offset > self.leading.log.log_end_offset:
            follower.truncate_to(self.leading.log.log_end_offset)
        if which == self.leader:
            self.reset_producers()

    def reset_producers(self) -> None:
        """After a leader change or a kill an idempotent producer may have lost its last
        batches; like librdkafka it starts over under a new producer id."""
        for producer in range(1, PRODUCERS):
            self.producer_ids[producer] += PRODUCERS
            self.sequences[producer] = 0
            self.last_batch[producer] = None

    # ------------------------------------------------------------ invariants

    @invariant()
    def versions_and_index_equal_a_scan(self) -> None:
        for replica in self.replicas:
            assert replica.entities is not None
            counts = scan_versions(replica)
            assert dict(replica.entities.items()) == counts
            for key in KEYS:
                assert replica.entities.version(key) == counts[key]
                pieces, _ = replica.entity_batches(key, 0, 1 << 30)
                assert [parse_header(p).base_offset for p in pieces] == scan_batches(replica, key)
            assert replica.entity_index_misses == 0, "every batch was where the index said"

    def teardown(self) -> None:
        for replica in self.replicas:
            if not replica.closed:
                replica.close()
        shutil.rmtree(self.root, ignore_errors=True)


EXAMPLES = int(os.environ.get("ENTITY_RULE_EXAMPLES", "200"))
"""Examples per run: 200 in the suite, 1,000 in ``make entity-race``."""
EntityRule.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=30, deadline=None
)
test_the_broker_accepts_what_the_sequential_model_accepts = EntityRule.TestCase
