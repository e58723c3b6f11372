"""The entity index against a model: the batches of every key, through writes of runs,
merges, truncations, reopenings and damaged files."""

from __future__ import annotations

import random
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventplatform.log.replica.entity_index import (
    INDEX_DIRECTORY,
    LEVEL_MAX,
    RUNS_PER_MERGE,
    EntityIndex,
    Located,
    key_hash,
    open_run,
)

KEYS = [f"account-{n}".encode() for n in range(6)]
SMALL = 3  # memory entries per run: runs and merges happen within a few dozen batches


class Batch(NamedTuple):
    base: int
    last: int
    keys: tuple[bytes | None, ...]

    @property
    def located(self) -> Located:
        """Where the batch lies: made up, but a function of the batch."""
        return Located(self.last, self.base * 100, 61 + 10 * (self.last - self.base))

    def add_to(self, index: EntityIndex) -> None:
        index.add(self.base, self.last, self.keys, self.located.position, self.located.size)


class ModelLog:
    """The batches a partition holds, as the index must see them."""

    def __init__(self) -> None:
        self.batches: list[Batch] = []

    @property
    def end(self) -> int:
        return self.batches[-1].last + 1 if self.batches else 0

    def append(self, rng: random.Random) -> Batch:
        keys = tuple(rng.choice([*KEYS, None]) for _ in range(rng.randint(1, 3)))
        batch = Batch(self.end, self.end + len(keys) - 1, keys)
        self.batches.append(batch)
        return batch

    def truncate(self, offset: int) -> None:
        """Cut at a batch boundary at or below ``offset``, as a log truncates."""
        self.batches = [batch for batch in self.batches if batch.last < offset]

    def batches_of(self, key: bytes, from_offset: int) -> list[Located]:
        return [b.located for b in self.batches if key in b.keys and b.last >= from_offset]


def reopen(index: EntityIndex, directory: Path, log: ModelLog) -> EntityIndex:
    """Close the index, open it from its runs and add what they miss, as a partition does."""
    index.close()
    reopened = EntityIndex.open(directory, log.end, memory_entries_max=SMALL)
    for batch in log.batches:
        if batch.base >= reopened.end:
            batch.add_to(reopened)
    return reopened


def assert_matches(index: EntityIndex, log: ModelLog, rng: random.Random) -> None:
    for key in KEYS:
        for from_offset in (0, rng.randint(0, log.end + 1), log.end):
            assert index.batches_of(key, from_offset) == log.batches_of(key, from_offset), (
                key,
                from_offset,
            )


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=2**32),
    steps=st.integers(min_value=1, max_value=120),
)
def test_the_index_names_the_batches_a_scan_would(
    tmp_path_factory: pytest.TempPathFactory, seed: int, steps: int
) -> None:
    directory = tmp_path_factory.mktemp("index")
    rng = random.Random(seed)
    log = ModelLog()
    index = EntityIndex.open(directory, 0, memory_entries_max=SMALL)
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.75:
            batch = log.append(rng)
            batch.add_to(index)
        elif roll < 0.85 and log.end:
            offset = rng.randint(0, log.end)
            log.truncate(offset)
            index.truncate(log.end)
        elif roll < 0.95:
            index = reopen(index, directory, log)
        else:
            index.write_memory()
        assert_matches(index, log, rng)
    index = reopen(index, directory, log)
    assert_matches(index, log, rng)
    index.close()


def test_runs_merge_as_a_binary_counter_carries(tmp_path: Path) -> None:
    index = EntityIndex.open(tmp_path, 0, memory_entries_max=1)
    offset = 0
    for _ in range(RUNS_PER_MERGE**LEVEL_MAX * 3):
        Batch(offset, offset, (KEYS[offset % len(KEYS)],)).add_to(index)
        offset += 1
    assert [run.level for run in index.runs] == [LEVEL_MAX] * 3
    assert len(list((tmp_path / INDEX_DIRECTORY).iterdir())) == 3
    for run in index.runs:
        assert list(run.hashes) == sorted(run.hashes)
    assert [b.last_offset for b in index.batches_of(KEYS[0])] == list(range(0, offset, len(KEYS)))
    index.close()


def test_a_damaged_run_is_dropped_and_rebuilt_from_the_log(tmp_path: Path) -> None:
    rng = random.Random(7)
    log = ModelLog()
    index = EntityIndex.open(tmp_path, 0, memory_entries_max=SMALL)
    for _ in range(40):
        batch = log.append(rng)
        batch.add_to(index)
    index.close()
    runs = sorted((tmp_path / INDEX_DIRECTORY).iterdir())
    assert len(runs) >= 2
    middle = runs[len(runs) // 2]
    data = bytearray(middle.read_bytes())
    data[len(data) // 2] ^= 0x01
    middle.write_bytes(bytes(data))
    index = reopen(index, tmp_path, log)
    for path in (tmp_path / INDEX_DIRECTORY).iterdir():  # rebuilt, or gone
        open_run(path).close()
    assert_matches(index, log, rng)
    index.close()


def test_leftovers_of_an_interrupted_merge_give_way_to_the_merged_run(tmp_path: Path) -> None:
    rng = random.Random(3)
    log = ModelLog()
    index = EntityIndex.open(tmp_path, 0, memory_entries_max=1)
    for _ in range(RUNS_PER_MERGE - 1):
        batch = log.append(rng)
        batch.add_to(index)
    before = {path.name: path.read_bytes() for path in (tmp_path / INDEX_DIRECTORY).iterdir()}
    batch = log.append(rng)
    batch.add_to(index)  # the fourth run: merged
    assert len(index.runs) == 1
    index.close()
    for name, data in before.items():  # as if the merge died before its unlinks
        (tmp_path / INDEX_DIRECTORY / name).write_bytes(data)
    index = reopen(index, tmp_path, log)
    assert len(index.runs) == 1 and index.runs[0].level == 1
    assert len(list((tmp_path / INDEX_DIRECTORY).iterdir())) == 1
    assert_matches(index, log, rng)
    index.close()


def test_runs_past_the_log_end_are_dropped(tmp_path: Path) -> None:
    """After a kill the log may hold less than the runs describe (a torn tail)."""
    rng = random.Random(11)
    log = ModelLog()
    index = EntityIndex.open(tmp_path, 0, memory_entries_max=SMALL)
    for _ in range(30):
        batch = log.append(rng)
        batch.add_to(index)
    index.close()
    log.truncate(log.end // 2)
    index = reopen(index, tmp_path, log)
    assert index.end == log.end
    assert_matches(index, log, rng)
    index.close()


def test_the_hash_is_the_one_the_run_files_were_written_with() -> None:
    """Runs outlive the process: the hash is CRC-32 beside CRC-32C, never ``hash()``."""
    assert key_hash(b"account-1") == 0x784EB830_AA733561
    assert key_hash(b"") == 0
