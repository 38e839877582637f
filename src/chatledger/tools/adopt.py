"""``chatledger adopt``: convert zett-agent's own database to chatledger's schema, in place.

zett-agent's ``SQLSessionStorage`` and chatledger share table and column names, so
adoption keeps every row where it is and changes the tables around it:

1. **check** (read only): the schema is zett-agent 0.2.x's
   (:func:`chatledger.adoption.survey`), and the data fits chatledger's rules: every
   raw message and checkpoint belongs to a session row, each session's sequences
   run 1..n without a gap, the newest checkpoint's boundary lies within the raw log,
   ids fit 255 characters. Anything else is refused, with every reason, before a
   single change;
2. **widen** ids to 255 characters (``VARBINARY(1020)`` on MySQL), integers to 64
   bits, timestamps to UTC with microseconds (PostgreSQL: ``timestamptz``, the
   stored wall time read as UTC, exactly as zett reads it; MySQL: ``DATETIME(6)``
   and the tables in ``utf8mb4_bin``); drop zett's extra indexes, add chatledger's;
3. **fill** the counter row of every session from its data: the last sequence,
   the newest checkpoint's version and boundary;
4. add the check constraint and ``rein_sessions``, **stamp** revision ``0001``
   (whose schema the result is, exactly) and **upgrade** to head through chatledger's
   own migrations, so later revisions apply as on any chatledger database;
5. **verify**: Alembic's comparison of the database with chatledger's models finds
   no difference.

On SQLite and PostgreSQL all of it is one transaction: it commits whole or not at
all. SQLite cannot change a column's type, so there each table is rebuilt (renamed
aside, created as revision 0001 creates it, copied, dropped). MySQL and MariaDB
commit every ``ALTER TABLE`` on its own: there everything is checked first, and each
step is idempotent, so running ``chatledger adopt`` again after an interruption
continues where it stopped.

Writers must be stopped during adoption (PostgreSQL locks the tables for its
transaction; the others do not).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import (
    Column,
    DateTime,
    Index,
    Table,
    column,
    exists,
    func,
    insert,
    or_,
    select,
    table,
    text,
    update,
)
from sqlalchemy.engine import URL, Connection
from sqlalchemy.pool import NullPool
from sqlalchemy.schema import CreateColumn
from sqlalchemy.types import TypeDecorator

from .. import dialects, migrate
from ..adoption import (
    FIRST_REVISION,
    REIN_TABLE,
    ZETT_TABLES,
    NotAdoptable,
    TableSurvey,
    ZettSchema,
    first_revision_tables,
    survey,
)
from ..dsn import display, resolve_dsn, sqlite_file
from ..errors import ChatledgerError
from ..options import LedgerOptions
from ..types import MAX_ID_LENGTH

#: Reasons listed per kind of data problem; the rest are counted.
SAMPLES = 5
#: Name a zett table is renamed to while SQLite rebuilds it.
_ASIDE = "_chatledger_zett_{name}"


class AdoptionStopped(ChatledgerError, RuntimeError):
    """An adoption on MySQL/MariaDB stopped after some of its steps had committed.
    The message names the step; running ``chatledger adopt`` again continues."""


@dataclass(frozen=True)
class Step:
    """One change of the adoption: what it does, in words, and the doing."""

    description: str
    run: Callable[[Connection], None]


@dataclass
class AdoptReport:
    """What an adoption found and did."""

    database: str
    backend: str
    sessions: int = 0
    messages: int = 0
    checkpoints: int = 0
    #: The steps, in order (on a dry run: the steps it would take).
    steps: list[str] = field(default_factory=list)
    #: The revision reached; ``None`` on a dry run.
    revision: str | None = None
    dry_run: bool = False
    #: An earlier adoption had stopped midway (MySQL/MariaDB) and this one continued it.
    resumed: bool = False
    #: The database was chatledger's already (adopted before, or migrated by chatledger), at
    #: :attr:`revision`: nothing was done, as an upgrade of a database at head does nothing.
    already: bool = False


Say = Callable[[str], None]


def _quoter(connection: Connection) -> Callable[[str], str]:
    """Quotes an identifier as the connection's dialect needs."""
    quote: Callable[[str], str] = connection.dialect.identifier_preparer.quote
    return quote


def _execute(sql: str) -> Callable[[Connection], None]:
    def run(connection: Connection) -> None:
        connection.exec_driver_sql(sql)

    return run


def _differs(connection: Connection, reflected: Mapping[str, Any], target: Column[Any]) -> bool:
    """Whether the column's type differs from the target's, as Alembic's comparison
    (and so ``alembic check``) sees it."""
    from alembic.runtime.migration import MigrationContext

    impl = MigrationContext.configure(connection).impl
    if impl.compare_type(Column(target.name, reflected["type"]), target):
        return True
    # Alembic does not compare fractional-second precision: MySQL's DATETIME and
    # DATETIME(6) look alike to it, but only the latter keeps microseconds.
    # The revision's types are frozen with_variant types (or TypeDecorators): what the
    # dialect renders is what counts.
    wanted = target.type.dialect_impl(connection.dialect)
    if isinstance(wanted, TypeDecorator):
        wanted = wanted.load_dialect_impl(connection.dialect)
    return getattr(reflected["type"], "fsp", None) != getattr(wanted, "fsp", None)


@dataclass
class _Diff:
    """How one zett table differs from revision 0001's."""

    widen: list[tuple[Column[Any], Mapping[str, Any]]]
    add: list[Column[Any]]
    drop_indexes: list[str]
    create_indexes: list[Index]


def _diff(connection: Connection, current: TableSurvey, target: Table) -> _Diff:
    widen = [
        (col, current.columns[col.name])
        for col in target.c
        if col.name in current.columns and _differs(connection, current.columns[col.name], col)
    ]
    add = [col for col in target.c if col.name not in current.columns]
    wanted = {index.name for index in target.indexes}
    drop = sorted(name for name in current.indexes if name not in wanted)
    create = sorted(
        (index for index in target.indexes if index.name not in current.indexes), key=lambda i: str(i.name)
    )
    return _Diff(widen, add, drop, create)


def _describe(name: str, diff: _Diff, connection: Connection, extra: list[str]) -> str:
    parts: list[str] = []
    by_type: dict[str, list[str]] = {}
    for col, _ in diff.widen:
        by_type.setdefault(str(col.type.compile(dialect=connection.dialect)), []).append(col.name)
    for type_sql, names in by_type.items():
        parts.append(f"{', '.join(names)} to {type_sql}")
    if diff.add:
        parts.append(f"add {', '.join(col.name for col in diff.add)}")
    if diff.drop_indexes:
        parts.append(f"drop zett's indexes {', '.join(diff.drop_indexes)}")
    if diff.create_indexes:
        parts.append(f"create {', '.join(str(index.name) for index in diff.create_indexes)}")
    return f"{name}: " + "; ".join(parts + extra)


def _index_clause(index: Index, quote: Callable[[str], str]) -> str:
    columns = ", ".join(quote(col.name) for col in index.columns)
    return f"ADD {'UNIQUE ' if index.unique else ''}INDEX {quote(str(index.name))} ({columns})"


def _convert_postgresql(connection: Connection, current: TableSurvey, target: Table) -> list[Step]:
    """One ``ALTER TABLE`` per table (one rewrite), the primary key renamed to
    chatledger's name, zett's extra indexes dropped."""
    diff = _diff(connection, current, target)
    q = _quoter(connection)
    clauses: list[str] = []
    for col, reflected in diff.widen:
        using = ""
        if isinstance(reflected["type"], DateTime) and not reflected["type"].timezone:
            # zett stores naive UTC wall times and reads them back as UTC: keep that instant.
            using = f" USING {q(col.name)} AT TIME ZONE 'UTC'"
        clauses.append(
            f"ALTER COLUMN {q(col.name)} TYPE {col.type.compile(dialect=connection.dialect)}{using}"
        )
    clauses += [f"ADD COLUMN {CreateColumn(col).compile(dialect=connection.dialect)}" for col in diff.add]
    primary_key = target.primary_key.name
    rename = primary_key is not None and current.primary_key not in (None, primary_key)
    extra = [f"rename the primary key {current.primary_key} to {primary_key}"] if rename else []
    if not (clauses or rename or diff.drop_indexes or diff.create_indexes):
        return []

    def run(conn: Connection) -> None:
        if clauses:
            conn.exec_driver_sql(f"ALTER TABLE {q(target.name)} " + ", ".join(clauses))
        if rename:
            old, new = q(str(current.primary_key)), q(str(primary_key))
            conn.exec_driver_sql(f"ALTER TABLE {q(target.name)} RENAME CONSTRAINT {old} TO {new}")
        for name in diff.drop_indexes:
            conn.exec_driver_sql(f"DROP INDEX {q(name)}")
        for index in diff.create_indexes:
            index.create(conn)

    return [Step(_describe(target.name, diff, connection, extra), run)]


def _convert_mysql(connection: Connection, current: TableSurvey, target: Table) -> list[Step]:
    """Two ``ALTER TABLE`` statements per table: the character set first (every text
    column converted to utf8mb4, so ids become their UTF-8 bytes whatever zett's
    charset was), then the types, columns and indexes in one statement."""
    q = _quoter(connection)
    steps: list[Step] = []
    info = connection.execute(
        text(
            "SELECT TABLE_COLLATION, ENGINE FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :name"
        ),
        {"name": target.name},
    ).one()
    other_collations = connection.scalar(
        text(
            "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
            "AND TABLE_NAME = :name AND COLLATION_NAME IS NOT NULL AND COLLATION_NAME <> 'utf8mb4_bin'"
        ),
        {"name": target.name},
    )
    if info.TABLE_COLLATION != "utf8mb4_bin" or other_collations or str(info.ENGINE).lower() != "innodb":
        steps.append(
            Step(
                f"{target.name}: convert to InnoDB, utf8mb4_bin (was {info.ENGINE}, {info.TABLE_COLLATION})",
                _execute(
                    f"ALTER TABLE {q(target.name)} ENGINE=InnoDB, "
                    "CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
                ),
            )
        )
    diff = _diff(connection, current, target)
    clauses = [
        f"MODIFY COLUMN {CreateColumn(col).compile(dialect=connection.dialect)}" for col, _ in diff.widen
    ]
    order = [col.name for col in target.c]
    for col in diff.add:  # where revision 0001 has it, so that SHOW CREATE TABLE reads the same
        after = order[order.index(col.name) - 1] if order.index(col.name) else None
        position = f" AFTER {q(after)}" if after else " FIRST"
        clauses.append(f"ADD COLUMN {CreateColumn(col).compile(dialect=connection.dialect)}{position}")
    clauses += [f"DROP INDEX {q(name)}" for name in diff.drop_indexes]
    clauses += [_index_clause(index, q) for index in diff.create_indexes]
    if clauses:
        steps.append(
            Step(
                _describe(target.name, diff, connection, []),
                _execute(f"ALTER TABLE {q(target.name)} " + ", ".join(clauses)),
            )
        )
    return steps


def _convert_sqlite(connection: Connection, current: TableSurvey, target: Table) -> list[Step]:
    """SQLite changes no column type: the table is renamed aside, created as revision
    0001 creates it (with its indexes), filled from the old one, which is dropped."""
    aside = _ASIDE.format(name=target.name)
    copied = [col.name for col in target.c if col.name in current.columns]
    diff = _diff(connection, current, target)
    q = _quoter(connection)

    def run(conn: Connection) -> None:
        conn.exec_driver_sql(f"ALTER TABLE {q(target.name)} RENAME TO {q(aside)}")
        for name in current.indexes:  # index names are per database: free them
            conn.exec_driver_sql(f"DROP INDEX {q(name)}")
        target.create(conn)
        source = select(*(column(name) for name in copied)).select_from(table(aside))  # type: ignore[var-annotated]
        conn.execute(insert(target).from_select(copied, source))
        conn.exec_driver_sql(f"DROP TABLE {q(aside)}")

    return [Step(_describe(target.name, diff, connection, ["rebuild the table"]), run)]


#: The backends' ways of changing a zett table, by name
#: (:attr:`chatledger.dialects.Backend.adoption`).
CONVERSIONS: dict[str, Callable[[Connection, TableSurvey, Table], list[Step]]] = {
    "alter-column": _convert_postgresql,
    "modify-column": _convert_mysql,
    "rebuild": _convert_sqlite,
}


# -- the check ------------------------------------------------------------------------

_s = table("agent_sessions", column("id"), column("parent_session_id"))
_r = table("raw_messages", column("session_id"), column("request_id"), column("sequence"))
_v = table("session_snapshots", column("session_id"), column("version"), column("compacted_through_sequence"))


def _sample(connection: Connection, statement: Any) -> list[Any]:
    return list(connection.execute(statement.limit(SAMPLES + 1)))


def _listed(rows: list[Any], render: Callable[[Any], str]) -> str:
    shown = ", ".join(render(row) for row in rows[:SAMPLES])
    return shown + (", ..." if len(rows) > SAMPLES else "")


def data_problems(connection: Connection, backend: dialects.Backend) -> list[str]:
    """Why zett's rows cannot become chatledger's as they are (empty: they can)."""
    problems: list[str] = []
    for name, child in (("raw messages", _r), ("checkpoints", _v)):
        orphans = _sample(
            connection,
            select(child.c.session_id)
            .where(~exists().where(backend.adoption_equal(_s.c.id, child.c.session_id)))
            .distinct(),
        )
        if orphans:
            problems.append(
                f"{name} belong to sessions without a session row (ids "
                f"{_listed(orphans, lambda r: repr(r[0]))}): delete them or create the session rows"
            )
    count, first, last = func.count(), func.min(_r.c.sequence), func.max(_r.c.sequence)
    gaps = _sample(
        connection,
        select(_r.c.session_id, count, last).group_by(_r.c.session_id).having(or_(count != last, first != 1)),
    )
    if gaps:
        problems.append(
            "raw-log sequences must run 1, 2, 3... without a gap, as zett-agent writes them; "
            f"they do not in {_listed(gaps, lambda r: f'{r[0]!r} ({r[1]} messages, last sequence {r[2]})')}"
        )
    newest = _v.alias("newest")
    latest_version = (
        select(func.max(_v.c.version)).where(_v.c.session_id == newest.c.session_id).scalar_subquery()
    )
    last_sequence = (
        select(func.max(_r.c.sequence)).where(_r.c.session_id == newest.c.session_id).scalar_subquery()
    )
    beyond = _sample(
        connection,
        select(newest.c.session_id, newest.c.compacted_through_sequence).where(
            newest.c.version == latest_version,
            newest.c.compacted_through_sequence > func.coalesce(last_sequence, 0),
        ),
    )
    if beyond:
        problems.append(
            "the newest checkpoint's boundary lies beyond the raw log in "
            f"{_listed(beyond, lambda r: f'{r[0]!r} (through {r[1]})')}"
        )
    for label, col in (
        ("session ids", _s.c.id),
        ("parent session ids", _s.c.parent_session_id),
        ("raw messages' session ids", _r.c.session_id),
        ("request ids", _r.c.request_id),
    ):
        long = _sample(connection, select(col).where(backend.char_length(col) > MAX_ID_LENGTH))
        if long:
            problems.append(
                f"{label} longer than {MAX_ID_LENGTH} characters: "
                f"{_listed(long, lambda r: repr(r[0][:40]) + '...')}"
            )
    return problems


def _counts(connection: Connection) -> tuple[int, int, int]:
    return (
        int(connection.scalar(select(func.count()).select_from(_s)) or 0),
        int(connection.scalar(select(func.count()).select_from(_r)) or 0),
        int(connection.scalar(select(func.count()).select_from(_v)) or 0),
    )


# -- the plan -------------------------------------------------------------------------


def _fill_counters(connection: Connection) -> None:
    """Every session's counter row from its data: the last sequence, the newest
    checkpoint's version and then its boundary (two statements, because MySQL's
    ``UPDATE`` reads columns it already set in the same statement)."""
    tables = first_revision_tables()
    s, r, v = tables["agent_sessions"], tables["raw_messages"], tables["session_snapshots"]
    last = select(func.max(r.c.sequence)).where(r.c.session_id == s.c.id).scalar_subquery()
    version = select(func.max(v.c.version)).where(v.c.session_id == s.c.id).scalar_subquery()
    connection.execute(
        update(s).values(
            last_sequence=func.coalesce(last, 0),
            snapshot_version=func.coalesce(version, 0),
            compacted_through_sequence=0,
            fields_version=1,
        )
    )
    boundary = (
        select(v.c.compacted_through_sequence)
        .where(v.c.session_id == s.c.id, v.c.version == s.c.snapshot_version)
        .scalar_subquery()
    )
    connection.execute(update(s).where(s.c.snapshot_version > 0).values(compacted_through_sequence=boundary))


def _add_check(connection: Connection) -> None:
    from alembic.operations import Operations
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy import CheckConstraint, inspect

    target = first_revision_tables()["agent_sessions"]
    existing = {check["name"] for check in inspect(connection).get_check_constraints(target.name)}
    for constraint in target.constraints:
        if isinstance(constraint, CheckConstraint) and constraint.name not in existing:
            operations = Operations(MigrationContext.configure(connection))
            operations.create_check_constraint(str(constraint.name), target.name, constraint.sqltext)


def _create_rein_table(connection: Connection) -> None:
    first_revision_tables()[REIN_TABLE].create(connection)


def _stamp_and_upgrade(connection: Connection) -> None:
    from alembic import command

    # The one migration of zett's tables env.py lets through: they are revision 0001's now.
    command.stamp(migrate.alembic_config(connection, adopting=True), FIRST_REVISION)
    command.upgrade(migrate.alembic_config(connection), "head")


def drift(connection: Connection) -> list[Any]:
    """Differences between chatledger's tables in the database and its models, as
    ``alembic check`` finds them (other tables of the database are not compared)."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from ..schema import metadata

    context = MigrationContext.configure(connection, opts=migrate.context_options(metadata))
    ours = set(metadata.tables)
    return [
        diff
        for diff in compare_metadata(context, metadata)
        if not (isinstance(diff, tuple) and diff[0] == "remove_table" and diff[1].name not in ours)
    ]


def _verify(connection: Connection) -> None:
    found = drift(connection)
    if found:
        raise RuntimeError(f"the adopted schema differs from chatledger's: {found}")


def plan(connection: Connection, schema: ZettSchema, backend: dialects.Backend) -> list[Step]:
    """Every step of the adoption, in order (a dry run prints their descriptions)."""
    tables = first_revision_tables()
    convert = CONVERSIONS[backend.adoption]
    steps = [step for name in ZETT_TABLES for step in convert(connection, schema.tables[name], tables[name])]
    steps.append(
        Step(
            "agent_sessions: fill every session's counter row from its messages and checkpoints",
            _fill_counters,
        )
    )
    steps.append(Step("agent_sessions: add the check constraint boundary_within_log", _add_check))
    if not schema.rein_table:
        steps.append(Step(f"create {REIN_TABLE}", _create_rein_table))
    head = migrate.head_revision()
    upgrade = f", then upgrade to {head}" if head != FIRST_REVISION else " (chatledger's newest)"
    steps.append(Step(f"stamp revision {FIRST_REVISION}{upgrade}", _stamp_and_upgrade))
    steps.append(Step("verify: the tables match chatledger's models exactly", _verify))
    return steps


def _prepare(connection: Connection, backend: dialects.Backend, report: AdoptReport) -> list[Step]:
    """Check everything (read only) and plan; raise :class:`NotAdoptable` with every reason.
    No steps for a database at a revision chatledger ships (:attr:`AdoptReport.already`)."""
    revision = migrate.current_revision(connection)
    if revision is not None and migrate.is_known(revision):
        report.already, report.revision = True, revision
        return []
    if backend.adoption_lock is not None:
        from sqlalchemy import inspect

        if all(inspect(connection).has_table(name) for name in ZETT_TABLES):
            connection.exec_driver_sql(backend.adoption_lock)
    schema = survey(connection)
    problems = data_problems(connection, backend)
    if problems:
        raise NotAdoptable("; ".join(problems))
    report.sessions, report.messages, report.checkpoints = _counts(connection)
    report.resumed = schema.partly_adopted
    steps = plan(connection, schema, backend)
    report.steps = [step.description for step in steps]
    return steps


# -- the command ------------------------------------------------------------------------


async def adopt(dsn: str | URL | None, *, dry_run: bool = False, say: Say | None = None) -> AdoptReport:
    """Convert zett-agent's own tables in the database ``dsn`` names to chatledger's
    schema, in place (see the module documentation for the steps).

    Args:
        dsn: see :func:`chatledger.dsn.resolve_dsn`.
        dry_run: check and plan, print the steps, change nothing.
        say: called with one line per step as it starts (and the resume advice on MySQL).

    Raises:
        NotAdoptable: (a ``ValueError``) the schema or data is not zett-agent's as
            chatledger can adopt it, or the database is at a revision this chatledger
            does not know; every reason is in the message, and nothing was changed. A
            database at a revision it knows (adopted already) is no error: the report
            says :attr:`AdoptReport.already`, and nothing was changed.
        AdoptionStopped: MySQL/MariaDB only: a step failed after earlier ones had
            committed; run the adoption again to continue.
        ConfigurationError: the server refused the connection (no such database,
            login), worded as the stores word it.
    """
    url = resolve_dsn(dsn)
    path = sqlite_file(url)
    if path is not None and not path.is_file():
        raise NotAdoptable(f"no such file: {path}")
    backend = dialects.backend(url.get_backend_name(), url.get_driver_name())
    report = AdoptReport(database=display(url), backend=backend.name, dry_run=dry_run)
    tell: Say = say or (lambda _line: None)
    engine = dialects.create_engine(url, poolclass=NullPool)
    dialects.configure_engine(engine, LedgerOptions(lock_timeout=30.0))
    try:
        # A refused connection as the stores word it; a refused step is the adoption's own.
        with dialects.database_errors(url, statements=False):
            async with engine.connect() as conn:
                conn = await conn.execution_options(**backend.write)
                if backend.transactional_ddl:

                    def whole(connection: Connection) -> None:
                        steps = _prepare(connection, backend, report)
                        if dry_run:
                            return
                        for step in steps:
                            tell(step.description)
                            step.run(connection)
                        report.revision = migrate.current_revision(connection)

                    transaction = await conn.begin()
                    try:
                        await conn.run_sync(whole)
                    except BaseException:
                        await transaction.rollback()
                        raise
                    if dry_run:
                        await transaction.rollback()
                    else:
                        await transaction.commit()
                    return report

                async with conn.begin():
                    steps = await conn.run_sync(_prepare, backend, report)
                if dry_run or report.already:
                    return report
                tell(
                    "MySQL/MariaDB commits each ALTER TABLE on its own, so this adoption is not one "
                    "transaction: if it stops, run the same command again and it continues where it stopped"
                )
                for number, step in enumerate(steps, start=1):
                    tell(step.description)
                    try:
                        async with conn.begin():
                            await conn.run_sync(step.run)
                    except Exception as error:
                        raise AdoptionStopped(
                            f"adoption stopped at step {number} of {len(steps)} ({step.description}); the "
                            f"steps before it are committed. Fix the cause and run `chatledger adopt` again "
                            f"to continue: {getattr(error, 'orig', None) or error}"
                        ) from error
                async with conn.begin():
                    report.revision = await conn.run_sync(migrate.current_revision)
                return report
    finally:
        await engine.dispose()
