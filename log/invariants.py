"""Invariant checks that survive ``python -O``, and the one way a broken one stops the process.

A broken invariant in the storage or replication path is a programmer error:
the process must stop rather than write a log that lies. ``assert`` vanishes
under ``-O``, so these paths call :func:`require` instead.

:class:`InvariantError` derives from ``BaseException``, not ``Exception``, so
the catch-alls that keep one bad request from taking the broker down
(``except Exception`` around a connection, a controller request, a cleaning
pass) let it through, as they let ``KeyboardInterrupt`` through. It unwinds
to the process's top-level runner, whose :func:`crash_on_invariant_error`
logs it and ends the process at once with :data:`CRASH_EXIT_STATUS`. Nothing
on the way closes the logs cleanly: the next start recovers them as after a
kill.

Input from outside (a frame, a file written by an older or broken process) is
never checked with :func:`require`: that is an operating error, answered or
refused with the owning package's own exception.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator

CRASH_EXIT_STATUS = 70
"""The exit status after a broken invariant (``EX_SOFTWARE`` of sysexits.h)."""


class InvariantError(BaseException):
    """An internal invariant does not hold. Never caught, except by the top-level runner."""


def require(condition: bool, message: str) -> None:
    """Raise :class:`InvariantError` with ``message`` unless ``condition``."""
    if not condition:
        raise InvariantError(message)


def find_invariant_error(error: BaseException) -> InvariantError | None:
    """The :class:`InvariantError` ``error`` is or carries (in an exception group, or as the
    cause or context of another exception), or None."""
    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, InvariantError):
            return current
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None


@contextlib.contextmanager
def crash_on_invariant_error(logger: logging.Logger) -> Iterator[None]:
    """Around a process's main loop: a broken invariant is logged (CRITICAL, with its
    traceback) and ends the process with :data:`CRASH_EXIT_STATUS`, running no cleanup.

    Every other exception passes through unchanged."""
    try:
        yield
    except BaseException as error:
        found = find_invariant_error(error)
        if found is None:
            raise
        logger.critical("stopping: broken invariant: %s", found, exc_info=found)
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(CRASH_EXIT_STATUS)
