"""The index files are memory maps of sparse files: a store to a page that no block backs
yet needs one from the file system, and when it has none the kernel kills the process
with SIGBUS instead of failing a write. So an index never stores to a page it has not
reserved first (posix_fallocate, before the log data of the append is written): a full
file system then fails the append with KafkaStorageError, the log goes offline, and the
process stays up.

The case is built on a real tmpfs of a few MiB (mounting needs root, as CI has): batches of
one page each are appended until the next index entry starts a new page, then a filler
file takes all the room but the one page the next batch's data needs. The append runs in
a child process, which SIGBUS would kill.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from tmpfs import small_tmpfs

FILE_SYSTEM_BYTES = 4 * 1024 * 1024

CHILD = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from eventplatform.log.storage import LogConfig, PartitionLog
    from eventplatform.log.storage.errors import KafkaStorageError
    from eventplatform.log.storage.record_batch import Record, encode_batch

    root = Path(sys.argv[1])
    PAGE = 4096
    config = LogConfig(index_interval_bytes=1)  # an index entry for every batch
    log = PartitionLog.open(root / "t-0", config, clock_ms=lambda: 1_000)
    def batch_of(size):
        for value_bytes in range(size - 200, size):
            batch = encode_batch([Record(0, 1_000, b"k", b"v" * value_bytes)])
            if len(batch) == size:
                return batch
        raise AssertionError(size)

    batch = batch_of(PAGE)  # each append needs exactly one new page of log data
    index = log.active_segment.offset_index
    log.append(bytearray(batch))
    while index.entries == 0 or index.entries * index.entry.size % PAGE:
        log.append(bytearray(batch))  # until the next entry starts a page
    log.flush()
    stats = os.statvfs(root)
    room = stats.f_bavail * stats.f_frsize
    filler = os.open(root / "filler", os.O_CREAT | os.O_WRONLY)
    os.posix_fallocate(filler, 0, room - PAGE)  # one page left: the next batch's data
    os.close(filler)
    try:
        log.append(bytearray(batch))
        log.append(bytearray(batch))
    except KafkaStorageError as exc:
        print("offline:", exc)
    else:
        print("appended")
    """
)


@pytest.fixture
def small_file_system(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "disk", FILE_SYSTEM_BYTES) as mount_point:
        yield mount_point


def test_an_index_page_the_full_file_system_cannot_back_fails_the_append_not_the_process(
    small_file_system: Path,
) -> None:
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(small_file_system)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == 0, f"the process died ({child.returncode}): {child.stderr[-2000:]}"
    assert child.stdout.startswith("offline:"), child.stdout + child.stderr[-2000:]
