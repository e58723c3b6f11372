"""The vocabulary of the declarative protocol tables.

A table is a tuple of ``F`` fields. Each field names its type and the
versions it exists in, as Kafka's message definitions do: ``"0+"``, ``"3-5"``
or ``"7"``. A list of fields is an array of structs, ``Array(T)`` is an array
of a primitive type, and ``Struct(...)`` is a nested single struct (nullable
ones, default None, are written after an int8 marker: -1 null, 1 present). Tagged
fields (``tag=N``) exist only in flexible versions and are written only when
their value differs from the default.

``codec.compile_struct`` turns a table and a version into a decoder and an
encoder; nothing in this module knows about bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

VERSION_OPEN = 1 << 15


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range; ``high`` is ``VERSION_OPEN`` for ``"N+"``."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str) -> Versions:
        if text.endswith("+"):
            return cls(int(text[:-1]), VERSION_OPEN)
        low, _, high = text.partition("-")
        return cls(int(low), int(high or low))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version <= self.high


@dataclass(frozen=True, slots=True)
class Primitive:
    """A scalar wire type; ``name`` selects its reader and writer in ``codec``."""

    name: str
    default: Any

    def __repr__(self) -> str:
        return self.name


INT8 = Primitive("int8", 0)
INT16 = Primitive("int16", 0)
INT32 = Primitive("int32", 0)
INT64 = Primitive("int64", 0)
UINT16 = Primitive("uint16", 0)
FLOAT64 = Primitive("float64", 0.0)
BOOL = Primitive("bool", False)
STRING = Primitive("string", "")
BYTES = Primitive("bytes", b"")
RECORDS = Primitive("records", None)
UUID = Primitive("uuid", bytes(16))


@dataclass(frozen=True, slots=True)
class Array:
    """An array of a primitive type."""

    item: Primitive


@dataclass(frozen=True, slots=True, eq=False)
class Struct:
    """A nested struct that is not an array."""

    fields: tuple[F, ...]

    def __init__(self, *fields: F) -> None:
        object.__setattr__(self, "fields", fields)


FieldType = Primitive | Array | Struct | list["F"]


@dataclass(frozen=True, slots=True, init=False, eq=False)
class F:
    """One field of a table: name, type, versions, nullable versions, tag, default."""

    name: str
    type: FieldType
    versions: Versions
    nullable: Versions | None
    tag: int | None
    default: Any
    fields: tuple[F, ...] = field(default=())

    def __init__(
        self,
        name: str,
        type: FieldType,
        versions: str = "0+",
        *,
        nullable: str | None = None,
        tag: int | None = None,
        default: Any = ...,
    ) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "type", type)
        object.__setattr__(self, "versions", Versions.parse(versions))
        object.__setattr__(self, "nullable", Versions.parse(nullable) if nullable else None)
        object.__setattr__(self, "tag", tag)
        if isinstance(type, list):
            object.__setattr__(self, "fields", tuple(type))
        elif isinstance(type, Struct):
            object.__setattr__(self, "fields", type.fields)
        else:
            object.__setattr__(self, "fields", ())
        if default is ...:
            default = type.default if isinstance(type, Primitive) else ()
        object.__setattr__(self, "default", default)

    @property
    def is_array(self) -> bool:
        return isinstance(self.type, (list, Array))

    def default_value(self) -> Any:
        """A fresh default: arrays become empty lists, structs their own defaults."""
        if isinstance(self.type, (list, Array)):
            return None if self.default is None else list(self.default)
        if isinstance(self.type, Struct):
            if self.default is None:
                return None
            return {item.name: item.default_value() for item in self.fields}
        return self.default


@dataclass(frozen=True, slots=True, eq=False)
class Api:
    """One Kafka API: key, the versions it is declared for, the first flexible version.

    ``request_tail_ignored`` names the request versions whose bytes after the last field
    are ignored, as Kafka's decoder ignores them, rather than refused: only where a
    widespread client is known to write them (every other request must fill its frame).
    """

    key: int
    name: str
    versions: Versions
    flexible: Versions | None
    request: tuple[F, ...]
    response: tuple[F, ...]
    request_tail_ignored: Versions | None

    def __init__(
        self,
        key: int,
        name: str,
        versions: str,
        *,
        flexible: str | None,
        request: tuple[F, ...],
        response: tuple[F, ...],
        request_tail_ignored: str | None = None,
    ) -> None:
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "versions", Versions.parse(versions))
        object.__setattr__(self, "flexible", Versions.parse(flexible) if flexible else None)
        object.__setattr__(self, "request", request)
        object.__setattr__(self, "response", response)
        tail = Versions.parse(request_tail_ignored) if request_tail_ignored else None
        object.__setattr__(self, "request_tail_ignored", tail)

    def ignores_request_tail(self, version: int) -> bool:
        return self.request_tail_ignored is not None and version in self.request_tail_ignored

    def is_flexible(self, version: int) -> bool:
        return self.flexible is not None and version in self.flexible
