"""Statements built once: merges of many rows per table, the store's checkpoint and
offset queries (some compiled for the driver itself: :class:`DriverStatement`), and
the conditions and parameters that match a row by its key.

:class:`Upsert` takes a batch of rows in column order and merges them into
their table with as few statements as the database allows; the builders
below write the ``INSERT ... ON CONFLICT DO UPDATE`` whose ``SET`` clause is
a projection table's merge, or the event index's append.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    LargeBinary,
    MetaData,
    Table,
    and_,
    any_,
    bindparam,
    case,
    cast,
    func,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.expression import FromClause
from sqlalchemy.types import ARRAY

from eventplatform.projections import schema
from eventplatform.projections.errors import CheckpointConflictError
from eventplatform.projections.merge import Count, Max, Min, Only, Ranked, Sum
from eventplatform.projections.model import CONTRIBUTIONS_COLUMN, RANK_SUFFIX, TablePlan
from eventplatform.projections.premerge import scope_of

KEYS_PER_STATEMENT = 500
"""Row keys, hashes or offsets one query names at most (bounded parameter counts)."""
ARRAY_ROWS_MAX = 256
"""Up to this many rows go to PostgreSQL as one array per column; more are copied in."""
MULTIROW_ROWS_MAX = 16
"""Up to this many rows of a table with an array column, which cannot go as an array of
arrays, go to PostgreSQL as one multi-row ``VALUES``; more are copied in."""


class Upsert:
    """One table's merge statement: a batch's rows in, as few statements as possible out.

    SQLite takes the rows through ``executemany`` (the database is in-process:
    no round trips). PostgreSQL gets a small batch as one array per column,
    merged with ``INSERT ... SELECT ... FROM unnest(...) ON CONFLICT``: the
    statement's text and its handful of parameters are the same whatever the
    number of rows, so the driver converts it once and the server prepares it
    once (a multi-row ``VALUES`` has a parameter per value: the driver parsed
    its text again for every batch, which cost more than the server's work).
    One row goes as ``VALUES``, whose few parameters cost the driver less than
    arrays. A table with an array column takes a multi-row ``VALUES`` instead,
    since ``unnest`` flattens an array of arrays. A larger batch is copied into a
    temporary staging table and merged from there with one
    ``INSERT ... SELECT ... ON CONFLICT``. Either way the rows of one statement
    have distinct keys, which pre-merging guarantees. The column types' bind
    processors (dates on SQLite, JSON) run on the rows first.
    """

    def __init__(
        self, table: Table, build: UpsertBuilder, dialect: Any, *, bind_processors: bool = True
    ) -> None:
        """``build(postgresql, source)``: the upsert of ``table``, from ``source`` if given.

        ``bind_processors=False`` is for rows whose values the driver takes as they are.
        """
        self.table = table
        self.postgresql = dialect.name == "postgresql"
        if self.postgresql:
            dialect = postgresql.psycopg.dialect(paramstyle="format")  # type: ignore[no-untyped-call]
        statement = build(self.postgresql, None).compile(dialect=dialect)
        assert statement.positional, "upserts are compiled with positional parameters"
        names = tuple(statement.positiontup or ())
        columns = tuple(column.name for column in table.columns)
        if names != columns:
            raise AssertionError(f"{table.name}: upsert binds {names}, not {columns}")
        self.sql: str = statement.string
        self.processors = [
            (index, _fast_processor(column.type.dialect_impl(dialect), processor))
            for index, column in enumerate(table.columns)
            if bind_processors
            and (processor := column.type.dialect_impl(dialect).bind_processor(dialect))
        ]
        self._multirow_sql: dict[int, str] = {}
        self.array_sql: str | None = None
        if self.postgresql and not any(isinstance(c.type, ARRAY) for c in table.columns):
            arrays = build(True, _unnested(table)).compile(dialect=dialect)
            if tuple(arrays.positiontup or ()) != tuple(f"a_{name}" for name in columns):
                raise AssertionError(f"{table.name}: array upsert binds {arrays.positiontup}")
            self.array_sql = _binary_placeholders(arrays.string)
        if self.postgresql:
            stage = _staging_table(table)
            quoted = dialect.identifier_preparer.quote
            self.stage_name = stage.name
            self.stage_ddl = (
                f"CREATE TEMPORARY TABLE IF NOT EXISTS {quoted(stage.name)} "
                f"(LIKE {dialect.identifier_preparer.format_table(table)} "
                "INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
            )
            listed = ", ".join(quoted(name) for name in names)
            self.copy_sql = f"COPY {quoted(stage.name)} ({listed}) FROM STDIN"
            self.merge_sql = build(True, stage).compile(dialect=dialect).string

    def execute(self, transaction: Any, rows: Sequence[Sequence[Any]]) -> None:
        """Merge ``rows`` (column order) in ``transaction``, a store transaction (on
        PostgreSQL the merge statement is queued there, to go with the batch's others)."""
        for index, processor in self.processors:
            for row in rows:
                if row[index] is not None:
                    row[index] = processor(row[index])  # type: ignore[index]
        if not self.postgresql:
            with driver_errors(transaction.connection, self.sql):
                transaction.cursor().executemany(self.sql, rows)
        elif len(rows) > 1 and self.array_sql is not None and len(rows) <= ARRAY_ROWS_MAX:
            arrays = [list(column) for column in zip(*rows, strict=True)]
            transaction.queue(self.table.name, self.array_sql, arrays)
        elif len(rows) == 1 or (self.array_sql is None and len(rows) <= MULTIROW_ROWS_MAX):
            values = [value for row in rows for value in row]
            transaction.queue(self.table.name, self._sql_for(len(rows)), values)
        else:
            transaction.stage(self.stage_name, self.stage_ddl)
            copy_sql = self.copy_sql
            cursor = transaction.cursor()
            with driver_errors(transaction.connection, copy_sql), cursor.copy(copy_sql) as copy:
                for row in rows:
                    copy.write_row(row)
            transaction.queue(self.table.name, self.merge_sql)

    def _sql_for(self, count: int) -> str:
        sql = self._multirow_sql.get(count)
        if sql is None:
            head, values, tail = _values_clause(self.sql)
            sql = self._multirow_sql[count] = head + ", ".join([values] * count) + tail
        return sql


def integers_in(column: Any, name: str, postgres: bool) -> Any:
    """``column IN`` the integers bound as the one parameter ``name`` (give it
    :func:`integers_param`): a PostgreSQL array, or a JSON array that SQLite unnests.
    The statement's text is the same however many integers there are, so it is
    compiled and prepared once, where an expanding ``IN`` list made a new statement,
    rendered and parsed again, for each length."""
    if postgres:
        return column == any_(bindparam(name, type_=postgresql.ARRAY(BigInteger)))
    unnested: Any = select(literal_column("value")).select_from(func.json_each(bindparam(name)))
    return column.in_(unnested.scalar_subquery())


def integers_param(values: Sequence[int], postgres: bool) -> Any:
    """The value of an :func:`integers_in` parameter."""
    return list(values) if postgres else orjson.dumps(list(values)).decode()


def _fast_processor(impl: Any, processor: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``processor``, or an equal but faster one for SQLite's default datetime text."""
    default_format = sqlite.DATETIME._storage_format
    if not isinstance(impl, sqlite.DATETIME) or impl._storage_format != default_format:
        return processor

    def datetime_text(value: Any) -> Any:
        # The default format is the ISO form with a space, microseconds always
        # written and no offset: the first 26 characters of isoformat's.
        if type(value) is datetime:
            return value.isoformat(" ", "microseconds")[:26]
        return processor(value)

    return datetime_text


@contextmanager
def driver_errors(connection: Connection, statement: str) -> Iterator[None]:
    """Raise a driver's error from work done around SQLAlchemy as SQLAlchemy's error."""
    dbapi = connection.dialect.loaded_dbapi
    try:
        yield
    except dbapi.Error as exc:
        raise DBAPIError.instance(statement, None, exc, dbapi.Error) from exc


class DriverStatement:
    """A statement compiled once for the driver itself: its SQL with positional
    parameters, their names in order, and the bind processors of the ones whose
    type has one (a date on SQLite). Running it skips SQLAlchemy's per-execution
    work, which costs more than SQLite's own for a one-row statement."""

    def __init__(self, statement: Any, postgres: bool) -> None:
        dialect: Any = (
            postgresql.psycopg.dialect(paramstyle="format")  # type: ignore[no-untyped-call]
            if postgres
            else sqlite.pysqlite.dialect()
        )
        compiled = statement.compile(dialect=dialect)
        assert compiled.positional, "driver statements bind positional parameters"
        self.sql: str = compiled.string
        self.names: tuple[str, ...] = tuple(compiled.positiontup or ())
        types = {name: compiled.binds[name].type.dialect_impl(dialect) for name in self.names}
        self.processors = {
            name: processor
            for name, type_ in types.items()
            if (processor := type_.bind_processor(dialect)) is not None
        }

    def values(self, parameters: dict[str, Any]) -> list[Any]:
        """The positional values of named ``parameters``, bind processors applied."""
        processors = self.processors
        return [
            processors[name](parameters[name]) if name in processors else parameters[name]
            for name in self.names
        ]


def _staging_table(table: Table) -> Table:
    """The temporary table a large batch of ``table``'s rows is copied into."""
    name = f"ep_stage_{table.name[:40]}_{scope_of('stage', table.name) & 0xFFFFFFFF:08x}"
    return Table(name, MetaData(), *(Column(c.name, c.type) for c in table.columns))


def _unnested(table: Table) -> Any:
    """``table``'s columns as rows of ``unnest`` over one array parameter per column,
    ``a_<column>``, each cast to an array of the column's type."""
    arrays = [bindparam(f"a_{c.name}", type_=ARRAY(c.type)) for c in table.columns]
    return func.unnest(*arrays).table_valued(*(c.name for c in table.columns)).render_derived()


def _binary_placeholders(sql: str) -> str:
    """``sql``'s ``%s`` placeholders as ``%b``: psycopg sends those values in binary,
    which for arrays costs it a fraction of the text form's quoting and escaping."""
    return re.sub(r"(?<!%)((?:%%)*)%s", r"\1%b", sql)


def _values_clause(sql: str) -> tuple[str, str, str]:
    """Split ``INSERT ... VALUES (row) [tail]`` into its head, row and tail."""
    start = sql.index(" VALUES (") + len(" VALUES ")
    depth = 0
    for index in range(start, len(sql)):
        depth += {"(": 1, ")": -1}.get(sql[index], 0)
        if depth == 0:
            return sql[:start], sql[start : index + 1], sql[index + 1 :]
    raise AssertionError(f"no VALUES row in {sql!r}")


def upsert_insert(table: Any, postgres: bool) -> Any:
    """An ``INSERT`` that takes ``ON CONFLICT`` clauses, for either store."""
    return (postgresql.insert if postgres else sqlite.insert)(table)


UpsertBuilder = Callable[[bool, FromClause | None], Any]


def _insert(table: Table, postgres: bool, source: FromClause | None) -> Any:
    """An ``INSERT`` into ``table`` that takes ``ON CONFLICT``: of values, or from ``source``."""
    statement = upsert_insert(table, postgres)
    if source is None:
        return statement
    columns = [column.name for column in table.columns]
    return statement.from_select(columns, select(*(source.c[name] for name in columns)))


def corrected_upsert_statement(postgres: bool, source: FromClause | None = None) -> Any:
    """Record each corrected root's latest content, in place of what was recorded."""
    statement = _insert(schema.corrected_events, postgres, source)
    excluded = statement.excluded
    kept = ("event_id", "correction_offset", "replacement", "retracted")
    return statement.on_conflict_do_update(
        index_elements=["projection", "topic", "partition", "offset"],
        set_={name: excluded[name] for name in kept},
    )


def index_append_statement(postgres: bool, source: FromClause | None = None) -> Any:
    """Append ranks to a row key's open index entry."""
    table = schema.event_index
    statement = _insert(table, postgres, source)
    return statement.on_conflict_do_update(
        index_elements=["scope", "row_hash", "chunk"],
        # SQLite's || makes text of two blobs: cast back, or length() would count characters.
        set_={"ranks": cast(table.c.ranks.op("||")(statement.excluded.ranks), LargeBinary)},
    )


def upsert_statement(plan: TablePlan, postgres: bool, source: FromClause | None = None) -> Any:
    """The merge of row deltas into ``plan``'s table; from ``source`` rather than values."""
    table = plan.table
    statement = _insert(table, postgres, source)
    excluded = statement.excluded
    updates: dict[str, Any] = {}
    for name, merge in plan.merges.items():
        current, incoming = table.c[name], excluded[name]
        if isinstance(merge, Sum | Count):
            updates[name] = current + incoming  # never NULL: both start at 0
        elif isinstance(merge, Min | Max) and postgres:
            # LEAST and GREATEST ignore NULLs on PostgreSQL.
            updates[name] = (func.least if isinstance(merge, Min) else func.greatest)(
                current, incoming
            )
        elif isinstance(merge, Min | Max):
            better = incoming < current if isinstance(merge, Min) else incoming > current
            updates[name] = case(
                (incoming.is_(None), current),
                (or_(current.is_(None), better), incoming),
                else_=current,
            )
        elif isinstance(merge, Only):
            updates[name] = func.coalesce(incoming, current)
        elif isinstance(merge, Ranked):
            rank, incoming_rank = table.c[name + RANK_SUFFIX], excluded[name + RANK_SUFFIX]
            wins = incoming_rank > rank if merge.wins(0, 1) else incoming_rank < rank
            take = and_(incoming_rank.is_not(None), or_(rank.is_(None), wins))
            updates[name] = case((take, incoming), else_=current)
            updates[name + RANK_SUFFIX] = case((take, incoming_rank), else_=rank)
        else:
            raise AssertionError(f"{merge!r} is merged in Python")
    contributions = table.c[CONTRIBUTIONS_COLUMN]
    updates[CONTRIBUTIONS_COLUMN] = contributions + excluded[CONTRIBUTIONS_COLUMN]
    return statement.on_conflict_do_update(index_elements=list(plan.keys), set_=updates)


def offsets_query(table: Any, selected: Sequence[Any], postgres: bool, *more: Any) -> Any:
    """``selected`` of ``table``'s rows at some offsets of one partition of one
    projection: parameters ``projection``, ``topic``, ``partition``, ``first`` and
    ``last`` (the offsets' range, which lets PostgreSQL bound its index scan) and
    ``offsets`` (:func:`integers_param`); ``more`` conditions besides."""
    columns = table.c
    return select(*selected).where(
        columns.projection == bindparam("projection"),
        columns.topic == bindparam("topic"),
        columns.partition == bindparam("partition"),
        columns.offset.between(bindparam("first"), bindparam("last")),
        integers_in(columns.offset, "offsets", postgres),
        *more,
    )


@functools.cache
def corrected_rows_query(postgres: bool) -> Any:
    """The corrected-events rows at some offsets (see :func:`offsets_query`)."""
    return offsets_query(schema.corrected_events, [schema.corrected_events], postgres)


@functools.cache
def parked_query(postgres: bool) -> Any:
    """The parked offsets among some (see :func:`offsets_query`)."""
    table = schema.dead_letters
    parked = table.c.status == schema.DEAD_LETTER_PARKED
    return offsets_query(table, [table.c.offset], postgres, parked)


@functools.cache
def index_rows_query(postgres: bool) -> Any:
    """The event index entries of some row hashes of one scope."""
    columns = schema.event_index.c
    return select(columns.row_hash, columns.chunk, columns.ranks).where(
        columns.scope == bindparam("scope"),
        integers_in(columns.row_hash, "hashes", postgres),
    )


ADVANCE_PARTITIONS_PER_STATEMENT = 32
"""Checkpoints one statement moves at most; a batch over more partitions takes more."""


@functools.lru_cache(maxsize=ADVANCE_PARTITIONS_PER_STATEMENT)
def advance_many(count: int) -> Any:
    """The compare-and-set of ``count`` checkpoints of one projection in one statement:
    it returns a row for each one it moved (each one still at its expected offset)."""
    columns = schema.checkpoints.c

    def at(index: int) -> Any:
        return and_(
            columns.topic == bindparam(f"t{index}"),
            columns.partition == bindparam(f"n{index}"),
        )

    return (
        update(schema.checkpoints)
        .where(
            columns.projection == bindparam("p"),
            or_(
                *(
                    and_(at(index), columns.next_offset == bindparam(f"e{index}"))
                    for index in range(count)
                )
            ),
        )
        .values(
            next_offset=bindparam("x0", type_=BigInteger)
            if count == 1
            else case(
                *((at(index), bindparam(f"x{index}", type_=BigInteger)) for index in range(count)),
                else_=columns.next_offset,
            ),
            updated_at=bindparam("now"),
        )
        .returning(columns.topic, columns.partition)
    )


@functools.lru_cache(maxsize=2 * ADVANCE_PARTITIONS_PER_STATEMENT)
def advance_statement(count: int, postgres: bool) -> DriverStatement:
    """:func:`advance_many` of ``count`` checkpoints, for the driver."""
    return DriverStatement(advance_many(count), postgres)


def check_all_moved(moves: list[tuple[str, int, int, int]], moved: list[Any]) -> None:
    """Raise unless the compare-and-set of ``moves`` moved every checkpoint."""
    if len(moved) < len(moves):
        still = {(topic, partition) for topic, partition, *_ in moves}
        still -= {(topic, partition) for topic, partition in moved}
        named = ", ".join(f"{topic}/{partition}" for topic, partition in sorted(still))
        raise CheckpointConflictError(f"{named}: checkpoint moved")


def comparable_key(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """``key`` with naive times read as UTC: SQLite hands back the times of a
    ``DateTime(timezone=True)`` key without their zone, and a naive time never equals an
    aware one."""
    return tuple(
        value.replace(tzinfo=UTC) if isinstance(value, datetime) and value.tzinfo is None else value
        for value in key
    )


def key_match(plan: TablePlan) -> Any:
    return and_(*(plan.table.c[name] == bindparam(f"k_{name}") for name in plan.keys))


def key_params(plan: TablePlan, key: tuple[Any, ...]) -> dict[str, Any]:
    return {f"k_{name}": value for name, value in zip(plan.keys, key, strict=True)}


def key_equals(columns: Sequence[Any], key: tuple[Any, ...]) -> Any:
    return and_(*(column == value for column, value in zip(columns, key, strict=True)))


def update_params(plan: TablePlan, row: dict[str, Any]) -> dict[str, Any]:
    params = key_params(plan, plan.key_of(row))
    params.update({f"v_{name}": value for name, value in row.items() if name not in plan.keys})
    return params
