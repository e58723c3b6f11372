"""Invariant checks that survive ``python -O``.

A broken invariant in the storage or replication path is a programmer error:
the process must stop rather than write a log that lies. ``assert`` vanishes
under ``-O``, so these paths call :func:`require` instead.
"""

from __future__ import annotations


class InvariantError(AssertionError):
    """An internal invariant does not hold. Never caught by design."""


def require(condition: bool, message: str) -> None:
    """Raise :class:`InvariantError` with ``message`` unless ``condition``."""
    if not condition:
        raise InvariantError(message)
