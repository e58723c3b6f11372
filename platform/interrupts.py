"""Ctrl-C, noted, and Python's own SIGINT handler where trio needs it.

Python's handler raises KeyboardInterrupt in the next Python code that runs. When that
code was called from a C extension (librdkafka's binding importing a module, or
reading a config name), the extension may replace the exception with an error of its
own, and nothing shows it was an interrupt. While a command runs under
:func:`noting_sigint`, SIGINT goes to a handler that notes it before raising
KeyboardInterrupt as Python's does; a handler of the platform's own that ends the work
another way (Spark's jobs are cancelled, not interrupted: :mod:`..spark_projections.session`)
notes it with :func:`note_interrupt`. So the ``platform`` group can tell an interrupt
from a defect whatever exception reached it (:func:`interrupt_noted`).

trio keeps KeyboardInterrupt out of its own code only when it finds Python's handler in
place as ``trio.run`` starts; :func:`python_sigint` puts it back for that long. Both
act only in the main thread, where Python runs signal handlers.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

_noted = threading.Event()


def note_interrupt() -> None:
    """Ctrl-C reached the process: whatever the command raises now reads as its end."""
    _noted.set()


def interrupt_noted() -> bool:
    return _noted.is_set()


def _noting_handler(number: int, frame: FrameType | None) -> None:
    note_interrupt()
    signal.default_int_handler(number, frame)


@contextmanager
def noting_sigint() -> Iterator[None]:
    """Note each SIGINT in the block, where Python's own handler is in place (in the main
    thread, and not where other code installed one), then put Python's back. The note
    starts clear."""
    _noted.clear()
    if not in_main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    signal.signal(signal.SIGINT, _noting_handler)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is _noting_handler:
            signal.signal(signal.SIGINT, signal.default_int_handler)


@contextmanager
def python_sigint() -> Iterator[None]:
    """Python's own SIGINT handler for the block, then the one before it again."""
    if not in_main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def in_main_thread() -> bool:
    """Whether this is the main thread, the one Python runs signal handlers in."""
    return threading.current_thread() is threading.main_thread()
