"""Schema drift: how chatledger's tables in a database differ from what the head
revision creates, and the SQL that makes them so again.

A database can be at the head revision and still differ from it: an index dropped by
hand, a constraint lost in a dump and restore, a column type or collation changed by
a DBA, a column an application added. ``chatledger check`` reports it (exit status
:data:`DRIFT_STATUS`) with the fix, as :func:`schema_drift` does for a caller.

What is compared, for chatledger's own tables only (an application's tables, its
``alembic_version`` and chatledger's bookkeeping tables are not drift):

* by Alembic's autogenerate comparison (``produce_migrations`` with
  :func:`chatledger.versioning.context_options`, ``compare_type`` on, against
  :data:`chatledger.schema.metadata`): tables, columns, types, nullability, indexes
  and unique constraints. An index on chatledger's tables that it does not have is
  drift only when unique (it can refuse chatledger's writes): a plain one of the
  operator's or an application's (zett-agent's store creates its own on open) is
  left alone. One under a name of chatledger's with other columns or uniqueness
  (autogenerate: a drop and a create) is dropped and created again. A column that
  chatledger does not have is never dropped (it may hold an application's data): one
  that chatledger's inserts, which name their columns, leave alone (nullable, with a
  default, computed or generated) is a note (:attr:`Comparison.notes`), not drift;
  a NOT NULL one without a default fails those inserts and is made nullable;
* here, what autogenerate does not detect (Alembic's documentation, "What does
  Autogenerate Detect (and what does it not detect?)"): named CHECK constraints, the
  primary key's columns, and each column's collation, read from the catalog by the
  backend (:attr:`chatledger.dialects.Backend.column_collations`):
  PostgreSQL's ``pg_attribute.attcollation`` against the database default, SQLite's
  declared ``COLLATE`` against ``BINARY``, and on MySQL/MariaDB each text column's and
  each table's character set and collation (Alembic compares a collation only when
  both sides name one; chatledger's columns name none, or take their table's). An id
  column under a case-folding or nondeterministic collation makes ``M1`` the id
  ``m1``: an append then stores nothing. CHECK constraints by name are compared here
  rather than by Alembic's opt-in ``checkconstraint_byname`` plugin, which only
  Alembic 1.19 and later have (chatledger supports 1.13 on).

Server defaults are not compared (autogenerate's ``compare_server_default`` is off, as
in ``alembic check``): their rendering differs between servers and versions.

The fix is rendered by Alembic in offline (``as_sql``) mode for the database's own
dialect, from the same operations autogenerate would write into a revision; on SQLite
through its batch mode, which rebuilds a table where ``ALTER TABLE`` cannot change it
(SQLite's documentation, "ALTER TABLE": "Making Other Kinds Of Table Schema Changes").
"""

from __future__ import annotations

import copy
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from alembic.autogenerate import produce_migrations
from alembic.operations import Operations
from alembic.operations import ops as alembic_ops
from alembic.runtime.migration import MigrationContext
from sqlalchemy import CheckConstraint, Column, Index, MetaData, Table, UniqueConstraint, inspect
from sqlalchemy.engine import URL, Connection, Dialect
from sqlalchemy.exc import CompileError
from sqlalchemy.types import String, TypeEngine

from . import __version__, dialects
from .dsn import resolve_dsn
from .schema import metadata
from .versioning import context_options

#: ``chatledger check``'s exit status when the database is at the head revision but its
#: schema differs from what that revision creates.
DRIFT_STATUS = 5


@dataclass(frozen=True)
class Drift:
    """How one of chatledger's tables differs from what the head revision creates."""

    #: The table's name.
    table: str
    #: What differs, one line each (``index ix_agent_sessions_activity (deleted_at,
    #: updated_at, id) is missing``).
    differences: tuple[str, ...]
    #: SQL statements for the database's dialect, each without its terminating ``;``,
    #: that make the table as the head revision creates it when run in order (as the
    #: schema owner). They drop no row and no column; a changed type is converted in
    #: place (a value that does not fit fails the statement, but on SQLite).
    fix: tuple[str, ...]


@dataclass(frozen=True)
class Comparison:
    """chatledger's tables in a database against what the head revision creates."""

    #: What differs, one :class:`Drift` per table, in the schema's order.
    drift: tuple[Drift, ...]
    #: What differs but is not drift, one line each, its table first
    #: (``agent_sessions: column billing_account (TEXT NULL) is not chatledger's ...``):
    #: an application's own column that chatledger's writes leave alone.
    notes: tuple[str, ...] = ()


async def schema_drift(dsn: str | URL | None = None) -> list[Drift]:
    """How chatledger's tables in the database a DSN names (see
    :func:`chatledger.dsn.resolve_dsn`) differ from what the head revision creates,
    one :class:`Drift` per table that differs, in the schema's order; empty when none
    does. Reads only. Meaningful at the head revision (``chatledger check`` compares
    only then): an older or newer revision differs by its own changes.

    Raises:
        ConfigurationError: the server refused the connection or a read.
        ValueError: an invalid DSN.
    """
    return list((await schema_comparison(dsn)).drift)


async def schema_comparison(dsn: str | URL | None = None) -> Comparison:
    """:func:`schema_drift` with the notes on what differs but is not drift. Reads only.

    Raises:
        ConfigurationError: the server refused the connection or a read.
        ValueError: an invalid DSN.
    """
    from .migrate import run_on_connection  # migrate re-exports this module

    return await run_on_connection(resolve_dsn(dsn), compare_schema)


def find_drift(connection: Connection) -> list[Drift]:
    """:func:`schema_drift` on an open connection (in its transaction)."""
    return list(compare_schema(connection).drift)


def compare_schema(connection: Connection) -> Comparison:
    """:func:`schema_comparison` on an open connection (in its transaction)."""
    backend = dialects.backend(connection.dialect.name)
    context = MigrationContext.configure(connection, opts=context_options(metadata))
    found: dict[str, list[alembic_ops.MigrateOperation]] = {}
    described: dict[str, list[str]] = {}
    notes: list[str] = []
    for operation in produce_migrations(context, metadata).upgrade_ops_list[0].ops:
        table_name = _table_of(operation)
        kept = []
        for leaf in _flatten(operation):
            if _own_index(leaf):
                continue
            if isinstance(leaf, alembic_ops.DropColumnOp):
                # Never dropped: the column may hold an application's data.
                column = leaf.to_column()
                if _writes_leave_alone(column):
                    notes.append(f"{table_name}: {_own_column_note(column, connection.dialect)}")
                    continue
                leaf = _make_nullable(leaf.table_name, column)
            kept.append(leaf)
        if kept:
            found.setdefault(table_name, []).extend(kept)
    for name, operations in found.items():
        found[name] = operations = _drops_first(operations)
        described[name] = _describe_all(operations, connection.dialect)
    inspector = inspect(connection)
    present = set(inspector.get_table_names())
    for name, table in metadata.tables.items():
        if name not in present:
            continue
        retyped = {
            operation.column_name
            for operation in found.get(name, [])
            if isinstance(operation, alembic_ops.AlterColumnOp) and operation.modify_type is not None
        }
        # The table's default collation first: a column retyped without a collation of
        # its own (MODIFY) takes the table's.
        first = _table_collation_drift(connection, backend, table)
        then = [
            *_check_drift(inspector, table),
            *_primary_key_drift(inspector, table),
            *_collation_drift(connection, backend, table, retyped),
        ]
        if first or then:
            found[name] = [*(op for _, op in first), *found.get(name, []), *(op for _, op in then)]
            described[name] = [
                *(line for line, _ in first),
                *described.get(name, []),
                *(line for line, _ in then),
            ]
    drifts = []
    for name in [*metadata.tables, *sorted(set(found) - set(metadata.tables))]:
        if name in found:
            fix = _render(connection, backend, name, found[name], present)
            drifts.append(Drift(name, tuple(described[name]), fix))
    return Comparison(tuple(drifts), tuple(notes))


def describe_drift(drifts: Sequence[Drift]) -> str:
    """The differences of ``drifts`` in one line: ``its schema differs from what the head
    revision creates: TABLE: DIFFERENCE; ...`` (what ``chatledger check`` says)."""
    listed = "; ".join(f"{drift.table}: {line}" for drift in drifts for line in drift.differences)
    return f"its schema differs from what the head revision creates: {listed}"


def describe_notes(notes: Sequence[str]) -> str:
    """What differs but is not drift (:attr:`Comparison.notes`), in one sentence."""
    return f"Not drift, left as it is: {'; '.join(notes)}"


def fix_script(drifts: Sequence[Drift], dialect: str, *, lock_timeout: float = 300.0) -> str:
    """The fixes of ``drifts`` as one SQL script for ``dialect``'s own client (empty when
    there are none): a header saying how to run it, each table's differences as
    comments before its statements, and opened and closed as ``chatledger upgrade
    --sql`` opens and closes its scripts (:attr:`chatledger.dialects.Backend.offline_script`:
    the schema lock, waited for up to ``lock_timeout`` seconds, and one transaction on
    PostgreSQL and SQLite).

    Raises:
        ValueError: a dialect chatledger does not serve.
    """
    if not drifts:
        return ""
    script = dialects.offline_script(dialect)
    header = [
        f"chatledger {__version__}: makes chatledger's tables what the head revision creates ({dialect}).",
        f"Run it as the schema owner, after a backup: {script.client}",
        "It drops no row and no column: a missing table is created empty, a changed column "
        "type is converted in place (a value that does not fit fails the statement, except on "
        "SQLite, which keeps it), an application's NOT NULL column is made nullable.",
        *script.on_failure,
    ]
    lines = [*(_comment(line) for line in header), "", *script.begin(lock_timeout), ""]
    for drift in drifts:
        lines.extend(_comment(f"{drift.table}: {difference}") for difference in drift.differences)
        lines.extend(f"{statement};" for statement in drift.fix)
        lines.append("")
    return "\n".join([*lines, *script.end, ""])


def _comment(line: str) -> str:
    """``line`` as a ``--`` comment; a line break in it (a name read from the database)
    would end the comment and run the rest as SQL."""
    return f"-- {_NOT_IN_A_COMMENT.sub(' ', line)}".rstrip()


#: What may not reach a ``--`` comment (as :mod:`chatledger.offline` has it).
_NOT_IN_A_COMMENT = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]")


# -- what autogenerate found ------------------------------------------------------------


def _table_of(operation: alembic_ops.MigrateOperation) -> str:
    name = getattr(operation, "table_name", None)
    if name is None:  # CreateIndexOp and the like name it through their index
        name = operation.to_index().table.name if hasattr(operation, "to_index") else "?"
    return str(name)


def _flatten(operation: alembic_ops.MigrateOperation) -> list[alembic_ops.MigrateOperation]:
    """The operations of ``operation``: a table's (``ModifyTableOps``) and a column's
    (``AlterColumnOp`` holds each change of one column) one by one."""
    if isinstance(operation, alembic_ops.ModifyTableOps):
        return [leaf for inner in operation.ops for leaf in _flatten(inner)]
    return [operation]


#: The names of chatledger's columns, per table.
_COLUMNS = {name: frozenset(table.columns.keys()) for name, table in metadata.tables.items()}

#: The names of chatledger's indexes and unique constraints.
_OURS = frozenset(
    str(index.name) for table in metadata.tables.values() for index in table.indexes if index.name
) | frozenset(
    str(constraint.name)
    for table in metadata.tables.values()
    for constraint in table.constraints
    if isinstance(constraint, UniqueConstraint) and constraint.name
)


def _own_index(operation: alembic_ops.MigrateOperation) -> bool:
    """Whether ``operation`` drops a non-unique index chatledger does not have: an index
    of the operator's or an application's own (zett-agent's store creates its indexes
    on open), which changes no result and refuses no write. A unique one can refuse
    chatledger's writes: that one is drift. So is one under the name of one of
    chatledger's with other columns or uniqueness: autogenerate drops and creates it."""
    return (
        isinstance(operation, alembic_ops.DropIndexOp)
        and not operation.kw.get("unique")
        and operation.index_name not in _OURS
    )


def _writes_leave_alone(column: Column[Any]) -> bool:
    """Whether chatledger's inserts, which name only its own columns, succeed with
    ``column`` in the table: it takes NULL, a default, or a value the server computes."""
    return bool(
        column.nullable
        or column.server_default is not None
        or column.computed is not None
        or column.identity is not None
        or column.autoincrement is True
    )


def _own_column_note(column: Column[Any], dialect: Dialect) -> str:
    why = "nullable" if column.nullable else "with a default"
    return (
        f"column {column.name} ({_type(column.type, dialect)}) is not chatledger's; "
        f"{why}, it is left to its application"
    )


def _make_nullable(table: str, column: Column[Any]) -> alembic_ops.AlterColumnOp:
    """An application's NOT NULL column without a default, which fails every insert of
    chatledger's: made nullable, never dropped (it may hold that application's data)."""
    return alembic_ops.AlterColumnOp(
        table,
        column.name,
        modify_nullable=True,
        existing_type=column.type,
        existing_nullable=False,
        existing_server_default=column.server_default,
        existing_comment=column.comment,
    )


def _drops_first(operations: list[alembic_ops.MigrateOperation]) -> list[alembic_ops.MigrateOperation]:
    """``operations`` with each drop of an index before the creation of one of its name
    (an index changed in place), the order otherwise kept."""
    created = {op.index_name for op in operations if isinstance(op, alembic_ops.CreateIndexOp)}
    changed = [
        op for op in operations if isinstance(op, alembic_ops.DropIndexOp) and op.index_name in created
    ]
    return [*changed, *(op for op in operations if not any(op is drop for drop in changed))]


def _index_shape(index: Index) -> str:
    return f"({_columns(list(index.expressions))}{', unique' if index.unique else ''})"


def _describe_all(operations: list[alembic_ops.MigrateOperation], dialect: Dialect) -> list[str]:
    """What ``operations`` repair, in words; an index dropped and created under one name
    in one line."""
    created = {op.index_name: op for op in operations if isinstance(op, alembic_ops.CreateIndexOp)}
    dropped = {op.index_name for op in operations if isinstance(op, alembic_ops.DropIndexOp)}
    lines = []
    for operation in operations:
        if isinstance(operation, alembic_ops.DropIndexOp) and operation.index_name in created:
            has = operation.to_index()
            has.unique = bool(operation.kw.get("unique"))
            wanted = created[operation.index_name].to_index()
            lines.append(
                f"index {operation.index_name} is {_index_shape(has)}, chatledger's is {_index_shape(wanted)}"
            )
        elif not (isinstance(operation, alembic_ops.CreateIndexOp) and operation.index_name in dropped):
            lines.extend(_describe(operation, dialect))
    return lines


def _columns(names: Sequence[Any]) -> str:
    return ", ".join(str(getattr(name, "name", name)) for name in names)


def _nullability(nullable: bool | None) -> str:
    return "NULL" if nullable else "NOT NULL"


def _type(type_: Any, dialect: Dialect) -> str:
    """A column type as the dialect writes it."""
    try:
        return str(type_.compile(dialect=dialect))
    except CompileError:  # a reflected type the dialect cannot render (NullType): its name
        return str(type_)


def _describe(operation: alembic_ops.MigrateOperation, dialect: Dialect) -> list[str]:
    """What ``operation`` repairs, in words."""
    if isinstance(operation, alembic_ops.CreateTableOp):
        return ["the table is missing"]
    if isinstance(operation, alembic_ops.CreateIndexOp):
        index = operation.to_index()
        unique = "unique index" if index.unique else "index"
        return [f"{unique} {index.name} ({_columns(list(index.expressions))}) is missing"]
    if isinstance(operation, alembic_ops.DropIndexOp):
        return [f"unique index {operation.index_name} is not chatledger's (it can refuse its writes)"]
    if isinstance(operation, alembic_ops.AddColumnOp):
        return [f"column {operation.column.name} is missing"]
    if isinstance(operation, alembic_ops.AddConstraintOp):
        return [f"constraint {operation.to_constraint().name} is missing"]
    if isinstance(operation, alembic_ops.DropConstraintOp):
        return [f"constraint {operation.constraint_name} is not chatledger's"]
    if isinstance(operation, alembic_ops.AlterColumnOp):
        lines = []
        column = operation.column_name
        if operation.modify_type is not None:
            lines.append(
                f"column {column} is {_type(operation.existing_type, dialect)}, chatledger's is "
                f"{_type(operation.modify_type, dialect)} (the fix converts its values in place)"
            )
        if operation.modify_nullable and column not in _COLUMNS.get(operation.table_name, ()):
            lines.append(
                f"column {column} is not chatledger's and is NOT NULL without a default: chatledger's "
                "inserts fail; the fix makes it nullable (it is not dropped)"
            )
        elif operation.modify_nullable is not None:
            lines.append(
                f"column {column} is {_nullability(not operation.modify_nullable)}, chatledger's is "
                f"{_nullability(operation.modify_nullable)}"
            )
        return lines or [f"column {column} differs"]
    return [str(operation.to_diff_tuple())]


# -- what autogenerate does not detect --------------------------------------------------

Found = list[tuple[str, alembic_ops.MigrateOperation]]


def _check_drift(inspector: Any, table: Table) -> Found:
    """Named CHECK constraints: each of ``table``'s missing, or present that it has not."""
    wanted = {
        str(constraint.name): constraint
        for constraint in table.constraints
        if isinstance(constraint, CheckConstraint) and constraint.name
    }
    live = {str(found["name"]) for found in inspector.get_check_constraints(table.name) if found.get("name")}
    drift: Found = [
        (
            f"check constraint {name} is not chatledger's",
            alembic_ops.DropConstraintOp(name, table.name, type_="check"),
        )
        for name in sorted(live - set(wanted))
    ]
    for name in sorted(set(wanted) - live):
        condition = wanted[name].sqltext
        drift.append(
            (
                f"check constraint {name} ({condition}) is missing",
                alembic_ops.CreateCheckConstraintOp(name, table.name, condition),
            )
        )
    return drift


def _primary_key_drift(inspector: Any, table: Table) -> Found:
    """The primary key's columns, in order."""
    wanted = [column.name for column in table.primary_key.columns]
    live = inspector.get_pk_constraint(table.name)
    has = list(live.get("constrained_columns") or [])
    if has == wanted:
        return []
    drift: Found = []
    if has:
        # MySQL/MariaDB drop "the" primary key whatever its name (always PRIMARY there).
        name = live.get("name") or table.primary_key.name
        drift.append(
            (
                f"primary key ({_columns(has)}) is not chatledger's",
                alembic_ops.DropConstraintOp(name, table.name, type_="primary"),
            )
        )
    operation = alembic_ops.CreatePrimaryKeyOp(table.primary_key.name, table.name, wanted)
    drift.append((f"primary key ({_columns(wanted)}) is missing", operation))
    return drift


def _text_type(column: Column[Any], dialect: Dialect) -> String | None:
    """The type ``column`` has on ``dialect`` (a ``TypeDecorator``'s and a variant's
    resolved), when it holds text: one with a character set and collation."""
    resolved = column.type._unwrapped_dialect_impl(dialect)
    return resolved if isinstance(resolved, String) else None


def _table_collation_drift(connection: Connection, backend: dialects.Backend, table: Table) -> Found:
    """MySQL/MariaDB: the table's default character set and collation (``mysql_charset``,
    ``mysql_collate``), which the columns without one of their own take."""
    options = table.dialect_options[connection.dialect.name]
    charset, collation = options.get("charset"), options.get("collate")
    if not collation:
        return []
    live_collation = backend.table_collation(connection, table.name)
    if _same(live_collation, collation):
        return []
    name = _quote(connection, table.name)
    statement = f"ALTER TABLE {name} DEFAULT CHARACTER SET {charset} COLLATE {collation}"
    return [
        (
            f"the table's default collation is {live_collation}, chatledger's is {collation}",
            alembic_ops.ExecuteSQLOp(statement),
        )
    ]


def _collation_drift(
    connection: Connection, backend: dialects.Backend, table: Table, retyped: set[str]
) -> Found:
    """Each column's character set and collation against the schema's: the column
    type's own, else the table's (MySQL/MariaDB's ``mysql_charset``,
    ``mysql_collate``), else the database's default (PostgreSQL; SQLite's ``BINARY``).
    A non-text column has none. Columns whose type autogenerate already found changed
    (``retyped``) are left to that fix. (A nondeterministic or case-folding collation
    on an id column makes ``M1`` the same id as ``m1``: an append then stores nothing.)"""
    options = table.dialect_options[connection.dialect.name]
    charset, collation = options.get("charset"), options.get("collate")
    drift: Found = []
    live = backend.column_collations(connection, table.name)
    for column in table.columns:
        if column.name not in live or column.name in retyped:
            continue
        has_charset, has_collation = live[column.name]
        found = _text_type(column, connection.dialect)
        if found is None:
            if has_charset is None and has_collation is None:
                continue
            want_charset = want_collation = None
        else:
            want_charset = getattr(found, "charset", None) or charset
            want_collation = found.collation or (collation if want_charset == charset else None)
            if _same(has_charset, want_charset) and (
                # a character set named without a collation takes its default one
                (want_collation is None and want_charset is not None) or _same(has_collation, want_collation)
            ):
                continue
        drift.append(
            (
                f"column {column.name} has the collation {has_collation}, chatledger's is "
                f"{want_collation or 'the database default'}",
                _retype(column, found, want_charset, want_collation or backend.default_collation),
            )
        )
    return drift


def _retype(
    column: Column[Any], found: String | None, charset: str | None, collation: str | None
) -> alembic_ops.AlterColumnOp:
    """The ``ALTER TABLE .. MODIFY`` giving ``column`` its type with ``charset`` and
    ``collation`` (its definition otherwise as the schema has it)."""
    retype: TypeEngine[Any] = column.type
    if found is not None:
        text_type = copy.copy(found)
        text_type.collation = collation
        if hasattr(text_type, "charset"):
            text_type.charset = charset
        retype = text_type
    return alembic_ops.AlterColumnOp(
        column.table.name,
        column.name,
        modify_type=retype,
        existing_type=column.type,
        existing_nullable=column.nullable,
        existing_server_default=column.server_default,
    )


def _same(live: Any, wanted: str | None) -> bool:
    return (live is None and wanted is None) or (
        live is not None and wanted is not None and str(live).lower() == wanted.lower()
    )


def _quote(connection: Connection, name: str) -> str:
    return str(connection.dialect.identifier_preparer.quote(name))


# -- the fix, as SQL --------------------------------------------------------------------


class _Statements(io.StringIO):
    """Alembic's offline output, one statement per ``write`` (``static_output``)."""

    def __init__(self) -> None:
        super().__init__()
        self.statements: list[str] = []

    def write(self, written: str) -> int:
        statement = written.strip().removesuffix(";").strip()
        if statement:
            self.statements.append(statement)
        return len(written)


def _render(
    connection: Connection,
    backend: dialects.Backend,
    table: str,
    operations: list[alembic_ops.MigrateOperation],
    present: set[str],
) -> tuple[str, ...]:
    """The SQL of ``operations`` on ``table`` for the connection's dialect, rendered by
    Alembic offline; on SQLite inside one batch, which rebuilds the table when one of
    them needs it, copying its rows (its shape read from the live table: a script
    cannot reflect)."""
    output = _Statements()
    offline = MigrationContext.configure(
        dialect=connection.dialect, opts={"as_sql": True, "output_buffer": output, "literal_binds": True}
    )
    operations_api = Operations(offline)
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    if backend.rebuilds_tables and table in present:
        if backend.rebuild_triggers is not None:
            before, after = backend.rebuild_triggers(connection)
        live = Table(table, MetaData(), autoload_with=connection)
        with operations_api.batch_alter_table(table, copy_from=live) as batch:
            for operation in operations:
                batch.invoke(operation)
    else:
        for operation in operations:
            operations_api.invoke(operation)
    return (*before, *output.statements, *after)
