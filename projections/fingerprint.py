"""A projection's definition fingerprint: what decides its rows, hashed.

A projection's tables hold the fold of its events under one definition.
When the definition changes (a column added, a merge changed, a handler
rewritten and its ``version`` bumped), the rows already there are of the old
definition, and folding new events on top of them mixes the two. The
fingerprint lets the registry notice: it is stored with the checkpoints
(``ep_projections.fingerprint``), and a runner that finds another one there
stops before applying anything (see :mod:`.runner`).

It hashes, per table (sorted by name): the table's name and, per column
(sorted by name), its name, its SQL type as compiled without a dialect, its
nullability, whether it is a key column, and its merge (class and
parameters; a ``Fold``'s function by module and qualified name). Then the
event types the projection handles (sorted) and its ``version``. The
projection's name, its description, its poison policy and its group are not
in it: they change no row.

The text hashed is canonical JSON (sorted keys, no spaces) and the hash is
SHA-256, so the fingerprint is the same in every process and Python run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from eventplatform.projections.merge import Merge
from eventplatform.projections.model import MERGE_INFO_KEY, Projection

if TYPE_CHECKING:
    from sqlalchemy import Column, Table


def fingerprint(projection: Projection) -> str:
    """The hex SHA-256 of ``projection``'s canonical description (see the module)."""
    text = json.dumps(description(projection), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def description(projection: Projection) -> dict[str, Any]:
    """What the fingerprint hashes, as plain JSON values."""
    return {
        "tables": [_table(plan.table) for _, plan in sorted(projection.plans.items())],
        "handles": sorted(projection.handlers),
        "version": projection.version,
    }


def _table(table: Table) -> dict[str, Any]:
    columns = sorted(table.columns, key=lambda column: str(column.name))
    return {"name": str(table.name), "columns": [_column(column) for column in columns]}


def _column(column: Column[Any]) -> dict[str, Any]:
    merge = column.info.get(MERGE_INFO_KEY)
    return {
        "name": str(column.name),
        "type": _type_text(column.type),
        "nullable": bool(column.nullable),
        "key": bool(column.primary_key),
        "merge": None if merge is None else _merge(merge),
    }


def _type_text(type_: Any) -> str:
    """The type as compiled without a dialect; one only a dialect compiles, as its repr."""
    from sqlalchemy.exc import CompileError

    try:
        return str(type_.compile())
    except CompileError:
        return repr(type_)


def _merge(merge: Merge) -> dict[str, Any]:
    kind = type(merge)
    parameters = {name: _value(value) for name, value in sorted(vars(merge).items())}
    return {"class": f"{kind.__module__}.{kind.__qualname__}", "parameters": parameters}


def _value(value: Any) -> Any:
    """A merge parameter as JSON: a function by where it is defined, anything else by repr."""
    if isinstance(value, Callable):  # type: ignore[arg-type]
        module = getattr(value, "__module__", None)
        name = getattr(value, "__qualname__", None)
        if module is not None and name is not None:
            return f"{module}.{name}"
    if value is None or isinstance(value, bool | int | str):
        return value
    return repr(value)
