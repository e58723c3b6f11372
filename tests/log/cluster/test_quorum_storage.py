"""A voter's durable state: the metadata log in segment files and the vote, across
restarts, truncations and a torn tail; a voter restarted on it keeps its log and epoch."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventplatform.log.cluster.quorum_storage import (
    LOG_DIRECTORY,
    STATE_FILE,
    QuorumStateError,
    SegmentQuorumStorage,
)
from eventplatform.log.cluster.raft import Entry, RaftNode, Role
from eventplatform.log.invariants import InvariantError
from eventplatform.log.storage.files import CLEAN_SHUTDOWN_FILE


def reopened(directory: Path, storage: SegmentQuorumStorage) -> SegmentQuorumStorage:
    storage.close()
    return SegmentQuorumStorage(directory)


def test_entries_and_the_vote_survive_a_restart(tmp_path: Path) -> None:
    storage = SegmentQuorumStorage(tmp_path)
    assert storage.load_state() == (0, None) and storage.entries() == []
    storage.save_state(3, 2)
    storage.append([Entry(1, b"a"), Entry(3, b"b")])
    storage.append([Entry(3, b"")])
    storage = reopened(tmp_path, storage)
    assert storage.load_state() == (3, 2)
    assert storage.entries() == [Entry(1, b"a"), Entry(3, b"b"), Entry(3, b"")]
    storage.truncate(1)
    storage.append([Entry(4, b"c")])
    storage = reopened(tmp_path, storage)
    assert storage.entries() == [Entry(1, b"a"), Entry(4, b"c")]
    storage.close()


def test_a_torn_tail_is_cut_at_the_last_whole_entry(tmp_path: Path) -> None:
    storage = SegmentQuorumStorage(tmp_path)
    storage.append([Entry(1, b"a"), Entry(1, b"b")])
    storage.close()
    segment = next((tmp_path / LOG_DIRECTORY).glob("*.log"))
    with segment.open("ab") as handle:
        handle.write(b"\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x40torn")
    (tmp_path / LOG_DIRECTORY / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)  # a crash
    storage = SegmentQuorumStorage(tmp_path)
    assert storage.entries() == [Entry(1, b"a"), Entry(1, b"b")]
    assert storage.log.recovered_bytes_truncated > 0
    storage.close()


def test_an_unreadable_vote_refuses_to_start(tmp_path: Path) -> None:
    storage = SegmentQuorumStorage(tmp_path)
    (tmp_path / STATE_FILE).write_text("{oops")
    with pytest.raises(QuorumStateError, match="unreadable"):
        storage.load_state()
    storage.close()


def test_a_restarted_voter_keeps_its_log_and_epoch(tmp_path: Path) -> None:
    storage = SegmentQuorumStorage(tmp_path)
    node = RaftNode(1, [1], storage, 0)
    node.tick(5_000)
    node.propose([b"x", b"y"])
    storage = reopened(tmp_path, storage)
    again = RaftNode(1, [1], storage, 10_000)
    assert again.epoch == 1 and again.log == node.log
    again.tick(20_000)
    assert again.role is Role.LEADER and again.epoch == 2
    assert [entry.payload for entry in again.committed()] == [b"", b"x", b"y", b""]
    storage.close()


@pytest.mark.parametrize(
    ("epoch", "voted_for"), [(2**31, None), (2**64 + 5, 1), (-1, None), (3, 2**31), (3, -2)]
)
def test_a_vote_it_could_not_read_back_is_never_written(
    tmp_path: Path, epoch: int, voted_for: int | None
) -> None:
    storage = SegmentQuorumStorage(tmp_path)
    storage.save_state(7, 1)
    with pytest.raises(InvariantError):
        storage.save_state(epoch, voted_for)
    storage = reopened(tmp_path, storage)
    assert storage.load_state() == (7, 1)
    storage.close()


def test_the_largest_epoch_reads_back(tmp_path: Path) -> None:
    storage = SegmentQuorumStorage(tmp_path)
    storage.save_state(2**31 - 1, 2**31 - 1)
    storage = reopened(tmp_path, storage)
    assert storage.load_state() == (2**31 - 1, 2**31 - 1)
    storage.close()


def test_a_voter_at_the_last_epoch_stays_up_and_does_not_stand_again(tmp_path: Path) -> None:
    storage = SegmentQuorumStorage(tmp_path)
    storage.save_state(2**31 - 1, None)  # where an in-range forged vote can bring a voter
    node = RaftNode(1, [1, 2, 3], storage, 0)
    for now_ms in range(0, 60_000, 500):
        assert node.tick(now_ms) == []
    assert node.epoch == 2**31 - 1 and node.role is Role.UNATTACHED
    storage = reopened(tmp_path, storage)
    assert storage.load_state() == (2**31 - 1, None)
    storage.close()


def test_an_entry_of_an_epoch_past_int32_is_never_appended(tmp_path: Path) -> None:
    storage = SegmentQuorumStorage(tmp_path)
    storage.append([Entry(1, b"a")])
    with pytest.raises(InvariantError):
        storage.append([Entry(2, b"b"), Entry(2**31, b"c")])
    storage = reopened(tmp_path, storage)
    assert storage.entries() == [Entry(1, b"a")]
    storage.close()


def test_a_vote_file_with_an_epoch_out_of_range_refuses_to_start(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text(
        '{"version": 1, "epoch": 18446744073709551621, "voted_for": 2}'
    )
    with pytest.raises(QuorumStateError):
        SegmentQuorumStorage(tmp_path).load_state()
