"""Shadow tables: where a rebuild writes before it swaps its result in.

Each projection table ``T`` gets a shadow ``T__ep_shadow`` with the same
columns, key and indexes (index names get the suffix too). The rebuild's
event index entries go under the shadow tables' scopes. Live queries keep
reading ``T`` until :func:`swap` commits:

* on PostgreSQL the swap is one transaction of renames (``T`` to
  ``T__ep_old``, the shadow to ``T``, index names back to the live ones),
  after which the old table is dropped. Views over ``T`` (directly or
  through other views, materialized ones included) are dropped first and
  created again over the new ``T`` from their stored definitions, and the
  new tables and views get the old ones' grants to other roles, comments
  and column comments (and a materialized view its indexes);
* on SQLite it is one transaction that replaces ``T``'s rows with the
  shadow's and drops the shadow (SQLite cannot rename indexes, and a
  reader in WAL mode sees the old rows until the commit).

Either way the index entries move from the shadow scopes to the live ones
in the same transaction, and the caller sets the checkpoints there too.

A backfill instead :func:`merge` s its shadows into the live tables: the
rows of the keys it recomputed are replaced, the others left as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, MetaData, Table, bindparam, delete, inspect, text
from sqlalchemy.sql.elements import quoted_name

from eventplatform.projections import schema
from eventplatform.projections.model import Projection
from eventplatform.projections.premerge import row_hash, scope_of
from eventplatform.projections.statements import key_match, key_params
from eventplatform.spark_projections.errors import ReplayConfigError

SHADOW_SUFFIX = "__ep_shadow"
OLD_SUFFIX = "__ep_old"
POSTGRES_NAME_MAX = 63


def shadow_name(name: str) -> str:
    return name + SHADOW_SUFFIX


def shadow_tables(projection: Projection) -> list[Table]:
    """Unbound copies of the projection's tables under their shadow names."""
    metadata = MetaData()
    tables = []
    for plan in projection.plans.values():
        shadow = plan.table.to_metadata(metadata, name=shadow_name(plan.name))
        for index in shadow.indexes:
            index.name = quoted_name(shadow_name(str(index.name)), None)
        tables.append(shadow)
    return tables


def check_names(projection: Projection) -> None:
    """Each shadow table's name fits PostgreSQL's limit (a longer one would be cut short)."""
    for name in projection.plans:
        if len(shadow_name(name)) > POSTGRES_NAME_MAX:
            raise ReplayConfigError(
                f"{shadow_name(name)}: a shadow table name is longer than PostgreSQL's "
                f"{POSTGRES_NAME_MAX} characters; shorten the table's name"
            )


def create_shadows(engine: Engine, projection: Projection, *, copy_live: bool) -> list[Table]:
    """Create (replacing leftovers of an earlier attempt) the projection's shadow tables.

    With ``copy_live`` they start as a copy of the live tables and of their
    event index entries, read in one transaction; otherwise empty.
    """
    tables = shadow_tables(projection)
    if engine.dialect.name == "postgresql":
        check_names(projection)
    drop_shadows(engine, projection)
    with engine.begin() as connection:
        for table in tables:
            table.create(connection)
        if copy_live:
            for plan, table in zip(projection.plans.values(), tables, strict=True):
                connection.execute(
                    table.insert().from_select([c.name for c in plan.table.c], plan.table.select())
                )
            _move_index(connection, projection, to_shadow=True, copy=True)
    return tables


def drop_shadows(engine: Engine, projection: Projection) -> None:
    """Drop the shadow tables and their index entries, if any are left."""
    existing = set(inspect(engine).get_table_names())
    with engine.begin() as connection:
        for plan in projection.plans.values():
            for name in (shadow_name(plan.name), plan.name + OLD_SUFFIX):
                if name in existing:
                    connection.execute(text(f"DROP TABLE {_quoted(connection, name)}"))
        scopes = [scope_of(projection.name, shadow_name(name)) for name in projection.plans]
        connection.execute(
            schema.event_index.delete().where(schema.event_index.c.scope.in_(scopes))
        )


def swap(connection: Connection, projection: Projection, tables: Sequence[Table]) -> None:
    """Put the shadow tables in place of the live ones, in ``connection``'s transaction."""
    if connection.dialect.name == "postgresql":
        _swap_by_renames(connection, projection)
    else:
        for plan, table in zip(projection.plans.values(), tables, strict=True):
            connection.execute(plan.table.delete())
            connection.execute(
                plan.table.insert().from_select([c.name for c in table.c], table.select())
            )
            connection.execute(text(f"DROP TABLE {_quoted(connection, table.name)}"))
    _move_index(connection, projection, to_shadow=False, copy=False)


def merge(
    connection: Connection,
    projection: Projection,
    tables: Sequence[Table],
    keys: Mapping[str, Sequence[tuple[Any, ...]]],
) -> None:
    """Replace the live rows of ``keys`` (per table) by the shadow's, in one transaction.

    The shadows hold rows of those keys only; a key with no shadow row loses
    its live row. The keys' event index entries are replaced the same way.
    """
    index = schema.event_index
    for plan, table in zip(projection.plans.values(), tables, strict=True):
        touched = keys.get(plan.name, ())
        live = scope_of(projection.name, plan.name)
        if touched:
            connection.execute(
                delete(plan.table).where(key_match(plan)),
                [key_params(plan, key) for key in touched],
            )
            if plan.indexed:
                connection.execute(
                    delete(index).where(index.c.scope == live, index.c.row_hash == bindparam("h")),
                    [{"h": h} for h in {row_hash(key) for key in touched}],
                )
        connection.execute(
            plan.table.insert().from_select([c.name for c in table.c], table.select())
        )
        connection.execute(
            index.update()
            .where(index.c.scope == scope_of(projection.name, shadow_name(plan.name)))
            .values(scope=live)
        )


def _swap_by_renames(connection: Connection, projection: Projection) -> None:
    quote = connection.dialect.identifier_preparer.quote
    names = list(projection.plans)
    for name in names:  # lock in a fixed order, the runners' own order
        connection.execute(text(f"LOCK TABLE {quote(name)} IN ACCESS EXCLUSIVE MODE"))
    views = _dependent_views(connection, names)
    for view in reversed(views):
        _execute(connection, f"DROP {view.kind} IF EXISTS {view.name}")
    for name in names:
        shadow, old = shadow_name(name), name + OLD_SUFFIX
        live_indexes = _postgres_indexes(connection, name)
        keep = _kept_attributes(connection, quote(name), "TABLE")
        connection.execute(text(f"ALTER TABLE {quote(name)} RENAME TO {quote(old)}"))
        for index in live_indexes:
            connection.execute(text(f"ALTER INDEX {quote(index)} RENAME TO {quote(_aside(index))}"))
        connection.execute(text(f"ALTER TABLE {quote(shadow)} RENAME TO {quote(name)}"))
        for index in _postgres_indexes(connection, name):
            if SHADOW_SUFFIX in index:
                renamed = index.replace(shadow, name).replace(SHADOW_SUFFIX, "")
                connection.execute(text(f"ALTER INDEX {quote(index)} RENAME TO {quote(renamed)}"))
        connection.execute(text(f"DROP TABLE {quote(old)}"))
        _restore(connection, keep)
    for view in views:
        _execute(connection, f"CREATE {view.kind} {view.name} AS {view.definition}")
        _restore(connection, view.keep)


@dataclass(frozen=True)
class _View:
    """A view (or materialized view) over projection tables, to recreate after a swap."""

    name: str
    """Schema-qualified and quoted."""
    kind: str
    """``VIEW`` or ``MATERIALIZED VIEW``."""
    definition: str
    keep: list[str]
    """Statements that restore its grants, comments and indexes."""


def _dependent_views(connection: Connection, tables: Sequence[str]) -> list[_View]:
    """Views that read ``tables`` directly or through other views, in creation order.

    A renamed table keeps its views (they follow it by identity), so the
    swap drops them before the renames and creates them again, from their
    stored definitions, over the new tables.
    """
    rows = connection.execute(
        text(
            """
            WITH RECURSIVE dependents(oid, depth) AS (
                SELECT r.ev_class, 1
                FROM pg_depend d JOIN pg_rewrite r ON r.oid = d.objid
                WHERE d.classid = 'pg_rewrite'::regclass
                  AND d.refclassid = 'pg_class'::regclass
                  AND d.refobjid IN (
                      SELECT c.oid FROM pg_class c
                      WHERE c.relnamespace = current_schema()::regnamespace
                        AND c.relname = ANY(:tables))
                  AND r.ev_class <> d.refobjid
              UNION ALL
                SELECT r.ev_class, dependents.depth + 1
                FROM dependents
                JOIN pg_depend d ON d.refobjid = dependents.oid
                    AND d.classid = 'pg_rewrite'::regclass
                    AND d.refclassid = 'pg_class'::regclass
                JOIN pg_rewrite r ON r.oid = d.objid
                WHERE r.ev_class <> dependents.oid
            )
            SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname), c.relkind,
                   pg_get_viewdef(c.oid), max(dependents.depth)
            FROM dependents
            JOIN pg_class c ON c.oid = dependents.oid
            JOIN pg_namespace n ON n.oid = c.relnamespace
            GROUP BY c.oid, n.nspname, c.relname, c.relkind
            ORDER BY max(dependents.depth), 1
            """
        ),
        {"tables": list(tables)},
    )
    views = []
    for name, relkind, definition, _ in rows.all():
        kind = "MATERIALIZED VIEW" if relkind == "m" else "VIEW"
        keep = _kept_attributes(connection, name, kind)
        views.append(_View(name, kind, definition.rstrip().rstrip(";"), keep))
    return views


def _kept_attributes(connection: Connection, name: str, kind: str) -> list[str]:
    """Statements that give a new relation ``name`` what the current one has besides its
    rows: privileges granted to other roles, its comment and its columns' comments, and a
    materialized view's indexes."""
    relation = connection.execute(
        text("SELECT oid, relowner FROM pg_class WHERE oid = to_regclass(:name)"), {"name": name}
    ).one()
    statements: list[str] = []
    grants = connection.execute(
        text(
            "SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(r.rolname) END, "
            "a.privilege_type, a.is_grantable "
            "FROM pg_class c, aclexplode(c.relacl) a LEFT JOIN pg_roles r ON r.oid = a.grantee "
            "WHERE c.oid = :oid AND a.grantee <> :owner ORDER BY 1, 2"
        ),
        {"oid": relation.oid, "owner": relation.relowner},
    )
    for grantee, privilege, grantable in grants:
        option = " WITH GRANT OPTION" if grantable else ""
        statements.append(f"GRANT {privilege} ON {name} TO {grantee}{option}")
    comment = connection.execute(
        text("SELECT quote_literal(obj_description(:oid, 'pg_class'))"), {"oid": relation.oid}
    ).scalar()
    if comment is not None:
        statements.append(f"COMMENT ON {kind} {name} IS {comment}")
    columns = connection.execute(
        text(
            "SELECT quote_ident(attname), quote_literal(col_description(attrelid, attnum)) "
            "FROM pg_attribute WHERE attrelid = :oid AND attnum > 0 AND NOT attisdropped "
            "AND col_description(attrelid, attnum) IS NOT NULL ORDER BY attnum"
        ),
        {"oid": relation.oid},
    )
    statements += [f"COMMENT ON COLUMN {name}.{column} IS {text_}" for column, text_ in columns]
    if kind == "MATERIALIZED VIEW":
        indexes = connection.execute(
            text("SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = :oid"),
            {"oid": relation.oid},
        )
        statements += [definition for (definition,) in indexes]
    return statements


def _restore(connection: Connection, statements: Sequence[str]) -> None:
    for statement in statements:
        _execute(connection, statement)


def _execute(connection: Connection, statement: str) -> None:
    """Run SQL the server produced (a view's definition, an index's) as it is, in the
    transaction: with no parameters, so neither SQLAlchemy nor the driver reads its
    ``:name`` or ``%`` as placeholders."""
    cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(statement)
    finally:
        cursor.close()


def _aside(index: str) -> str:
    """A temporary name for an index of the table being replaced."""
    return f"{index}{OLD_SUFFIX}"[:POSTGRES_NAME_MAX]


def _postgres_indexes(connection: Connection, table: str) -> list[str]:
    rows = connection.execute(
        text(
            "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() "
            "AND tablename = :table ORDER BY indexname"
        ),
        {"table": table},
    )
    return [row[0] for row in rows]


def _move_index(
    connection: Connection, projection: Projection, *, to_shadow: bool, copy: bool
) -> None:
    index = schema.event_index
    for name in projection.plans:
        live, shadow = scope_of(projection.name, name), scope_of(projection.name, shadow_name(name))
        source, target = (live, shadow) if to_shadow else (shadow, live)
        connection.execute(index.delete().where(index.c.scope == target))
        if copy:
            columns = [index.c.row_hash, index.c.chunk, index.c.ranks]
            connection.execute(
                index.insert().from_select(
                    ["scope", "row_hash", "chunk", "ranks"],
                    index.select()
                    .with_only_columns(text(str(int(target))), *columns)
                    .where(index.c.scope == source),
                )
            )
        else:
            connection.execute(index.update().where(index.c.scope == source).values(scope=target))


def _quoted(connection: Connection, name: str) -> str:
    return str(connection.dialect.identifier_preparer.quote(name))
