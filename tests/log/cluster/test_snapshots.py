"""Snapshots of the metadata log on disk: the file format and its checks, the log
truncated below the snapshots kept, a restart from them, and what a torn or corrupt
snapshot does; and the metadata image's round trip through a snapshot."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from eventplatform.log.cluster import snapshot_file
from eventplatform.log.cluster.metadata import (
    BrokerState,
    CreateTopic,
    MetadataImage,
    PartitionAssignment,
    PartitionChange,
    PartitionState,
    ProducerIds,
    RegisterBroker,
    TopicState,
    UnfenceBroker,
    decode_image,
    encode_image,
    image_document,
)
from eventplatform.log.cluster.quorum_storage import (
    CORRUPT_SUFFIX,
    LOG_DIRECTORY,
    SegmentQuorumStorage,
)
from eventplatform.log.cluster.raft import LOG_START, Entry, RaftNode, SnapshotError, SnapshotId
from eventplatform.log.storage.files import TEMPORARY_SUFFIX

SEGMENT_BYTES = 300  # a few entries a segment, so snapshots delete whole segments


def entries(count: int, epoch: int = 1) -> list[Entry]:
    return [Entry(epoch, f"entry-{n}".encode()) for n in range(count)]


def segments(directory: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in (directory / LOG_DIRECTORY).glob("*.log"))


# ---------------------------------------------------------------- the file


def test_a_snapshot_file_round_trips_and_names_its_offset_and_epoch() -> None:
    snapshot = SnapshotId(1234, 7)
    assert snapshot_file.file_name(snapshot) == "00000000000000001234-0000000007.checkpoint"
    assert snapshot_file.parse_file_name(snapshot_file.file_name(snapshot)) == snapshot
    assert snapshot_file.parse_file_name("00000000000000001234-0000000007.checkpoint.tmp") is None
    content = snapshot_file.encode(snapshot, b"the state")
    assert snapshot_file.decode(content, snapshot, "x") == b"the state"


@pytest.mark.parametrize("cut", [0, 10, 29, -1])
def test_a_torn_snapshot_file_is_refused(cut: int) -> None:
    content = snapshot_file.encode(SnapshotId(5, 1), b"the state")
    with pytest.raises(SnapshotError, match="snap-file is torn"):
        snapshot_file.decode(content[:cut], SnapshotId(5, 1), "snap-file")


def test_every_flipped_byte_of_a_snapshot_file_is_caught() -> None:
    content = snapshot_file.encode(SnapshotId(5, 1), b"the state")
    for position in range(len(content)):
        damaged = bytearray(content)
        damaged[position] ^= 0x20
        with pytest.raises(SnapshotError, match="snap-file"):
            snapshot_file.decode(bytes(damaged), SnapshotId(5, 1), "snap-file")


def test_a_file_holding_another_snapshot_than_its_name_says_is_refused() -> None:
    content = snapshot_file.encode(SnapshotId(5, 1), b"the state")
    with pytest.raises(SnapshotError, match="not what its name says"):
        snapshot_file.decode(content, SnapshotId(6, 1), "snap-file")


# ---------------------------------------------------------------- the storage


def test_snapshots_truncate_the_log_below_the_oldest_kept_and_survive_a_restart(
    tmp_path: Path,
) -> None:
    storage = SegmentQuorumStorage(tmp_path, segment_bytes=SEGMENT_BYTES)
    storage.append(entries(40))
    assert len(segments(tmp_path)) > 4 and storage.log_start() == LOG_START
    storage.write_snapshot(SnapshotId(10, 1), b"s10")
    assert storage.log_start() == SnapshotId(10, 1)
    storage.write_snapshot(SnapshotId(25, 1), b"s25")
    storage.write_snapshot(SnapshotId(33, 1), b"s33")
    # two kept; the log starts at the older, whole segments below it are gone
    assert storage.snapshots() == [SnapshotId(25, 1), SnapshotId(33, 1)]
    assert sorted(p.name for p in tmp_path.glob("*.checkpoint")) == [
        snapshot_file.file_name(SnapshotId(25, 1)),
        snapshot_file.file_name(SnapshotId(33, 1)),
    ]
    assert storage.log_start() == SnapshotId(25, 1)
    assert segments(tmp_path)[0] <= 25 < segments(tmp_path)[1]
    assert storage.entries() == entries(40)[25:]
    storage.append([Entry(2, b"more")])
    storage.close()

    storage = SegmentQuorumStorage(tmp_path, segment_bytes=SEGMENT_BYTES)
    assert storage.log_start() == SnapshotId(25, 1)
    assert storage.entries() == [*entries(40)[25:], Entry(2, b"more")]
    assert storage.read_snapshot(SnapshotId(33, 1)) == b"s33"
    node = RaftNode(1, [1, 2, 3], storage, 0)
    assert (node.log_start, node.end_offset, node.high_watermark) == (25, 41, 33)
    assert node.entry(33) == Entry(1, b"entry-33")
    storage.close()


def test_installing_a_snapshot_restarts_the_log_at_its_end(tmp_path: Path) -> None:
    storage = SegmentQuorumStorage(tmp_path, segment_bytes=SEGMENT_BYTES)
    storage.append(entries(12))
    storage.write_snapshot(SnapshotId(5, 1), b"s5")
    storage.install_snapshot(SnapshotId(30, 4), b"s30")
    assert storage.snapshots() == [SnapshotId(30, 4)] and storage.entries() == []
    storage.append([Entry(4, b"next")])
    storage.close()
    storage = SegmentQuorumStorage(tmp_path, segment_bytes=SEGMENT_BYTES)
    assert storage.log_start() == SnapshotId(30, 4)
    assert storage.entries() == [Entry(4, b"next")]
    assert storage.log.log_start_offset == 30
    storage.close()


def test_a_snapshot_left_half_written_by_a_crash_is_removed(tmp_path: Path) -> None:
    storage = SegmentQuorumStorage(tmp_path)
    storage.append(entries(10))
    storage.write_snapshot(SnapshotId(4, 1), b"s4")
    storage.close()
    torn = tmp_path / (snapshot_file.file_name(SnapshotId(8, 1)) + TEMPORARY_SUFFIX)
    torn.write_bytes(snapshot_file.encode(SnapshotId(8, 1), b"s8")[:20])
    storage = SegmentQuorumStorage(tmp_path)
    assert not torn.exists()
    assert storage.snapshots() == [SnapshotId(4, 1)]
    assert len(storage.entries()) == 6
    storage.close()


def test_a_corrupt_newest_snapshot_falls_back_to_the_older_one_and_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    storage = SegmentQuorumStorage(tmp_path, segment_bytes=SEGMENT_BYTES)
    storage.append(entries(30))
    storage.write_snapshot(SnapshotId(10, 1), b"s10")
    storage.write_snapshot(SnapshotId(20, 1), b"s20")
    storage.close()
    newest = tmp_path / snapshot_file.file_name(SnapshotId(20, 1))
    damaged = bytearray(newest.read_bytes())
    damaged[-6] ^= 0xFF
    newest.write_bytes(bytes(damaged))

    storage = SegmentQuorumStorage(tmp_path, segment_bytes=SEGMENT_BYTES)
    assert str(newest) in caplog.text and "corrupt" in caplog.text
    assert newest.with_name(newest.name + CORRUPT_SUFFIX).exists()
    assert storage.snapshots() == [SnapshotId(10, 1)]
    assert storage.entries() == entries(30)[10:]  # nothing committed is lost
    node = RaftNode(1, [1, 2, 3], storage, 0)
    assert (node.log_start, node.high_watermark, node.end_offset) == (10, 10, 30)
    storage.close()


def test_with_no_readable_snapshot_covering_the_log_start_the_storage_refuses_to_open(
    tmp_path: Path,
) -> None:
    storage = SegmentQuorumStorage(tmp_path, segment_bytes=SEGMENT_BYTES)
    storage.append(entries(30))
    storage.write_snapshot(SnapshotId(10, 1), b"s10")
    storage.write_snapshot(SnapshotId(20, 1), b"s20")
    storage.close()
    for path in tmp_path.glob("*.checkpoint"):
        path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(SnapshotError, match=r"starts at offset 10 and no readable snapshot"):
        SegmentQuorumStorage(tmp_path, segment_bytes=SEGMENT_BYTES)
    assert len(list(tmp_path.glob("*" + CORRUPT_SUFFIX))) == 2


def test_reading_a_snapshot_damaged_after_the_start_names_the_file(tmp_path: Path) -> None:
    storage = SegmentQuorumStorage(tmp_path)
    storage.append(entries(5))
    storage.write_snapshot(SnapshotId(3, 1), b"s3")
    path = storage.snapshot_path(SnapshotId(3, 1))
    path.write_bytes(b"junk")
    with pytest.raises(SnapshotError, match=str(path)):
        storage.read_snapshot(SnapshotId(3, 1))
    storage.close()


# ---------------------------------------------------------------- the image


def rich_image() -> MetadataImage:
    image = MetadataImage()
    for broker in (1, 2, 3):
        image.apply(RegisterBroker(broker, 1, f"host-{broker}", 9090 + broker, rack="r1"))
        image.apply(UnfenceBroker(broker, 1))
    assignments = tuple(PartitionAssignment((1, 2, 3), (1, 2, 3), 1) for _ in range(3))
    image.apply(CreateTopic("orders", "id-1", assignments, {"min.insync.replicas": "2"}))
    image.apply(PartitionChange("orders", 1, leader=2, isr=(2, 3)))
    image.apply(ProducerIds(2, 0, 1000))
    return image


def test_an_image_round_trips_through_a_snapshot_file(tmp_path: Path) -> None:
    image = rich_image()
    storage = SegmentQuorumStorage(tmp_path)
    storage.append(entries(20))
    storage.write_snapshot(SnapshotId(20, 1), encode_image(image))
    storage.close()
    storage = SegmentQuorumStorage(tmp_path)
    restored = decode_image(storage.read_snapshot(SnapshotId(20, 1)))
    storage.close()
    assert restored == image
    assert restored.brokers[2] == BrokerState(2, 1, "host-2", 9092, "r1", fenced=False)
    assert restored.topics["orders"].partitions[1].isr == (2, 3)


@pytest.mark.parametrize("state_type", [BrokerState, PartitionState, TopicState, MetadataImage])
def test_every_field_of_the_image_is_carried(state_type: type) -> None:
    """The image is written from the dataclasses' fields: a field added to one of them
    appears in snapshots, and comes back, with no change to the encoding."""
    document = image_document(rich_image())
    samples = {
        MetadataImage: document,
        BrokerState: document["brokers"]["1"],
        TopicState: document["topics"]["orders"],
        PartitionState: document["topics"]["orders"]["partitions"][0],
    }
    names = {field.name for field in dataclasses.fields(state_type)}
    assert names == set(samples[state_type])


def test_an_image_written_before_a_field_with_a_default_existed_still_reads() -> None:
    document = image_document(rich_image())
    del document["next_producer_id"]  # as an older image, without a later field
    document["brokers"]["1"]["added_later"] = True  # and one from a newer version
    restored = decode_image(orjson.dumps(document))
    assert restored.next_producer_id == 0 and restored.brokers[1].host == "host-1"


def test_a_snapshot_past_the_log_end_restarts_the_log_there(tmp_path: Path) -> None:
    """A crash while installing a snapshot from the leader: the file is whole, the log
    not yet restarted. The next start finishes the install."""
    storage = SegmentQuorumStorage(tmp_path)
    storage.append(entries(10))
    storage.write_snapshot(SnapshotId(4, 1), b"s4")
    storage.close()
    installed = SnapshotId(30, 4)
    path = tmp_path / snapshot_file.file_name(installed)
    path.write_bytes(snapshot_file.encode(installed, b"s30"))
    storage = SegmentQuorumStorage(tmp_path)
    assert storage.log_start() == installed and storage.entries() == []
    assert storage.snapshots() == [installed]
    assert not (tmp_path / snapshot_file.file_name(SnapshotId(4, 1))).exists()
    storage.close()
