"""Shared helpers for the protocol tests: hypothesis strategies that walk the tables.

``TableValues.struct(fields, version, flexible=...)`` draws a complete decoded
value of a table at one version: every field the version carries gets a
value that respects its type, range and nullability, and every field the
version does not carry (or a tagged field in a non-flexible version) holds
its default, exactly as the decoder reports it. Encoding such a value and
decoding the bytes must give the same dict back.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import strategies as st

from eventplatform.log.protocol import Api
from eventplatform.log.protocol.schema import Array, F, Primitive, Struct

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
StructValues = st.SearchStrategy[dict[str, Any]]
LIST_ITEMS_MAX = (3, 2, 1)
"""Array sizes by nesting depth, so nested values stay small and fast to draw."""


def primitive_values(kind: Primitive) -> st.SearchStrategy[Any]:
    if kind.name in INT_RANGES:
        low, high = INT_RANGES[kind.name]
        return st.integers(low, high)
    if kind.name == "bool":
        return st.booleans()
    if kind.name == "float64":
        return st.floats(allow_nan=False)
    if kind.name == "string":
        return st.text(max_size=12)
    if kind.name in ("bytes", "records"):
        return st.binary(max_size=24)
    if kind.name == "uuid":
        return st.binary(min_size=16, max_size=16)
    raise AssertionError(f"no strategy for {kind}")


class TableValues:
    """Hypothesis strategies for the values of any table at any version."""

    def __init__(self) -> None:
        self._structs: dict[tuple[tuple[F, ...], int, bool, int], StructValues] = {}

    def struct(
        self, fields: tuple[F, ...], version: int, *, flexible: bool, depth: int = 0
    ) -> StructValues:
        key = (fields, version, flexible, depth)
        if key not in self._structs:
            self._structs[key] = self._build_struct(fields, version, flexible, depth)
        return self._structs[key]

    def _build_struct(
        self, fields: tuple[F, ...], version: int, flexible: bool, depth: int
    ) -> st.SearchStrategy[dict[str, Any]]:
        drawn: dict[str, st.SearchStrategy[Any]] = {}
        for field in fields:
            if version not in field.versions or (field.tag is not None and not flexible):
                drawn[field.name] = st.builds(field.default_value)
            else:
                drawn[field.name] = self.field(field, version, flexible=flexible, depth=depth)
        return st.fixed_dictionaries(drawn)

    def field(
        self, field: F, version: int, *, flexible: bool, depth: int
    ) -> st.SearchStrategy[Any]:
        kind = field.type
        if isinstance(kind, Primitive):
            values = primitive_values(kind)
        elif isinstance(kind, Struct):
            values = self.struct(kind.fields, version, flexible=flexible, depth=depth + 1)
        else:
            if isinstance(kind, Array):
                items = primitive_values(kind.item)
            else:
                items = self.struct(field.fields, version, flexible=flexible, depth=depth + 1)
            size = LIST_ITEMS_MAX[min(depth, len(LIST_ITEMS_MAX) - 1)]
            values = st.lists(items, max_size=size)
        if field.nullable is not None and version in field.nullable:
            return st.none() | values
        return values

    def request(self, api: Api, version: int) -> st.SearchStrategy[dict[str, Any]]:
        return self.struct(api.request, version, flexible=api.is_flexible(version))

    def response(self, api: Api, version: int) -> st.SearchStrategy[dict[str, Any]]:
        return self.struct(api.response, version, flexible=api.is_flexible(version))


TABLE_VALUES = TableValues()


@pytest.fixture(scope="session")
def table_values() -> TableValues:
    return TABLE_VALUES
