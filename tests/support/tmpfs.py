"""A small, real file system for the tests that fill one up: a tmpfs of a given size,
mounted for the test and unmounted after it (mounting needs root, as CI has; a test that
cannot mount one is skipped, which fails under CI=true)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def mount(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *arguments], capture_output=True, text=True, check=False)


@contextmanager
def small_tmpfs(mount_point: Path, size_bytes: int) -> Iterator[Path]:
    """A tmpfs of ``size_bytes`` at ``mount_point`` (created) for the block."""
    mount_point.mkdir()
    mounted = mount("-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(mount_point))
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def grow(mount_point: Path, size_bytes: int) -> None:
    """Give the tmpfs at ``mount_point`` room again."""
    grown = mount("-o", f"remount,size={size_bytes}", str(mount_point))
    assert grown.returncode == 0, grown.stderr
