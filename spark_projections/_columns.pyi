"""Types of the compiled record decoder (``_columns.c``)."""

from collections.abc import Callable
from typing import Any

def decode(
    buffer: bytes,
    body_ends: Any,
    counts: Any,
    type_header: str,
    version_header: str,
    allocate: Callable[[int], Any],
    /,
) -> int | dict[str, Any]: ...
