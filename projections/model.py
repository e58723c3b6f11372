"""Declaring projections: tables with merge columns, row contributions, handlers.

A projection table is a SQLAlchemy Core ``Table`` (its DDL comes from an
Alembic migration) whose primary key is the row key and whose other columns
each merge with one operation from :mod:`.merge`::

    metadata = MetaData()
    page_stats = projection_table(
        "activity_page_stats", metadata,
        Column("url", Text, primary_key=True),
        merge_column("views", BigInteger, Count()),
        merge_column("last_seen", DateTime(timezone=True), Max()),
    )

    page_views = Projection("activity.page_stats", tables=[page_stats])

    @page_views.on(PageViewed)
    def viewed(envelope: Envelope[PageViewed]) -> Iterator[Row]:
        yield Row(page_stats, url=envelope.event.url, last_seen=envelope.occurred_at)

``projection_table`` adds the bookkeeping columns the engines need: one
``<column>_ep_rank`` per ``Latest``/``First`` column (the log rank of the
value kept) and ``ep_contributions`` (how many contributions the row has, so
a row whose every contribution is retracted disappears).

Handlers must be pure functions of the envelope: corrections and Spark
replays call them again and expect the same rows. This module imports no
engine, client or broker, and no SQLAlchemy until a table is declared: the
folds and Spark's workers use the model without loading it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from eventplatform.events.codec import EventCatalog
from eventplatform.events.corrections import Correction
from eventplatform.events.model import Envelope, Event, Position
from eventplatform.projections.errors import HandlerError, ProjectionDefinitionError
from eventplatform.projections.merge import Count, Merge

if TYPE_CHECKING:
    from sqlalchemy import Column, MetaData, Table

MERGE_INFO_KEY = "eventplatform.merge"
CONTRIBUTIONS_COLUMN = "ep_contributions"
RANK_SUFFIX = "_ep_rank"
MIGRATION_INDEXES = "eventplatform.migration_indexes"
"""``Table.info`` key: names of indexes a migration creates in one database's own SQL
(a full-text index); schema checks do not count them as differences."""
POISON_POLICIES = ("park", "stop")
GROUP_ID_PREFIX = "projection."
"""Runners' consumer groups are ``projection.<name>.<token>``, one per database (see
:func:`~.registry.register_projection`), unless a projection names its own."""
GROUP_MARKER = "eventplatform.projection:"
"""The metadata of every offset a runner commits to its group: this prefix, then the
projection's name. Tools tell a projection's group by it, whatever its id."""

# A log rank orders positions across a projection's topics and partitions:
# topic index, partition and offset packed into one BIGINT.
RANK_TOPIC_BITS = 7
RANK_PARTITION_BITS = 16
RANK_OFFSET_BITS = 40

PoisonPolicy = Literal["park", "stop"]
Handler = Callable[[Envelope[Any]], "Iterable[Row] | Row | None"]


def merge_column(name: str, type_: Any, merge: Merge, **column_options: Any) -> Column[Any]:
    """A non-key projection column that merges contributions with ``merge``."""
    from sqlalchemy import Column

    if not isinstance(merge, Merge):
        raise ProjectionDefinitionError(f"column {name!r}: {merge!r} is not a merge operation")
    return Column(name, type_, info={MERGE_INFO_KEY: merge}, **column_options)


def projection_table(name: str, metadata: MetaData, *columns: Any, **options: Any) -> Table:
    """A ``Table`` of key columns and merge columns, plus the engines' bookkeeping columns."""
    from sqlalchemy import BigInteger, Column, Table

    extra: list[Column[Any]] = []
    for column in columns:
        merge = column.info.get(MERGE_INFO_KEY) if isinstance(column, Column) else None
        if merge is not None and merge.ranked:
            extra.append(Column(column.name + RANK_SUFFIX, BigInteger, nullable=True))
    extra.append(Column(CONTRIBUTIONS_COLUMN, BigInteger, nullable=False, default=0))
    table = Table(name, metadata, *columns, *extra, **options)
    TablePlan.of(table)
    return table


@dataclass(frozen=True, eq=False)
class TablePlan:
    """What the engines need to know about one projection table."""

    table: Table
    keys: tuple[str, ...]
    merges: dict[str, Merge]

    @classmethod
    def of(cls, table: Table) -> TablePlan:
        keys = tuple(column.name for column in table.primary_key.columns)
        if not keys:
            raise ProjectionDefinitionError(f"table {table.name}: declare a primary key")
        merges: dict[str, Merge] = {}
        for column in table.columns:
            merge = column.info.get(MERGE_INFO_KEY)
            if column.name in keys or _is_bookkeeping(table, column.name):
                continue
            if merge is None:
                raise ProjectionDefinitionError(
                    f"table {table.name}: column {column.name!r} is neither a key nor a "
                    "merge_column"
                )
            merges[column.name] = merge
        if CONTRIBUTIONS_COLUMN not in table.columns:
            raise ProjectionDefinitionError(
                f"table {table.name}: declare it with projection_table() "
                f"(it needs the {CONTRIBUTIONS_COLUMN} column)"
            )
        return cls(table, keys, merges)

    @functools.cached_property
    def name(self) -> str:
        return str(self.table.name)  # a plain str: drivers adapt it without lookups

    @functools.cached_property
    def invertible(self) -> bool:
        """Corrections retract by negation (all sums and counts), not by recomputing."""
        return all(merge.invertible for merge in self.merges.values())

    @property
    def indexed(self) -> bool:
        """Its rows are recomputed on correction, so contributions go to the event index."""
        return not self.invertible

    @functools.cached_property
    def merged_in_python(self) -> bool:
        return any(merge.merged_in_python for merge in self.merges.values())

    @functools.cached_property
    def counts(self) -> tuple[str, ...]:
        return tuple(name for name, merge in self.merges.items() if isinstance(merge, Count))

    @functools.cached_property
    def givable(self) -> dict[str, Merge | None]:
        """Columns a row may give: the merge to normalize with, or None for identity."""
        return {
            name: merge if type(merge).normalize is not Merge.normalize else None
            for name, merge in self.merges.items()
            if not isinstance(merge, Count)
        }

    def key_of(self, values: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(values[name] for name in self.keys)


def legacy_group_id(name: str) -> str:
    """The group every runner of projection ``name`` joined before groups were per database."""
    return f"{GROUP_ID_PREFIX}{name}"


def _is_bookkeeping(table: Table, name: str) -> bool:
    if name == CONTRIBUTIONS_COLUMN:
        return True
    if not name.endswith(RANK_SUFFIX):
        return False
    base = table.columns.get(name.removesuffix(RANK_SUFFIX))
    return base is not None and MERGE_INFO_KEY in base.info


class Row:
    """One contribution: ``Row(table, key=..., column=value, ...)``.

    Every key column must be given; count columns are counted, never given.
    """

    __slots__ = ("table", "values")

    def __init__(self, table: Table, /, **values: Any) -> None:
        self.table = table
        self.values = values

    def __repr__(self) -> str:
        return f"Row({self.table.name}, {self.values!r})"


@dataclass(frozen=True, slots=True)
class Contribution:
    """A validated row contribution with the log rank of the event that made it."""

    plan: TablePlan
    key: tuple[Any, ...]
    values: dict[str, Any]
    rank: int


class Projection:
    """A named fold of event types into tables.

    ``on_error`` is the poison-event policy: ``"park"`` moves an event whose
    handler raises to the dead-letter table and goes on; ``"stop"`` stops the
    runner before the event, so nothing after it is applied out of order.

    ``group_id`` names the consumer group every runner of the projection joins,
    whatever database it writes to. Without it (the usual case) each database
    gets a group of its own, recorded in it on the first run, so runners writing
    to two databases each read every partition.

    ``version`` is the handlers' version: bump it when a handler's logic
    changes (what rows it yields for an event), so the platform knows the
    tables must be rebuilt; changes to the tables and merges it sees by itself
    (see :mod:`.fingerprint`).
    """

    def __init__(
        self,
        name: str,
        *,
        tables: Iterable[Table],
        on_error: PoisonPolicy = "park",
        group_id: str | None = None,
        description: str = "",
        version: int = 1,
    ) -> None:
        if on_error not in POISON_POLICIES:
            raise ProjectionDefinitionError(f"on_error must be one of {POISON_POLICIES}")
        if type(version) is not int or version < 1:
            raise ProjectionDefinitionError(
                f"{name}: version must be a positive int, not {version!r}"
            )
        self.name = name
        self.version = version
        self.on_error: PoisonPolicy = on_error
        self.group_id = group_id
        """The group named in the declaration; None: one group per database."""
        self.description = description
        self.plans = {str(table.name): TablePlan.of(table) for table in tables}
        self._routes = [(plan.table, plan) for plan in self.plans.values()]
        self._plan_of = {id(table): plan for table, plan in self._routes}
        self._aliases: list[Table] = []
        self.handlers: dict[str, tuple[type[Event], Handler]] = {}
        self._topics: tuple[str, ...] = ()
        self._catalog: EventCatalog | None = None

    def bound_to(self, tables: Iterable[Table]) -> Projection:
        """The same projection writing to ``tables`` instead, in the order of its own.

        Handlers keep yielding rows of the declared tables; each row goes to
        the table at the same place in ``tables``, which must have the same
        columns (a shadow table that a rebuild fills before swapping it in).
        """
        bound = Projection(
            self.name,
            tables=tables,
            on_error=self.on_error,
            group_id=self.group_id,
            description=self.description,
            version=self.version,
        )
        if len(bound.plans) != len(self.plans):
            raise ProjectionDefinitionError(f"{self.name}: give one table for each of its tables")
        for own, other in zip(self.plans.values(), bound.plans.values(), strict=True):
            if [c.name for c in own.table.columns] != [c.name for c in other.table.columns]:
                raise ProjectionDefinitionError(
                    f"{self.name}: {other.name} does not have the columns of {own.name}"
                )
            bound._routes.append((own.table, other))
            bound._plan_of[id(own.table)] = other
        bound.handlers = self.handlers
        bound._topics = self._topics
        return bound

    def __getstate__(self) -> dict[str, Any]:
        # Spark ships projections to its executors: table ids and validators stay behind.
        state = dict(self.__dict__)
        state["_plan_of"] = None
        state["_aliases"] = []
        state["_catalog"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._plan_of = {id(table): plan for table, plan in self._routes}

    def plan_of_table(self) -> dict[int, TablePlan]:
        """The plan each row's table (by ``id``) goes to."""
        return self._plan_of

    def route(self, table: Table) -> TablePlan | None:
        """The plan rows of ``table`` go to: by identity, else by name.

        A projection unpickled in another process (a Spark executor) holds
        copies of its tables, while handlers imported there yield rows of
        their module's own: those are the same tables by name and columns.
        A table found so is remembered (and kept alive, so its id stays its).
        """
        plan = self._plan_of.get(id(table))
        if plan is not None:
            return plan
        name, columns = str(table.name), [column.name for column in table.columns]
        for own, routed in self._routes:
            if str(own.name) == name and [column.name for column in own.columns] == columns:
                self._plan_of[id(table)] = routed
                self._aliases.append(table)
                return routed
        return None

    def on(self, *event_classes: type[Event]) -> Callable[[Handler], Handler]:
        """Register a handler for ``event_classes``; it returns rows (or yields them)."""

        def register(handler: Handler) -> Handler:
            for event_class in event_classes:
                if event_class is Correction or not hasattr(event_class, "event_type"):
                    raise ProjectionDefinitionError(f"cannot handle {event_class.__name__}")
                if event_class.event_type in self.handlers:
                    raise ProjectionDefinitionError(
                        f"{self.name}: {event_class.event_type} already has a handler"
                    )
                self.handlers[event_class.event_type] = (event_class, handler)
            self._topics = tuple(sorted({cls.event_topic for cls, _ in self.handlers.values()}))
            self._catalog = None
            return handler

        return register

    @property
    def topics(self) -> tuple[str, ...]:
        """The topics the projection reads, sorted (their index is part of the rank)."""
        return self._topics

    @property
    def tables(self) -> list[Table]:
        return [plan.table for plan in self.plans.values()]

    def catalog(self) -> EventCatalog:
        return EventCatalog(event_class for event_class, _ in self.handlers.values())

    def decoding_catalog(self) -> EventCatalog:
        """The catalog the engines decode with: one per projection, so its validators are kept."""
        if self._catalog is None:
            self._catalog = self.catalog()
        return self._catalog

    def handles(self, event_type: str | None) -> bool:
        return event_type in self.handlers or event_type == Correction.event_type

    def rank(self, position: Position) -> int:
        """The position as one orderable integer (topic index, partition, offset)."""
        topic_index = self._topics.index(position.topic)
        if position.partition >> RANK_PARTITION_BITS or position.offset >> RANK_OFFSET_BITS:
            raise ProjectionDefinitionError(f"{position} is beyond the rank's range")
        return (
            topic_index << (RANK_PARTITION_BITS + RANK_OFFSET_BITS)
            | position.partition << RANK_OFFSET_BITS
            | position.offset
        )

    def position_of(self, rank: int) -> Position:
        """The position a rank packs (the inverse of :meth:`rank`)."""
        topic_index = rank >> (RANK_PARTITION_BITS + RANK_OFFSET_BITS)
        partition = rank >> RANK_OFFSET_BITS & ((1 << RANK_PARTITION_BITS) - 1)
        return Position(self._topics[topic_index], partition, rank & ((1 << RANK_OFFSET_BITS) - 1))

    def contributions(self, envelope: Envelope[Any], rank: int) -> list[Contribution]:
        """The validated contributions of one (non-correction) event; raises HandlerError."""
        entry = self.handlers.get(envelope.event.event_type)
        if entry is None:
            return []
        return [self.validate_row(row, rank) for row in self.rows(entry[1], envelope)]

    def rows(self, handler: Handler, envelope: Envelope[Any]) -> list[Any]:
        """What ``handler`` makes of ``envelope``, as a list; raises HandlerError."""
        try:
            produced = handler(envelope)
            return [produced] if isinstance(produced, Row) else list(produced or ())
        except Exception as exc:
            raise HandlerError(f"{self.name}: handler raised {exc!r}") from exc

    def validate_row(self, row: Any, rank: int) -> Contribution:
        """One row a handler produced, as a contribution; raises HandlerError."""
        if not isinstance(row, Row):
            raise HandlerError(f"{self.name}: a handler yielded {type(row).__name__}, not Row")
        plan = self.route(row.table)
        if plan is None:
            raise HandlerError(f"{self.name}: table {row.table.name} is not one of its tables")
        values = row.values
        keys = plan.keys
        key = (values.get(keys[0]),) if len(keys) == 1 else tuple(map(values.get, keys))
        if None in key:
            missing = [name for name, value in zip(plan.keys, key, strict=True) if value is None]
            raise HandlerError(f"{plan.name}: key column(s) {missing} not given")
        givable = plan.givable
        normalized: dict[str, Any] = {}
        for name, value in values.items():
            if name in givable:
                merge = givable[name]
                normalized[name] = value if merge is None else _normalized(plan, name, merge, value)
            elif name not in plan.keys:
                raise HandlerError(f"{plan.name}: {name!r} is not a merge column to give")
        for name in plan.counts:
            normalized[name] = 1
        return Contribution(plan, key, normalized, rank)


def _normalized(plan: TablePlan, name: str, merge: Merge, value: Any) -> Any:
    try:
        return merge.normalize(value)
    except (TypeError, ValueError) as exc:
        raise HandlerError(f"{plan.name}.{name}: {exc}") from exc
