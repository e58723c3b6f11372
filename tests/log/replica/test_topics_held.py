"""A cluster broker holds only some partitions of a topic: the registry creates, adds,
drops and reopens exactly those, and ``topics.json`` keeps which across restarts."""

from __future__ import annotations

from pathlib import Path

from eventplatform.log.protocol import ErrorCode
from eventplatform.log.replica.topics import TopicRegistry
from eventplatform.log.storage import LogConfig
from eventplatform.log.storage.record_batch import Record, encode_batch


def clock_ms() -> int:
    return 1_700_000_000_000


def directories(data_dir: Path) -> set[str]:
    return {entry.name for entry in data_dir.iterdir() if entry.is_dir()}


def test_only_held_partitions_have_files_and_survive_a_restart(tmp_path: Path) -> None:
    registry = TopicRegistry.open(tmp_path, LogConfig(), clock_ms)
    registry.create("t", 3, {}, hosted={0, 2})
    assert directories(tmp_path) == {"t-0", "t-2"}
    assert [p.index for p in registry.partitions()] == [0, 2]
    assert registry.partition("t", 1) is None
    assert registry.absence_error("t", 1) == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert registry.absence_error("t", 3) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    held = registry.host("t", 1)
    assert held.log.log_end_offset == 0 and "t-1" in directories(tmp_path)
    written = registry.partition("t", 0)
    assert written is not None
    written.append(encode_batch([Record(0, clock_ms(), None, b"v")]))
    registry.drop("t", 0)
    assert registry.partition("t", 0) is None
    assert directories(tmp_path) == {"t-1", "t-2"}
    registry.add_partitions("t", 5, hosted={4})
    assert directories(tmp_path) == {"t-1", "t-2", "t-4"}
    registry.close()

    (tmp_path / "t-3").mkdir()  # a crash left a partition this broker does not hold
    reopened = TopicRegistry.open(tmp_path, LogConfig(), clock_ms)
    try:
        topic = reopened.get("t")
        assert topic is not None
        assert [p is not None for p in topic.partitions] == [False, True, True, False, True]
        assert directories(tmp_path) == {"t-1", "t-2", "t-4"}
    finally:
        reopened.close()


def test_a_topic_file_from_before_held_partitions_holds_them_all(tmp_path: Path) -> None:
    (tmp_path / "topics.json").write_text(
        '{"t": {"id": "00112233445566778899aabbccddeeff", "partitions": 2, "configs": {}}}'
    )
    registry = TopicRegistry.open(tmp_path, LogConfig(), clock_ms)
    try:
        assert [p.index for p in registry.partitions()] == [0, 1]
    finally:
        registry.close()
