"""Types of the compiled record decoder (``_columns.c``)."""

from typing import Any

def decode(
    buffer: bytes,
    body_ends: Any,
    counts: Any,
    type_header: str,
    version_header: str,
    /,
) -> int | dict[str, Any]: ...
