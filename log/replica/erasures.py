"""What a replica owes the erasures the cluster committed for its partition.

An erasure is committed once, in the cluster's metadata (or, on a broker on its own,
by the broker), and every replica carries it out on its own files
(:func:`~eventplatform.log.storage.erasure.erase_records`). Until it has, the records
are still there, so the replica must not serve them: :class:`ErasureLedger` keeps the
offsets committed (``known``) and those not yet done on this replica's log
(``pending``), and :meth:`ErasureLedger.read_bound` is the offset reads stop before.

A record reaches a replica again when it appends it: a follower that truncated and
fetched the offset anew, or one that had not fetched it yet when the erasure was
committed. :meth:`ErasureLedger.appended` makes such offsets pending again, so the
follower erases them too. Erasing a record that is already erased changes nothing,
which is why a replica that starts takes every committed erasure as pending.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

import trio


class ErasureLedger:
    """See the module docstring. Owned by the partition's owner (the broker's loop)."""

    def __init__(self) -> None:
        self._known: list[int] = []
        self._pending: set[int] = set()
        self._changed = trio.Event()
        self.version = -1
        """The cluster's erasure count when this ledger last took in its erasures."""

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def commit(self, offsets: Iterable[int]) -> bool:
        """Take in committed erasures; True if any offset was new (and is now pending)."""
        new = set(offsets).difference(self._known)
        if not new:
            return False
        self._known = sorted(new.union(self._known))
        self._pending |= new
        return True

    def appended(self, first: int, end: int) -> bool:
        """Records ``[first, end)`` were appended: the committed offsets among them are
        pending again. True if there were any."""
        low = bisect.bisect_left(self._known, first)
        high = bisect.bisect_left(self._known, end)
        if low == high:
            return False
        self._pending.update(self._known[low:high])
        return True

    def read_bound(self) -> int | None:
        """The first offset reads must stop before (a record not erased here yet)."""
        return min(self._pending) if self._pending else None

    def due(self, log_start: int, log_end: int) -> list[int]:
        """The pending offsets the log holds, sorted; those below ``log_start`` are gone
        with their segments and no longer pending."""
        self._pending = {offset for offset in self._pending if offset >= log_start}
        return sorted(offset for offset in self._pending if offset < log_end)

    def done(self, offsets: Iterable[int]) -> None:
        """``offsets`` are erased on this replica's log."""
        self._pending.difference_update(offsets)
        self._changed.set()
        self._changed = trio.Event()

    def is_done(self, offsets: Iterable[int]) -> bool:
        return self._pending.isdisjoint(offsets)

    async def wait_done(self, offsets: Iterable[int]) -> None:
        """Until every one of ``offsets`` is erased here (the caller bounds the wait)."""
        wanted = set(offsets)
        while not self._pending.isdisjoint(wanted):
            await self._changed.wait()

    def forget(self) -> None:
        """The replica's log is gone (deleted): nothing is owed any more."""
        self._known.clear()
        self._pending.clear()
        self._changed.set()


class ErasureWork:
    """The broker's wake-up for its erasure task: set when some partition's ledger has
    offsets pending."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def wake(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        self._event = trio.Event()
