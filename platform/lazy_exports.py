"""Package exports imported on first use (PEP 562), for the SDK's packages.

A package names each export's module in a table; importing the package then loads
none of them, and ``package.Name`` imports ``Name``'s module the first time::

    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, __all__)

This module imports only the standard library.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], public: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``exports`` maps each name to
    the module that defines it; a name, once imported, is kept in the package."""

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return sorted({*vars(sys.modules[package]), *public})

    return getattr_, dir_
