"""Whether one JSON schema of an event type can stand in for another.

The schemas are the ones pydantic v2 writes for an event class
(``Event.model_json_schema()``). Every check asks one question: can a
*reader* built with one schema read every payload a *writer* built with the
other may produce? The modes pick who reads:

* ``BACKWARD`` (the default): the new version reads data written with the
  previous one. Consumers upgrade first; the log keeps old events forever,
  so this is what replay needs.
* ``FORWARD``: the previous version reads data written with the new one.
  Producers upgrade first.
* ``FULL``: both of the above.
* ``NONE``: no check.

What a reader can read
----------------------

A reader *ignores fields it does not declare*. Event models refuse unknown
fields when they are built, but reading an older payload always goes through
the type's upcasters, which drop what a version removed; the registry judges
the data each version can carry, not how strictly a model validates. So, with
``new`` and ``previous`` the two versions:

======================================== ============ ============
change from previous to new              BACKWARD     FORWARD
======================================== ============ ============
add a field with a default               compatible   compatible
add a required field (no default)        **breaks**   compatible
remove a field with a default            compatible   compatible
remove a required field                  compatible   **breaks**
make an optional field required          **breaks**   compatible
make a required field optional           compatible   **breaks**
widen a type: ``int`` → ``float``,       compatible   **breaks**
``T`` → ``T | None``, add a union member
narrow a type (the reverse)              **breaks**   compatible
change a type (``str`` → ``int``)        **breaks**   **breaks**
add an enum or ``Literal`` value         compatible   **breaks**
remove an enum or ``Literal`` value      **breaks**   compatible
loosen a constraint (``max_length``...)  compatible   **breaks**
tighten or add a constraint, a format    **breaks**   compatible
======================================== ============ ============

"Required" means listed in the schema's ``required``, i.e. declared without
a default; a field typed ``T | None`` with no default is still required.
Default *values* do not matter, only whether there is one.

Schemas cannot show upcasters. An upcaster that fills in a new required
field makes the change readable in practice, but the check still calls it
breaking: give the field a default, or set the type's mode to ``NONE``.

The same rules apply inside nested models (``$defs`` / ``$ref``, recursive
ones included), list items, tuple positions, dictionary values and union
members. A field is named by its dotted path: ``address.city`` for a nested
model's field, ``lines[].sku`` inside list items, ``position[0]`` for a tuple
position and ``attributes.*`` for a dictionary's values. Keywords this module
does not model (``not``, ``if``, ``patternProperties``, an ``allOf`` of
several schemas...) must stay exactly as they were. Titles, descriptions and
examples never matter.

This module is pure: it imports no client and does no IO.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from eventplatform.events.errors import IncompatibleSchemaError

Schema = Mapping[str, Any]

# Keywords that document a schema without changing which values it accepts.
ANNOTATION_KEYWORDS = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$comment",
        "discriminator",
    }
)
DOCUMENTATION_KEYWORDS = frozenset({"title", "description", "examples", "$comment"})
# Keywords whose value is data, never a schema.
LITERAL_KEYWORDS = frozenset({"enum", "const", "default", "examples", "required"})
# Keywords whose value maps names (of fields, of definitions) to schemas.
NAMED_SCHEMA_KEYWORDS = frozenset({"properties", "$defs", "patternProperties"})
# Lower and upper bounds: ``keyword -> is the bound exclusive``.
LOWER_BOUNDS = {
    "minimum": False,
    "exclusiveMinimum": True,
    "minLength": False,
    "minItems": False,
    "minProperties": False,
}
UPPER_BOUNDS = {
    "maximum": False,
    "exclusiveMaximum": True,
    "maxLength": False,
    "maxItems": False,
    "maxProperties": False,
}
# Bound families: a reader's bound is compared with the writer's of the same family.
BOUND_FAMILIES = (
    ("minimum", "exclusiveMinimum"),
    ("maximum", "exclusiveMaximum"),
    ("minLength",),
    ("maxLength",),
    ("minItems",),
    ("maxItems",),
    ("minProperties",),
    ("maxProperties",),
)
# A reader with one of these accepts the writer's data only if the writer has the same.
EXACT_KEYWORDS = ("format", "pattern", "multipleOf", "propertyNames")
MODELLED_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "prefixItems",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "$defs",
        "uniqueItems",
        *LOWER_BOUNDS,
        *UPPER_BOUNDS,
        *EXACT_KEYWORDS,
    }
)
DEFS_PREFIX = "#/$defs/"


class Compatibility(StrEnum):
    """How a new schema version must relate to the previous one."""

    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    NONE = "NONE"


@dataclass(frozen=True, slots=True)
class Incompatibility:
    """Why a reader cannot read a writer's data: the field's dotted path and a reason.

    ``field`` is ``""`` when the problem is the payload as a whole.
    """

    field: str
    reason: str


def check_compatible(
    event_type: str,
    *,
    previous_schema: Schema,
    new_schema: Schema,
    mode: Compatibility = Compatibility.BACKWARD,
    previous_version: int,
    new_version: int,
) -> None:
    """Raise :class:`IncompatibleSchemaError` if ``new_schema`` breaks ``mode``.

    The error's message names the type, both versions, the mode and the field.
    """
    problem = find_incompatibility(
        previous_schema=previous_schema,
        new_schema=new_schema,
        mode=mode,
        previous_version=previous_version,
        new_version=new_version,
    )
    if problem is not None:
        raise IncompatibleSchemaError(
            f"{event_type} v{new_version} is not {mode.value} compatible with "
            f"v{previous_version}: {problem.reason}",
            event_type=event_type,
            field=problem.field,
        )


def find_incompatibility(
    *,
    previous_schema: Schema,
    new_schema: Schema,
    mode: Compatibility,
    previous_version: int,
    new_version: int,
) -> Incompatibility | None:
    """The first reason ``new_schema`` breaks ``mode``, or ``None``."""
    previous = f"v{previous_version}"
    new = f"v{new_version}"
    if mode in (Compatibility.BACKWARD, Compatibility.FULL):
        problem = readable(
            reader_schema=new_schema,
            writer_schema=previous_schema,
            reader_label=new,
            writer_label=previous,
        )
        if problem is not None:
            return problem
    if mode in (Compatibility.FORWARD, Compatibility.FULL):
        return readable(
            reader_schema=previous_schema,
            writer_schema=new_schema,
            reader_label=previous,
            writer_label=new,
        )
    return None


def readable(
    *, reader_schema: Schema, writer_schema: Schema, reader_label: str, writer_label: str
) -> Incompatibility | None:
    """Why a reader with ``reader_schema`` cannot read ``writer_schema`` data, or ``None``."""
    check = _Check(reader_schema, writer_schema, reader_label, writer_label)
    return check.schema(reader_schema, writer_schema, "")


def differing_field(first: Schema, second: Schema) -> str:
    """The first top-level field whose definition differs between two schemas, or ``""``.

    Nested models are expanded before comparing, so a change inside a nested
    model is reported as the top-level field that holds it. Documentation
    (titles, descriptions, examples) is ignored.
    """
    first_fields = _expanded(first).get("properties", {})
    second_fields = _expanded(second).get("properties", {})
    first_required = set(first.get("required", ()))
    second_required = set(second.get("required", ()))
    for name in [*first_fields, *(name for name in second_fields if name not in first_fields)]:
        if first_fields.get(name) != second_fields.get(name):
            return str(name)
        if (name in first_required) != (name in second_required):
            return str(name)
    return ""


def without_annotations(schema: Any) -> Any:
    """``schema`` without the keywords that do not change which values it accepts."""
    return _stripped(schema, ANNOTATION_KEYWORDS)


def without_documentation(schema: Any) -> Any:
    """``schema`` without titles, descriptions, examples and comments; defaults stay."""
    return _stripped(schema, DOCUMENTATION_KEYWORDS)


def _stripped(schema: Any, dropped: frozenset[str]) -> Any:
    if isinstance(schema, list):
        return [_stripped(item, dropped) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if key in dropped:
            continue
        if key in LITERAL_KEYWORDS:
            result[key] = value
        elif key in NAMED_SCHEMA_KEYWORDS and isinstance(value, Mapping):
            result[key] = {name: _stripped(item, dropped) for name, item in value.items()}
        else:
            result[key] = _stripped(value, dropped)
    return result


@dataclass
class _Check:
    """One reader-versus-writer walk.

    ``active`` holds the pairs of named definitions being compared on the way
    down; meeting a pair again means a recursive model, which is compatible
    if everything else on the way is.
    """

    reader_root: Schema
    writer_root: Schema
    reader_label: str
    writer_label: str
    active: set[tuple[str, str]] = field(default_factory=set)

    def schema(self, reader: Schema, writer: Schema, path: str) -> Incompatibility | None:
        reader_ref, reader = _resolve(self.reader_root, reader)
        writer_ref, writer = _resolve(self.writer_root, writer)
        if reader_ref is None or writer_ref is None:
            return self.resolved(reader, writer, path)
        pair = (reader_ref, writer_ref)
        if pair in self.active:
            return None  # a recursive model: this pair is being compared further up
        self.active.add(pair)
        try:
            return self.resolved(reader, writer, path)
        finally:
            self.active.discard(pair)

    def resolved(self, reader: Schema, writer: Schema, path: str) -> Incompatibility | None:
        writer_branches = _branches(writer)
        if writer_branches is not None:
            for branch in writer_branches:
                problem = self.schema(reader, branch, path)
                if problem is not None:
                    return problem
            return None
        reader_branches = _branches(reader)
        if reader_branches is not None:
            return self.some_branch(reader_branches, writer, path)
        return self.single(reader, writer, path)

    def some_branch(
        self, branches: list[Schema], writer: Schema, path: str
    ) -> Incompatibility | None:
        """``None`` if one branch reads ``writer``.

        Otherwise the problem is the first one found deeper inside a branch (a
        nested field of ``Address | None``), or else the union as a whole.
        """
        deeper: Incompatibility | None = None
        for branch in branches:
            problem = self.schema(branch, writer, path)
            if problem is None:
                return None
            if deeper is None and problem.field != path:
                deeper = problem
        if deeper is not None:
            return deeper
        if "const" in writer:
            return self.refused_value(writer["const"], path)
        return self.changed_type({"anyOf": branches}, writer, path)

    def single(self, reader: Schema, writer: Schema, path: str) -> Incompatibility | None:
        """Neither side is a union."""
        unmodelled = _unmodelled(reader) | _unmodelled(writer)
        if unmodelled:
            if without_annotations(reader) == without_annotations(writer):
                return None
            keywords = ", ".join(sorted(unmodelled))
            return Incompatibility(path, f"{_subject(path)} changed its {keywords} rule")
        if _accepts_anything(reader):
            return None
        if _accepts_anything(writer):
            return self.changed_type(reader, writer, path)
        if "const" in writer:
            return self.value(reader, writer["const"], path)
        if "enum" in reader or "const" in reader:
            return self.changed_type(reader, writer, path)
        return self.typed(reader, writer, path)

    def value(self, reader: Schema, value: Any, path: str) -> Incompatibility | None:
        return None if _value_fits(reader, value) else self.refused_value(value, path)

    def refused_value(self, value: Any, path: str) -> Incompatibility:
        return Incompatibility(
            path,
            f"{_subject(path)}: {self.reader_label} does not accept {value!r}, "
            f"which {self.writer_label} may write",
        )

    def typed(self, reader: Schema, writer: Schema, path: str) -> Incompatibility | None:
        reader_type = reader.get("type")
        writer_type = writer.get("type")
        if reader_type is None or writer_type is None:
            if without_annotations(reader) == without_annotations(writer):
                return None
            return self.changed_type(reader, writer, path)
        widened = reader_type == "number" and writer_type == "integer"
        if reader_type != writer_type and not widened:
            return self.changed_type(reader, writer, path)
        problem = self.constraints(reader, writer, path)
        if problem is not None:
            return problem
        if reader_type == "object":
            return self.objects(reader, writer, path)
        if reader_type == "array":
            return self.arrays(reader, writer, path)
        return None

    def constraints(self, reader: Schema, writer: Schema, path: str) -> Incompatibility | None:
        for family in BOUND_FAMILIES:
            reader_bound = _bound(reader, family)
            writer_bound = _bound(writer, family)
            if reader_bound is None or (writer_bound is not None and reader_bound <= writer_bound):
                continue  # every value within the writer's bound is within the reader's
            return self.changed_constraint(path, family, reader, writer)
        keywords = [*EXACT_KEYWORDS, "uniqueItems"]
        for keyword in keywords:
            if keyword in reader and reader.get(keyword) != writer.get(keyword):
                if keyword == "uniqueItems" and not reader[keyword]:
                    continue
                return self.changed_constraint(path, (keyword,), reader, writer)
        return None

    def objects(self, reader: Schema, writer: Schema, path: str) -> Incompatibility | None:
        if _is_record(reader):
            if not _is_record(writer):
                return self.changed_type(reader, writer, path)
            return self.fields(reader, writer, path)
        reader_values = reader.get("additionalProperties", True)
        if reader_values is True:
            return None  # any object, such as dict[str, Any]
        writer_values = writer.get("additionalProperties", True)
        if _is_record(writer) or not isinstance(writer_values, Mapping):
            return self.changed_type(reader, writer, path)
        return self.schema(reader_values, writer_values, _join(path, "*"))

    def fields(self, reader: Schema, writer: Schema, path: str) -> Incompatibility | None:
        reader_required = set(reader.get("required", ()))
        writer_required = set(writer.get("required", ()))
        writer_fields = writer.get("properties", {})
        for name, reader_field in reader.get("properties", {}).items():
            field_path = _join(path, name)
            required = name in reader_required
            if name not in writer_fields:
                if required:
                    return Incompatibility(
                        field_path,
                        f"{_subject(field_path)} is required and has no default in "
                        f"{self.reader_label}, and {self.writer_label} data does not have it",
                    )
                continue
            if required and name not in writer_required:
                return Incompatibility(
                    field_path,
                    f"{_subject(field_path)} is required and has no default in "
                    f"{self.reader_label}, but {self.writer_label} data may leave it out",
                )
            problem = self.schema(reader_field, writer_fields[name], field_path)
            if problem is not None:
                return problem
        return None

    def arrays(self, reader: Schema, writer: Schema, path: str) -> Incompatibility | None:
        reader_positions = reader.get("prefixItems")
        writer_positions = writer.get("prefixItems")
        if reader_positions is not None or writer_positions is not None:
            if (
                reader_positions is None
                or writer_positions is None
                or len(reader_positions) != len(writer_positions)
                or reader.get("items") != writer.get("items")
            ):
                return self.changed_type(reader, writer, path)
            for index, (reader_item, writer_item) in enumerate(
                zip(reader_positions, writer_positions, strict=True)
            ):
                problem = self.schema(reader_item, writer_item, f"{path}[{index}]")
                if problem is not None:
                    return problem
            return None
        reader_items = reader.get("items", {})
        writer_items = writer.get("items", {})
        return self.schema(reader_items, writer_items, f"{path}[]")

    def changed_type(self, reader: Schema, writer: Schema, path: str) -> Incompatibility:
        return Incompatibility(
            path,
            f"{_subject(path)} changed type: {self.reader_label} reads "
            f"{_describe(self.reader_root, reader)}, {self.writer_label} may write "
            f"{_describe(self.writer_root, writer)}",
        )

    def changed_constraint(
        self, path: str, family: tuple[str, ...], reader: Schema, writer: Schema
    ) -> Incompatibility:
        return Incompatibility(
            path,
            f"{_subject(path)} is constrained more tightly: {self.reader_label} requires "
            f"{_constraint_text(reader, family)}, {self.writer_label} data has "
            f"{_constraint_text(writer, family)}",
        )


def _resolve(root: Schema, schema: Schema) -> tuple[str | None, Schema]:
    """Follow ``$ref`` and a one-schema ``allOf``; returns the ref's name and the schema."""
    name: str | None = None
    for _ in range(64):
        reference = schema.get("$ref")
        wrapped = schema.get("allOf")
        if isinstance(reference, str):
            name = reference
            rest = {key: value for key, value in schema.items() if key != "$ref"}
            schema = {**_definition(root, reference), **without_annotations(rest)}
        elif isinstance(wrapped, list) and len(wrapped) == 1:
            rest = {key: value for key, value in schema.items() if key != "allOf"}
            schema = {**wrapped[0], **without_annotations(rest)}
        else:
            return name, schema
    raise ValueError("a schema's $ref chain does not end")


def _definition(root: Schema, reference: str) -> Schema:
    if not reference.startswith(DEFS_PREFIX):
        raise ValueError(f"cannot follow $ref {reference!r}: only {DEFS_PREFIX}... is supported")
    definitions = root.get("$defs", {})
    name = reference.removeprefix(DEFS_PREFIX)
    if name not in definitions:
        raise ValueError(f"$ref {reference!r} names no definition")
    definition: Schema = definitions[name]
    return definition


def _branches(schema: Schema) -> list[Schema] | None:
    """The members of a union (``anyOf``, ``oneOf``, a list ``type``, a multi-value enum)."""
    for keyword in ("anyOf", "oneOf"):
        if keyword in schema:
            rest = {key: value for key, value in schema.items() if key != keyword}
            return [{**branch, **without_annotations(rest)} for branch in schema[keyword]]
    types = schema.get("type")
    if isinstance(types, list):
        return [{**schema, "type": name} for name in types]
    values = schema.get("enum")
    if isinstance(values, list):
        rest = {key: value for key, value in schema.items() if key != "enum"}
        return [{**rest, "const": value} for value in values]
    return None


def _unmodelled(schema: Schema) -> set[str]:
    return {
        key for key in schema if key not in MODELLED_KEYWORDS and key not in ANNOTATION_KEYWORDS
    }


def _accepts_anything(schema: Schema) -> bool:
    return not any(key in MODELLED_KEYWORDS for key in schema)


def _is_record(schema: Schema) -> bool:
    """A model (declared fields), as opposed to a dictionary or any object."""
    return "properties" in schema or schema.get("additionalProperties") is False


def _bound(schema: Schema, family: tuple[str, ...]) -> tuple[float, bool] | None:
    """The tightest bound of a family as ``(value, tightness)``.

    Tightness breaks ties at the same value: an exclusive bound is tighter.
    A lower bound is tighter when larger; an upper bound is returned negated,
    so for both kinds a larger tuple is tighter.
    """
    lower = family[0] in LOWER_BOUNDS
    tightest: tuple[float, bool] | None = None
    for keyword in family:
        if keyword not in schema:
            continue
        exclusive = (LOWER_BOUNDS if lower else UPPER_BOUNDS)[keyword]
        value = float(schema[keyword])
        candidate = (value if lower else -value, exclusive)
        if tightest is None or candidate > tightest:
            tightest = candidate
    return tightest


def _constraint_text(schema: Schema, family: tuple[str, ...]) -> str:
    present = [f"{keyword} {schema[keyword]!r}" for keyword in family if keyword in schema]
    return " and ".join(present) if present else f"no {family[0]}"


def _value_fits(reader: Schema, value: Any) -> bool:
    """Whether the (non-union, resolved) reader schema accepts one JSON value."""
    if "const" in reader:
        return _same_value(reader["const"], value)
    kind = _json_type(value)
    reader_type = reader.get("type")
    widened = reader_type == "number" and kind == "integer"
    if reader_type is not None and reader_type != kind and not widened:
        return False
    if "format" in reader:
        return False  # a literal cannot promise a format
    if isinstance(value, str):
        pattern = reader.get("pattern")
        if pattern is not None and re.search(pattern, value) is None:
            return False
        return _within(reader, ("minLength",), ("maxLength",), len(value))
    if kind in ("integer", "number"):
        return _within(
            reader, ("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum"), value
        )
    return True


def _within(
    reader: Schema, lower_family: tuple[str, ...], upper_family: tuple[str, ...], value: float
) -> bool:
    for family, signed in ((lower_family, value), (upper_family, -value)):
        bound = _bound(reader, family)
        if bound is None:
            continue
        limit, exclusive = bound
        if signed < limit or (signed == limit and exclusive):
            return False
    return True


def _same_value(first: Any, second: Any) -> bool:
    return _json_type(first) == _json_type(second) and first == second


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _describe(root: Schema, schema: Schema) -> str:
    """A short human name for what a schema accepts: ``integer``, ``Address | null``."""
    name, resolved = _resolve(root, schema)
    branches = _branches(resolved)
    if branches is not None and "enum" not in resolved:
        return " | ".join(_describe(root, branch) for branch in branches)
    if "enum" in resolved:
        return "one of " + ", ".join(repr(value) for value in resolved["enum"])
    if "const" in resolved:
        return repr(resolved["const"])
    kind = resolved.get("type")
    if kind is None:
        return "any value"
    if kind == "object" and (name is not None or "title" in resolved):
        return f"object {resolved.get('title') or str(name).removeprefix(DEFS_PREFIX)}"
    if "format" in resolved:
        return f"{kind} ({resolved['format']})"
    if kind == "array" and "items" in resolved:
        return f"array of {_describe(root, resolved['items'])}"
    return str(kind)


def _subject(path: str) -> str:
    return f"field {path!r}" if path else "the payload"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _expanded(schema: Schema) -> dict[str, Any]:
    """``schema`` without documentation and with every ``$ref`` inlined.

    A recursive reference stays a ``$ref`` where it recurs.
    """
    root = without_documentation(schema)
    return dict(_inline(root, root, ()))


def _inline(root: Schema, schema: Any, stack: tuple[str, ...]) -> Any:
    if isinstance(schema, list):
        return [_inline(root, item, stack) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    reference = schema.get("$ref")
    if isinstance(reference, str) and reference not in stack:
        rest = {key: value for key, value in schema.items() if key != "$ref"}
        return _inline(root, {**_definition(root, reference), **rest}, (*stack, reference))
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$defs":
            continue
        if key in LITERAL_KEYWORDS:
            result[key] = value
        elif key in NAMED_SCHEMA_KEYWORDS and isinstance(value, Mapping):
            result[key] = {name: _inline(root, item, stack) for name, item in value.items()}
        else:
            result[key] = _inline(root, value, stack)
    return result
