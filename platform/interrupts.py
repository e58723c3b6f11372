"""Ctrl-C, noted, and Python's own SIGINT handler where trio needs it.

Python's handler raises KeyboardInterrupt in the next Python code that runs. When that
code was called from a C extension (librdkafka's binding importing a module, or
reading a config name), the extension may replace the exception with an error of its
own, and nothing shows it was an interrupt. :class:`InterruptNote` installs a handler
that notes each SIGINT before raising KeyboardInterrupt as Python's does, so the
``platform`` group can tell an interrupt from a defect whatever reached it.

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


class InterruptNote:
    """Notes each SIGINT that reaches Python while :meth:`installed`."""

    def __init__(self) -> None:
        self.seen = False

    def _handle(self, number: int, frame: FrameType | None) -> None:
        self.seen = True
        signal.default_int_handler(number, frame)

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Note SIGINT in the block where Python's own handler is in place (in the main
        thread, and not where other code installed one), then put Python's back."""
        if not _main_thread() or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            yield
            return
        signal.signal(signal.SIGINT, self._handle)
        try:
            yield
        finally:
            if signal.getsignal(signal.SIGINT) == self._handle:
                signal.signal(signal.SIGINT, signal.default_int_handler)


@contextmanager
def python_sigint() -> Iterator[None]:
    """Python's own SIGINT handler for the block, then the one before it again."""
    if not _main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
