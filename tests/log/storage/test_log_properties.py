"""Stateful property test: random appends, rolls, retention, truncations and reopens."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path

from crash_simulation import crash
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from eventplatform.log.storage import Cleaner, Compression, LogConfig, PartitionLog, Record
from eventplatform.log.storage.record_batch import decode_record_set, encode_batch

START_MS = 1_700_000_000_000
RETENTION_MS = 10_000


class Clock:
    def __init__(self) -> None:
        self.now_ms = START_MS

    def __call__(self) -> int:
        return self.now_ms


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="log-machine-"))
        self.clock = Clock()
        self.config = LogConfig(
            segment_bytes=700,
            index_interval_bytes=100,
            retention_ms=RETENTION_MS,
            file_delete_delay_ms=0,
        )
        self.log = PartitionLog.open(self.directory, self.config, clock_ms=self.clock)
        # The model: batches as (base offset, [(offset, value, timestamp)]).
        self.batches: list[tuple[int, list[tuple[int, bytes, int]]]] = []
        self.log_start = 0
        self.log_end = 0
        self.serial = 0

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    @rule(
        count=st.integers(1, 6),
        codec=st.sampled_from(list(Compression)),
        age_ms=st.integers(0, 20_000),
    )
    def append(self, count: int, codec: Compression, age_ms: int) -> None:
        timestamp = self.clock.now_ms - age_ms
        values = []
        for _ in range(count):
            self.serial += 1
            values.append(f"value-{self.serial}".encode())
        records = [Record(i, timestamp, b"key", value) for i, value in enumerate(values)]
        info = self.log.append(encode_batch(records, compression=codec))
        assert info.base_offset == self.log_end
        self.batches.append(
            (self.log_end, [(self.log_end + i, value, timestamp) for i, value in enumerate(values)])
        )
        self.log_end += count

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(milliseconds=st.integers(0, 15_000))
    def advance_clock(self, milliseconds: int) -> None:
        self.clock.now_ms += milliseconds

    @rule()
    def apply_retention(self) -> None:
        horizon = self.clock.now_ms - RETENTION_MS
        before = self.log.log_start_offset
        Cleaner().apply_retention(self.log)
        after = self.log.log_start_offset
        assert after >= before
        for _, records in self.batches:
            for offset, _, timestamp in records:
                if before <= offset < after:
                    assert timestamp < horizon, (
                        "retention deleted a record younger than retention.ms"
                    )
        self._drop_below(after)

    @precondition(lambda self: self.log_end > self.log_start)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(self.log_start, self.log_end))
        self.log.truncate_to(target)
        kept = [batch for batch in self.batches if batch[1][-1][0] < target]
        if target <= self.log_start:
            self.log_start = self.log_end = target
            kept = []
        else:
            self.log_end = (
                min(target, self.batches[len(kept)][0]) if len(kept) < len(self.batches) else target
            )
        self.batches = kept

    @rule()
    def reopen_cleanly(self) -> None:
        self.log.close()
        self.log = PartitionLog.open(self.directory, self.config, clock_ms=self.clock)
        assert self.log.opened_cleanly

    @rule()
    def reopen_after_crash(self) -> None:
        crash(self.log)
        self.log = PartitionLog.open(self.directory, self.config, clock_ms=self.clock)
        assert not self.log.opened_cleanly

    @rule(data=st.data())
    def reopen_with_a_damaged_index_entry(self, data: st.DataObject) -> None:
        """A clean shutdown, then garbage in one entry of an offset or time index."""
        self.log.close()
        damaged = sorted(
            path
            for path in self.directory.iterdir()
            if path.suffix in (".index", ".timeindex") and path.stat().st_size
        )
        if damaged:
            path = data.draw(st.sampled_from(damaged))
            entry_bytes = 8 if path.suffix == ".index" else 12
            content = bytearray(path.read_bytes())
            slot = data.draw(st.integers(0, len(content) // entry_bytes - 1))
            # Keep the entry's key (offset or timestamp) or not: either way it may now lie.
            start = slot * entry_bytes + data.draw(st.sampled_from([0, entry_bytes - 4]))
            end = (slot + 1) * entry_bytes
            content[start:end] = data.draw(st.binary(min_size=end - start, max_size=end - start))
            path.write_bytes(bytes(content))
        self.log = PartitionLog.open(self.directory, self.config, clock_ms=self.clock)
        assert self.log.opened_cleanly
        self._check_every_offset_and_timestamp()

    def _check_every_offset_and_timestamp(self) -> None:
        """A read at any offset starts with the batch holding it; a timestamp lookup finds
        the first offset stamped at or after it."""
        values = {offset: value for _, records in self.batches for offset, value, _ in records}
        for offset, value in values.items():
            found = self.log.read(offset, 1)
            assert found is not None
            first = decode_record_set(found.read_bytes())[0]
            assert first.header.base_offset <= offset <= first.header.last_offset
            assert {record.offset: record.value for record in first.records}[offset] == value
        stamped = [
            (timestamp, offset) for _, records in self.batches for offset, _, timestamp in records
        ]
        for target in sorted({timestamp for timestamp, _ in stamped})[::3]:
            expected = min(offset for timestamp, offset in stamped if timestamp >= target)
            found_offset = self.log.offset_for_timestamp(target)
            assert found_offset is not None and found_offset.offset == expected

    def _drop_below(self, offset: int) -> None:
        self.log_start = max(self.log_start, offset)
        self.batches = [
            (base, [r for r in records if r[0] >= offset]) for base, records in self.batches
        ]
        self.batches = [(base, records) for base, records in self.batches if records]

    @invariant()
    def reads_back_exactly_the_model(self) -> None:
        assert self.log.log_end_offset == self.log_end
        assert self.log.log_start_offset == self.log_start
        expected = [(offset, value) for _, records in self.batches for offset, value, _ in records]
        actual = [(record.offset, record.value) for record in self.log.iter_records()]
        assert actual == expected
        offsets = [offset for offset, _ in actual]
        assert all(a < b for a, b in itertools.pairwise(offsets))


LogMachine.TestCase.settings = settings(max_examples=120, stateful_step_count=30, deadline=None)
TestPartitionLogStateMachine = LogMachine.TestCase
