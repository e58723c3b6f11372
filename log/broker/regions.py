"""File regions that own a duplicate descriptor, for ``os.sendfile``."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(slots=True)
class OwnedRegion:
    """Bytes of a file behind a descriptor this region owns (``close`` releases it)."""

    descriptor: int
    position: int
    length: int

    def read_bytes(self) -> bytes:
        return os.pread(self.descriptor, self.length, self.position)

    def close(self) -> None:
        if self.descriptor >= 0:
            os.close(self.descriptor)
            self.descriptor = -1
