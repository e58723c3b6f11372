"""The broker-wide budget for request bytes (``queued.max.request.bytes``).

Every connection reads a request frame's 4-byte size first, then reserves that
many bytes here before it reads the body, and releases them once the request
has been handled. While the pool cannot cover a frame, that connection stops
reading: its client's bytes wait in the kernel's socket buffers and then in
the client itself (TCP flow control), instead of in the broker's memory. So
however many connections send large frames at once, the request bytes the
broker holds stay within the pool's capacity (plus each connection's small
read-ahead, see :mod:`eventplatform.log.broker.connection`).

A frame larger than the whole pool can never be read and is refused. A
reservation that fits is granted as soon as the bytes are free, so small
requests (a Metadata, a heartbeat) go on being served while large partial
frames wait for their turn.

Only the broker's trio thread uses the pool.
"""

from __future__ import annotations

import trio

from eventplatform.log.invariants import require


class MemoryPool:
    """See the module docstring."""

    def __init__(self, capacity_bytes: int) -> None:
        require(capacity_bytes > 0, "a memory pool needs a positive capacity")
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        self.used_bytes_peak = 0
        """The most ever reserved at once: what tests and operators check the bound with."""
        self._released = trio.lowlevel.ParkingLot()

    @property
    def available_bytes(self) -> int:
        return self.capacity_bytes - self.used_bytes

    def fits(self, size_bytes: int) -> bool:
        """Whether a reservation of ``size_bytes`` can ever be granted."""
        return 0 <= size_bytes <= self.capacity_bytes

    async def reserve(self, size_bytes: int) -> None:
        """Wait until ``size_bytes`` are free and take them; the caller must
        :meth:`release` them. ``size_bytes`` must :meth:`fits`."""
        require(self.fits(size_bytes), "a reservation larger than the pool")
        await trio.lowlevel.checkpoint_if_cancelled()
        while self.used_bytes + size_bytes > self.capacity_bytes:
            await self._released.park()
        self.used_bytes += size_bytes
        self.used_bytes_peak = max(self.used_bytes_peak, self.used_bytes)
        await trio.lowlevel.cancel_shielded_checkpoint()

    def release(self, size_bytes: int) -> None:
        """Give back a reservation; every waiter checks whether it now fits."""
        require(0 <= size_bytes <= self.used_bytes, "released more than was reserved")
        self.used_bytes -= size_bytes
        if size_bytes:
            self._released.unpark_all()
