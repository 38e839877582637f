"""zett-agent's own schema, as ``chatledger adopt`` recognises it.

chatledger keeps zett-agent's table names (``agent_sessions``, ``raw_messages``,
``session_snapshots``), so a zett user points chatledger at a database that zett's
``SQLSessionStorage`` (or ``SQLiteSessionExtension``) created: the same tables,
narrower columns (36-character ids, 32-bit integers, timestamps without a zone or
fraction), extra indexes, and no counter row. This module tells such a database
apart from chatledger's own and from anything else, by catalog inspection only; it
never changes a thing. The conversion itself is ``chatledger adopt``
(:mod:`chatledger.tools.adopt`).

What counts as zett-agent 0.2.x's schema (``zett_agent/_sql_storage.py``):

* the three tables, each with exactly the columns of chatledger's first revision
  (``0001``), which took them over from zett, in the same nullability and type family
  (string, integer, timestamp); ``agent_sessions.session_type`` may be missing (zett
  releases before it added the column themselves);
* the counter columns chatledger adds (``last_sequence``, ``snapshot_version``,
  ``compacted_through_sequence``, ``fields_version``) either all missing, or all
  present from an adoption that stopped midway (MySQL commits each ``ALTER TABLE``);
* no index but zett's and chatledger's by name; no check constraint but
  chatledger's; no foreign key into or out of the three tables;
* no chatledger revision stamped yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import CheckConstraint, DateTime, Index, Integer, LargeBinary, String, Table, inspect
from sqlalchemy.engine import Connection, Inspector
from sqlalchemy.types import TypeEngine

from . import migrate
from .dsn import as_argument, display
from .errors import SchemaNotReady

#: zett-agent's tables, in the order adoption converts them.
ZETT_TABLES = ("agent_sessions", "raw_messages", "session_snapshots")

#: The table chatledger's first revision adds next to zett's.
REIN_TABLE = "rein_sessions"

#: chatledger's own tables beside zett's: a database holding any of them is not zett-agent's
#: own (chatledger's revision, its compatibility record, rein's sessions).
OWN_TABLES = (REIN_TABLE, migrate.VERSION_TABLE, migrate.COMPATIBILITY_TABLE)
#: The OpenAI Agents SDK's default tables (``SQLAlchemySession``, ``SQLiteSession``):
#: its ``agent_sessions`` has the name of chatledger's and zett's, keyed by ``session_id``.
OPENAI_SDK_TABLES = ("agent_sessions", "agent_messages")

#: The revision whose schema adoption produces (later revisions then apply as usual).
FIRST_REVISION = "0001"

#: Columns of chatledger's session row that zett's has not: the counter and versions.
COUNTER_COLUMNS = ("last_sequence", "snapshot_version", "compacted_through_sequence", "fields_version")

#: Columns older zett-agent releases created without (zett adds them itself since).
OPTIONAL_ZETT_COLUMNS: Mapping[str, tuple[str, ...]] = {"agent_sessions": ("session_type",)}

#: Indexes zett-agent creates that chatledger has not (its ``index=True`` columns):
#: table -> index name -> (columns, unique).
ZETT_ONLY_INDEXES: Mapping[str, Mapping[str, tuple[tuple[str, ...], bool]]] = {
    "agent_sessions": {
        "ix_agent_sessions_parent_session_id": (("parent_session_id",), False),
        "ix_agent_sessions_agent_name": (("agent_name",), False),
    },
    "raw_messages": {
        "ix_raw_messages_session_id": (("session_id",), False),
        "ix_raw_messages_request_id": (("request_id",), False),
    },
    "session_snapshots": {"ix_session_snapshots_session_id": (("session_id",), False)},
}


class NotAdoptable(ValueError):
    """The database is not zett-agent's schema as chatledger recognises it (or holds
    nothing to adopt); the message gives the reason. Nothing was changed."""


@dataclass(frozen=True)
class TableSurvey:
    """One of zett's tables as the catalog shows it."""

    name: str
    #: Column name -> SQLAlchemy's reflected column (``type``, ``nullable``, ...).
    columns: Mapping[str, Mapping[str, Any]]
    #: Index name -> (columns, unique).
    indexes: Mapping[str, tuple[tuple[str, ...], bool]]
    #: The primary key constraint's name (``None`` where the backend has none: SQLite, MySQL).
    primary_key: str | None
    #: Check constraint names.
    checks: frozenset[str]


@dataclass(frozen=True)
class ZettSchema:
    """A recognised zett-agent schema, possibly partly adopted already."""

    tables: Mapping[str, TableSurvey]
    #: ``rein_sessions`` exists already (created by an adoption that stopped midway).
    rein_table: bool

    @property
    def partly_adopted(self) -> bool:
        """Whether an earlier adoption stopped midway (only possible on MySQL/MariaDB,
        where every ``ALTER TABLE`` commits on its own)."""
        return self.rein_table or "last_sequence" in self.tables["agent_sessions"].columns


@cache
def first_revision_tables() -> dict[str, Table]:
    """The tables exactly as chatledger's first revision creates them, with their
    indexes: read from that revision's own ``upgrade()`` (recorded, not run), so
    adoption converts to precisely what ``chatledger upgrade`` would have made."""
    from alembic.operations import Operations, ops
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    revision = ScriptDirectory.from_config(migrate.alembic_config()).get_revision(FIRST_REVISION)
    if revision is None:  # pragma: no cover - the revision ships with the package
        raise RuntimeError(f"chatledger's revision {FIRST_REVISION} is missing")
    context = MigrationContext.configure(dialect_name="sqlite")
    recorded: list[ops.MigrateOperation] = []
    with Operations.context(context) as operations:
        operations.invoke = recorded.append  # type: ignore[method-assign,assignment]
        revision.module.upgrade()
    tables: dict[str, Table] = {}
    for op in recorded:
        if isinstance(op, ops.CreateTableOp):
            table = op.to_table(context)
            tables[table.name] = table
    for op in recorded:
        if isinstance(op, ops.CreateIndexOp):
            table = tables[op.table_name]
            Index(op.index_name, *(table.c[str(name)] for name in op.columns), unique=bool(op.unique))
    return tables


def _family(type_: TypeEngine[Any]) -> str:
    if isinstance(type_, Integer):
        return "integer"
    if isinstance(type_, DateTime):
        return "timestamp"
    if isinstance(type_, String | LargeBinary) or type(type_).__name__ in ("VARBINARY", "BINARY"):
        return "string"
    return type(type_).__name__


def _target_family(table: Table, column: str) -> str:
    type_ = table.c[column].type
    impl = getattr(type_, "impl", type_)
    return _family(impl if isinstance(impl, TypeEngine) else type_)


def _survey_table(inspector: Inspector, name: str) -> TableSurvey:
    pk = inspector.get_pk_constraint(name)
    return TableSurvey(
        name=name,
        columns={column["name"]: column for column in inspector.get_columns(name)},
        indexes={
            str(index["name"]): (tuple(str(c) for c in index["column_names"]), bool(index["unique"]))
            for index in inspector.get_indexes(name)
        },
        primary_key=pk.get("name"),
        checks=frozenset(str(check["name"]) for check in inspector.get_check_constraints(name)),
    )


def _problems(table: TableSurvey, target: Table, all_foreign_keys: list[str]) -> list[str]:
    problems: list[str] = []
    name = table.name
    expected = {column.name for column in target.c}
    optional = set(OPTIONAL_ZETT_COLUMNS.get(name, ()))
    counters = set(COUNTER_COLUMNS) if name == "agent_sessions" else set()
    present = set(table.columns)
    unknown = sorted(present - expected)
    if unknown:
        problems.append(f"{name} has columns zett-agent does not create: {', '.join(unknown)}")
    missing = sorted(expected - present - optional - counters)
    if missing:
        problems.append(f"{name} lacks columns zett-agent creates: {', '.join(missing)}")
    if counters and counters & present and not counters <= present:
        problems.append(
            f"{name} has some of chatledger's counter columns but not all: "
            f"{', '.join(sorted(counters & present))}"
        )
    for column_name in sorted(present & expected):
        reflected = table.columns[column_name]
        family, wanted = _family(reflected["type"]), _target_family(target, column_name)
        if family != wanted:
            problems.append(f"{name}.{column_name} is {reflected['type']!r}, not a {wanted} column")
        if bool(reflected["nullable"]) != bool(target.c[column_name].nullable):
            state = "nullable" if reflected["nullable"] else "NOT NULL"
            problems.append(f"{name}.{column_name} is {state}, unlike zett-agent's")
    known: dict[str, tuple[tuple[str, ...], bool]] = {
        str(index.name): (tuple(c.name for c in index.columns), bool(index.unique))
        for index in target.indexes
    }
    known.update(ZETT_ONLY_INDEXES.get(name, {}))
    for index_name, shape in sorted(table.indexes.items()):
        if index_name not in known:
            problems.append(
                f"{name} has the index {index_name} on ({', '.join(shape[0])}), which neither zett-agent "
                "nor chatledger creates: drop it first (and recreate it after adoption if you need it)"
            )
        elif known[index_name] != shape:
            problems.append(f"{name}'s index {index_name} is on ({', '.join(shape[0])}), unlike zett-agent's")
    checks = {
        str(constraint.name) for constraint in target.constraints if isinstance(constraint, CheckConstraint)
    }
    for check in sorted(table.checks - checks):
        problems.append(f"{name} has the check constraint {check}, which zett-agent does not create")
    problems.extend(all_foreign_keys)
    return problems


def _foreign_keys(inspector: Inspector, tables: list[str]) -> dict[str, list[str]]:
    """Foreign keys into or out of zett's tables, per zett table."""
    found: dict[str, list[str]] = {name: [] for name in ZETT_TABLES}
    for table in tables:
        for key in inspector.get_foreign_keys(table):
            referred = key.get("referred_table")
            if table in found:
                found[table].append(
                    f"{table} has a foreign key to {referred}, which zett-agent does not create"
                )
            elif referred in found:
                found[str(referred)].append(
                    f"the table {table} has a foreign key into {referred}: drop it first (adoption "
                    "changes the referenced column's type)"
                )
    return found


def survey(connection: Connection) -> ZettSchema:
    """Recognise zett-agent's schema on ``connection``, by catalog inspection only.

    Raises:
        NotAdoptable: the database is chatledger's already, has no zett-agent tables,
            or differs from zett-agent 0.2.x's schema; the message lists every reason.
    """
    inspector = inspect(connection)
    revision = migrate.current_revision(connection)
    if revision is not None:
        known = "" if migrate.is_known(revision) else ", which this chatledger does not know"
        raise NotAdoptable(
            f"the database is chatledger's already (revision {revision}{known}); nothing to adopt"
        )
    names = list(inspector.get_table_names())
    present = [name for name in ZETT_TABLES if name in names]
    if not present:
        raise NotAdoptable(
            "the database has none of zett-agent's tables (agent_sessions, raw_messages, "
            "session_snapshots); nothing to adopt (a new database needs `chatledger upgrade`)"
        )
    absent = [name for name in ZETT_TABLES if name not in names]
    if absent:
        raise NotAdoptable(f"the database has {', '.join(present)} but not {', '.join(absent)}")
    targets = first_revision_tables()
    foreign = _foreign_keys(inspector, names)
    tables = {name: _survey_table(inspector, name) for name in ZETT_TABLES}
    problems = [
        problem for name in ZETT_TABLES for problem in _problems(tables[name], targets[name], foreign[name])
    ]
    rein_table = REIN_TABLE in names
    if rein_table:
        rein = _survey_table(inspector, REIN_TABLE)
        if set(rein.columns) != {column.name for column in targets[REIN_TABLE].c}:
            problems.append(f"the table {REIN_TABLE} exists but is not chatledger's")
    views = [view for view in inspector.get_view_names() if _mentions(inspector.get_view_definition(view))]
    if views:
        problems.append(
            f"views read zett-agent's tables ({', '.join(sorted(views))}): drop them first and "
            "recreate them after adoption"
        )
    if problems:
        raise NotAdoptable("; ".join(problems))
    return ZettSchema(tables=tables, rein_table=rein_table)


def _mentions(definition: object) -> bool:
    import re

    text = str(definition or "")
    return any(re.search(rf"\b{name}\b", text) for name in ZETT_TABLES)


def adopt_hint(connection: Connection) -> str | None:
    """What to do with a database that holds zett-agent's or chatledger's tables but no
    chatledger revision (one sentence); ``None`` for any other database.

    * zett-agent's three tables and none of chatledger's own (``rein_sessions``, the
      ``chatledger_*`` bookkeeping tables): zett's own store wrote it; the sentence names
      ``chatledger adopt``, and adopting a copy to leave the original to zett (what
      ``copy`` and ``export``, which read chatledger's schema only, need from it);
    * the OpenAI Agents SDK's own tables (:data:`OPENAI_SDK_TABLES`, its
      ``agent_sessions`` keyed by ``session_id``): the SDK wrote it; the sentence says to
      keep it and import from it into another database (``chatledger import
      --openai-sdk``), never to drop a table;
    * any other mix: a revision applied halfway -- on MySQL/MariaDB every DDL statement
      commits on its own, so an upgrade stopped there (or still running) leaves its
      first tables -- or tables made by hand. The sentence names the tables and the
      steps of docs/deploying.md to undo it (``adopt`` refuses such a database, unless it was an
      adoption that stopped midway, which the sentence mentions when it may be one).

    Cheap (one catalog lookup and the revision), for ``chatledger upgrade``,
    ``chatledger check`` and the ``SchemaNotReady`` message to add to what they say.
    The command names the connection's database (:func:`chatledger.dsn.as_argument`,
    password masked); the ``chatledger`` command puts the DSN it was given in its place.
    """
    if migrate.current_revision(connection) is not None:
        return None
    # The table listing, not has_table: MariaDB's DESCRIBE fails (error 1684) while
    # another process's upgrade alters the table, which MySQL commits statement by statement.
    present = set(inspect(connection).get_table_names())
    if set(OPENAI_SDK_TABLES) <= present and _sdk_sessions(connection):
        return (
            "it holds the OpenAI Agents SDK's own tables (agent_sessions, agent_messages), and "
            "chatledger's agent_sessions is another table of that name, so chatledger cannot use "
            "this database. Keep it as it is: give chatledger a database of its own and move the "
            f"sessions in with `chatledger import --dsn <chatledger's DSN> --openai-sdk "
            f"{as_argument(connection.engine.url)}` (`--dry-run` counts first; "
            """docs/openai-agents.md, "Moving in from the SDK's own tables")"""
        )
    zett = set(ZETT_TABLES) <= present
    if zett and not present & set(OWN_TABLES):
        return (
            "it holds zett-agent's own tables (agent_sessions, raw_messages, session_snapshots): "
            f"run `chatledger adopt --dsn {as_argument(connection.engine.url)}` to convert them in place "
            "(`--dry-run` shows the steps first). Adopting is one-way: to leave this database to "
            "zett-agent until the cutover, adopt a copy of it and copy that (docs/moving-in.md)"
        )
    found = [name for name in (*ZETT_TABLES, *OWN_TABLES) if name in present]
    # An empty version table alone is what a downgrade to base leaves: an empty database.
    if set(found) <= {migrate.VERSION_TABLE}:
        return None
    adoption = (
        "; if it was `chatledger adopt` that stopped midway, run it again instead: it continues"
        if zett
        else ""
    )
    return (
        f"it holds some of chatledger's tables ({', '.join(found)}) but no chatledger revision: a "
        "revision applied halfway (MySQL/MariaDB commit every DDL statement on its own, so an upgrade "
        "stopped there, or still running, leaves its first tables) or tables made by hand. Once no "
        'upgrade runs, undo it as docs/deploying.md, "Deploying: migrations" says for MySQL (drop '
        "the tables the half-applied revision created, as its downgrade() would) and run "
        f"`chatledger upgrade --dsn {as_argument(connection.engine.url)}` again{adoption}"
    )


def _sdk_sessions(connection: Connection) -> bool:
    """Whether ``agent_sessions`` is the OpenAI Agents SDK's: keyed by ``session_id``
    (zett's and chatledger's are keyed by ``id``)."""
    columns = {column["name"] for column in inspect(connection).get_columns(OPENAI_SDK_TABLES[0])}
    return "session_id" in columns and "id" not in columns


def state_and_hint(connection: Connection) -> tuple[migrate.SchemaState, str | None]:
    """The database's schema state (:func:`chatledger.migrate.read_state`) and, for one
    without a chatledger revision, :func:`adopt_hint`'s sentence; reads only."""
    state = migrate.read_state(connection)
    return state, adopt_hint(connection) if state.revision is None else None


def refuse_zett_tables(connection: Connection) -> None:
    """Refuse to migrate a database holding zett-agent's own tables, or some of
    chatledger's, and no chatledger revision: the first revision would create
    chatledger's tables over them (and fail halfway on MySQL/MariaDB).

    Raises:
        SchemaNotReady: saying what to do (:func:`adopt_hint`): ``chatledger adopt``, or
            undo a half-applied revision.
    """
    hint = adopt_hint(connection)
    if hint is not None:
        raise SchemaNotReady(f"not migrating database {display(connection.engine.url)}: {hint}")
