"""Schema drift: ``chatledger check`` and :func:`chatledger.migrate.schema_drift` find a
database at the head revision whose tables differ from what that revision creates, and
give the SQL that makes them so again (issue 17, fault 8: a missing index was "at head").

Each case damages a fresh, migrated database as a DBA or a restore would, on every
backend: the drift is found, its fix applied, and the database is clean again.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL, Connection

from chatledger.drift import DRIFT_STATUS, fix_script
from chatledger.migrate import schema_drift, upgrade_database
from chatledger.tools.cli import run

from .conftest import Database
from .support.facts import facts_of
from .support.fresh import fresh_database
from .support.schema_helpers import on_connection

pytestmark = pytest.mark.one_transaction_at_a_time

#: A change to a SQLite table's ``CREATE TABLE`` statement.
Edit = Callable[[str], str]


def sqlite_rebuild(table: str, edit: Edit) -> Callable[[Connection], None]:
    """Rebuild a SQLite table from its ``CREATE TABLE`` statement changed by ``edit``,
    rows and indexes kept: the only way SQLite changes a constraint or a column's type
    (SQLite's documentation, "ALTER TABLE", the generalized procedure: the triggers are
    dropped first and created again last, as the ones naming the table would break
    its rename)."""

    def rebuild(connection: Connection) -> None:
        query = "SELECT type, sql FROM sqlite_master WHERE tbl_name = :name AND sql IS NOT NULL"
        found = connection.execute(text(query), {"name": table}).all()
        triggers = connection.execute(
            text("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND sql IS NOT NULL")
        ).all()
        for name, _ in triggers:
            connection.exec_driver_sql(f'DROP TRIGGER "{name}"')
        (created,) = [sql for kind, sql in found if kind == "table"]
        changed = edit(created)
        assert changed != created
        renamed = re.sub(rf'^CREATE TABLE "?{table}"?', "CREATE TABLE damaged", changed)
        assert renamed != changed
        connection.exec_driver_sql(renamed)
        connection.exec_driver_sql(f"INSERT INTO damaged SELECT * FROM {table}")
        connection.exec_driver_sql(f"DROP TABLE {table}")
        connection.exec_driver_sql(f"ALTER TABLE damaged RENAME TO {table}")
        for kind, sql in found:
            if kind == "index":
                connection.exec_driver_sql(sql)
        for _, sql in triggers:
            connection.exec_driver_sql(sql)

    return rebuild


def statements(*sql: str) -> Callable[[Connection], None]:
    def execute(connection: Connection) -> None:
        for statement in sql:
            connection.exec_driver_sql(statement)

    return execute


def in_order(*steps: Callable[[Connection], None]) -> Callable[[Connection], None]:
    def run_all(connection: Connection) -> None:
        for step in steps:
            step(connection)

    return run_all


@dataclass(frozen=True)
class Damage:
    """One change to a migrated database, per dialect (absent: does not apply)."""

    name: str
    table: str
    #: A part of the difference ``schema_drift`` reports.
    found: str
    by_dialect: dict[str, Callable[[Connection], None]] = field(default_factory=dict)


CHECK = "ck_agent_sessions_boundary_within_log"
#: An application's column, NOT NULL, filled by its default (then dropped, but SQLite's).
ADD_BILLING = "ALTER TABLE agent_sessions ADD COLUMN billing_account VARCHAR(20) NOT NULL DEFAULT 'acct-42'"

DAMAGES = [
    Damage(
        "index dropped",
        "agent_sessions",
        "index ix_agent_sessions_activity (deleted_at, updated_at, id) is missing",
        {
            "sqlite": statements("DROP INDEX ix_agent_sessions_activity"),
            "postgresql": statements("DROP INDEX ix_agent_sessions_activity"),
            "mysql": statements("DROP INDEX ix_agent_sessions_activity ON agent_sessions"),
        },
    ),
    Damage(
        "unique index dropped",
        "raw_messages",
        "unique index ux_raw_session_sequence (session_id, sequence) is missing",
        {
            "sqlite": statements("DROP INDEX ux_raw_session_sequence"),
            "postgresql": statements("DROP INDEX ux_raw_session_sequence"),
            "mysql": statements("DROP INDEX ux_raw_session_sequence ON raw_messages"),
        },
    ),
    Damage(
        "check constraint dropped",
        "agent_sessions",
        f"check constraint {CHECK} (last_sequence >= compacted_through_sequence) is missing",
        {
            "sqlite": sqlite_rebuild(
                "agent_sessions", lambda sql: re.sub(rf",\s*CONSTRAINT {CHECK} CHECK \([^)]*\)", "", sql)
            ),
            "postgresql": statements(f"ALTER TABLE agent_sessions DROP CONSTRAINT {CHECK}"),
            "mysql": statements(f"ALTER TABLE agent_sessions DROP CONSTRAINT {CHECK}"),
        },
    ),
    Damage(
        "column type changed",
        "agent_sessions",
        "column title is VARCHAR(100), chatledger's is VARCHAR(200)",
        {
            "sqlite": sqlite_rebuild(
                "agent_sessions", lambda sql: sql.replace("title VARCHAR(200)", "title VARCHAR(100)")
            ),
            "postgresql": statements("ALTER TABLE agent_sessions ALTER COLUMN title TYPE VARCHAR(100)"),
            "mysql": statements("ALTER TABLE agent_sessions MODIFY title VARCHAR(100) NULL"),
        },
    ),
    Damage(
        "column made nullable",
        "agent_sessions",
        "column created_at is NULL, chatledger's is NOT NULL",
        {
            "sqlite": sqlite_rebuild(
                "agent_sessions",
                lambda sql: sql.replace("created_at DATETIME NOT NULL", "created_at DATETIME"),
            ),
            "postgresql": statements("ALTER TABLE agent_sessions ALTER COLUMN created_at DROP NOT NULL"),
            "mysql": statements("ALTER TABLE agent_sessions MODIFY created_at DATETIME(6) NULL"),
        },
    ),
    Damage(
        "application's NOT NULL column without a default",
        "agent_sessions",
        "column billing_account is not chatledger's and is NOT NULL without a default",
        {
            "sqlite": in_order(
                statements(ADD_BILLING),
                sqlite_rebuild("agent_sessions", lambda sql: sql.replace(" DEFAULT 'acct-42'", "")),
            ),
            **{
                dialect: statements(
                    ADD_BILLING,
                    "ALTER TABLE agent_sessions ALTER COLUMN billing_account DROP DEFAULT",
                )
                for dialect in ("postgresql", "mysql")
            },
        },
    ),
    Damage(
        "index changed",
        "agent_sessions",
        "index ix_agent_sessions_activity is (updated_at, id), chatledger's is (deleted_at, updated_at, id)",
        {
            "sqlite": statements(
                "DROP INDEX ix_agent_sessions_activity",
                "CREATE INDEX ix_agent_sessions_activity ON agent_sessions (updated_at, id)",
            ),
            "postgresql": statements(
                "DROP INDEX ix_agent_sessions_activity",
                "CREATE INDEX ix_agent_sessions_activity ON agent_sessions (updated_at, id)",
            ),
            "mysql": statements(
                "DROP INDEX ix_agent_sessions_activity ON agent_sessions",
                "CREATE INDEX ix_agent_sessions_activity ON agent_sessions (updated_at, id)",
            ),
        },
    ),
    Damage(
        "unique index no longer unique",
        "raw_messages",
        "index ux_raw_session_sequence is (session_id, sequence), "
        "chatledger's is (session_id, sequence, unique)",
        {
            "sqlite": statements(
                "DROP INDEX ux_raw_session_sequence",
                "CREATE INDEX ux_raw_session_sequence ON raw_messages (session_id, sequence)",
            ),
            "postgresql": statements(
                "DROP INDEX ux_raw_session_sequence",
                "CREATE INDEX ux_raw_session_sequence ON raw_messages (session_id, sequence)",
            ),
            "mysql": statements(
                "DROP INDEX ux_raw_session_sequence ON raw_messages",
                "CREATE INDEX ux_raw_session_sequence ON raw_messages (session_id, sequence)",
            ),
        },
    ),
    Damage(
        "id column under a case-insensitive collation",
        "raw_messages",
        "column id has the collation ",
        {
            "sqlite": sqlite_rebuild(
                "raw_messages",
                lambda sql: sql.replace(
                    "id VARCHAR(36) NOT NULL", "id VARCHAR(36) COLLATE NOCASE NOT NULL", 1
                ),
            ),
            "postgresql": statements(
                "CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
                "ALTER TABLE raw_messages ALTER COLUMN id TYPE VARCHAR(36) COLLATE ci",
            ),
        },
    ),
    Damage(
        "session id under another collation",
        "agent_sessions",
        "column id has the collation ",
        {
            "sqlite": sqlite_rebuild(
                "agent_sessions",
                lambda sql: sql.replace(
                    "id VARCHAR(255) NOT NULL", "id VARCHAR(255) COLLATE RTRIM NOT NULL", 1
                ),
            ),
            "postgresql": statements(
                'ALTER TABLE agent_sessions ALTER COLUMN id TYPE VARCHAR(255) COLLATE "C"',
            ),
        },
    ),
    Damage(
        "primary key dropped",
        "rein_sessions",
        "primary key (id) is missing",
        {
            "sqlite": sqlite_rebuild(
                "rein_sessions",
                lambda sql: re.sub(r",\s*CONSTRAINT pk_rein_sessions PRIMARY KEY \(id\)", "", sql),
            ),
            "postgresql": statements("ALTER TABLE rein_sessions DROP CONSTRAINT pk_rein_sessions"),
            "mysql": statements("ALTER TABLE rein_sessions DROP PRIMARY KEY"),
        },
    ),
    Damage(
        "table dropped",
        "rein_sessions",
        "the table is missing",
        {dialect: statements("DROP TABLE rein_sessions") for dialect in ("sqlite", "postgresql", "mysql")},
    ),
    Damage(
        "stray unique index",
        "raw_messages",
        "unique index ux_stray is not chatledger's",
        {
            dialect: statements("CREATE UNIQUE INDEX ux_stray ON raw_messages (session_id, role, id)")
            for dialect in ("sqlite", "postgresql", "mysql")
        },
    ),
    Damage(
        "stray check constraint",
        "rein_sessions",
        "check constraint ck_stray is not chatledger's",
        {
            "sqlite": sqlite_rebuild(
                "rein_sessions",
                lambda sql: sql.replace(
                    "PRIMARY KEY (id)", "PRIMARY KEY (id), CONSTRAINT ck_stray CHECK (version > 0)"
                ),
            ),
            "postgresql": statements("ALTER TABLE rein_sessions ADD CONSTRAINT ck_stray CHECK (version > 0)"),
            "mysql": statements("ALTER TABLE rein_sessions ADD CONSTRAINT ck_stray CHECK (version > 0)"),
        },
    ),
    Damage(
        "column collation changed",
        "agent_sessions",
        "column agent_name has the collation utf8mb4_general_ci, chatledger's is utf8mb4_bin",
        {
            "mysql": statements(
                "ALTER TABLE agent_sessions MODIFY agent_name VARCHAR(64) COLLATE utf8mb4_general_ci NULL"
            )
        },
    ),
    Damage(
        "long text collation changed",
        "raw_messages",
        "column message_json is LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci",
        {
            "mysql": statements(
                "ALTER TABLE raw_messages MODIFY message_json LONGTEXT CHARACTER SET utf8mb4 "
                "COLLATE utf8mb4_unicode_ci NOT NULL"
            )
        },
    ),
    Damage(
        "table converted to another collation",
        "raw_messages",
        "the table's default collation is utf8mb4_general_ci, chatledger's is utf8mb4_bin",
        {
            "mysql": statements(
                "ALTER TABLE raw_messages CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci"
            )
        },
    ),
    Damage(
        "table collation changed",
        "session_snapshots",
        "the table's default collation is utf8mb4_general_ci, chatledger's is utf8mb4_bin",
        {"mysql": statements("ALTER TABLE session_snapshots DEFAULT COLLATE utf8mb4_general_ci")},
    ),
]


@pytest.fixture
async def migrated(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    """A fresh database of the target, migrated to head, dropped afterwards."""
    async with fresh_database(database.server, tmp_path, prefix="chatledger_drift") as url:
        await upgrade_database(url)
        yield url


async def apply(url: URL, fix: list[str]) -> None:
    await on_connection(url, statements(*fix))


async def test_a_fresh_database_is_clean_and_an_apps_tables_are_not_drift(migrated: URL) -> None:
    """Neither an application's table beside chatledger's nor a plain index of its own on
    one of chatledger's (zett-agent's store creates its indexes on open) is drift."""
    await on_connection(
        migrated,
        statements(
            "CREATE TABLE app_notes (id INTEGER PRIMARY KEY, body VARCHAR(20) NOT NULL)",
            "CREATE INDEX ix_app_notes_body ON app_notes (body)",
            "CREATE INDEX ix_raw_messages_request_id ON raw_messages (request_id)",
        ),
    )
    assert await schema_drift(migrated) == []
    assert await run(["check", "--dsn", migrated.render_as_string(hide_password=False)]) == 0


@pytest.mark.parametrize("damage", DAMAGES, ids=[damage.name for damage in DAMAGES])
async def test_drift_is_found_and_its_fix_makes_the_database_clean(
    migrated: URL, backend: str, damage: Damage
) -> None:
    if backend not in damage.by_dialect:
        pytest.skip(f"{damage.name}: {backend} has no such setting")
    await on_connection(migrated, damage.by_dialect[backend])
    found = await schema_drift(migrated)
    assert [drift.table for drift in found] == [damage.table], found
    (drift,) = found
    assert any(damage.found in difference for difference in drift.differences), drift.differences
    assert drift.fix
    assert_drops_nothing(drift.fix)
    await apply(migrated, list(drift.fix))
    assert await schema_drift(migrated) == []


def assert_drops_nothing(fix: tuple[str, ...]) -> None:
    """No statement drops a column, and a table only once its rows are copied into the
    table that replaces it (SQLite's rebuild)."""
    copied: set[str] = set()
    for statement in fix:
        assert not re.search(r"\bDROP\s+COLUMN\b", statement, re.IGNORECASE), statement
        if found := re.match(r"INSERT INTO _alembic_tmp_(\w+) .*\sFROM \1\s*$", statement, re.DOTALL):
            copied.add(found[1])
        if found := re.match(r"DROP TABLE (\w+)", statement):
            assert found[1] in copied, statement


#: Damages whose fix rewrites a table or a column holding rows.
ON_ROWS = [
    "column made nullable",
    "column type changed",
    "unique index no longer unique",
    "id column under a case-insensitive collation",
    "session id under another collation",
    "application's NOT NULL column without a default",
]


@pytest.mark.parametrize("name", ON_ROWS)
async def test_rows_survive_the_fix(migrated: URL, backend: str, name: str) -> None:
    """A fix that rebuilds the table (SQLite) or changes a column keeps the rows, an
    application's column and its values included; ids compare byte for byte again."""
    from zett_agent.messages import UserMessage

    from chatledger.zett import LedgerSessionStorage

    damage = next(damage for damage in DAMAGES if damage.name == name)
    if backend not in damage.by_dialect:
        pytest.skip(f"{damage.name}: {backend} has no such setting")
    async with LedgerSessionStorage(migrated) as storage:
        for index in range(3):
            await storage.append("kept", f"r{index}", UserMessage(content=f"m{index}"))
    await on_connection(migrated, damage.by_dialect[backend])
    (drift,) = await schema_drift(migrated)
    assert_drops_nothing(drift.fix)
    await apply(migrated, list(drift.fix))
    assert await schema_drift(migrated) == []
    if facts_of(backend).counter_follows_raw_log:  # the rebuild kept revision 0007's trigger
        trigger = "SELECT count(*) FROM sqlite_master WHERE name = 'raw_messages_counter'"
        assert await on_connection(migrated, lambda c: c.exec_driver_sql(trigger).scalar()) == 1
    async with LedgerSessionStorage(migrated) as storage:
        assert await storage.append("kept", "r3", UserMessage(content="m3"), message_id="m1") == 4
        assert await storage.append("kept", "r4", UserMessage(content="M3"), message_id="M1") == 5
        tail = (await storage.load("kept")).raw_tail
    assert [record.sequence for record in tail] == [1, 2, 3, 4, 5]
    if "billing_account" in damage.found:
        billed = "SELECT billing_account FROM agent_sessions WHERE id = 'kept'"
        assert await on_connection(migrated, lambda c: c.exec_driver_sql(billed).scalar()) == "acct-42"


async def test_an_applications_column_is_a_note_not_drift(
    migrated: URL, backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An application's own column that chatledger's inserts leave alone (nullable, or
    with a default) is not drift: ``check`` exits 0, names it in a note, prints no fix,
    and the column and its values stay (the review's case: a fix that dropped it)."""
    from zett_agent.messages import UserMessage

    from chatledger.zett import LedgerSessionStorage

    async with LedgerSessionStorage(migrated) as storage:
        await storage.append("s1", "r", UserMessage(content="x"))
    await on_connection(
        migrated,
        statements(
            "ALTER TABLE agent_sessions ADD COLUMN billing_account VARCHAR(20)",
            "UPDATE agent_sessions SET billing_account = 'acct-42'",
            "ALTER TABLE raw_messages ADD COLUMN app_flag INTEGER NOT NULL DEFAULT 7",
        ),
    )
    assert await schema_drift(migrated) == []
    dsn = migrated.render_as_string(hide_password=False)
    capsys.readouterr()
    assert await run(["check", "--dsn", dsn]) == 0
    out, _ = capsys.readouterr()
    assert "Not drift" in out
    assert "column billing_account" in out
    assert "column app_flag" in out
    assert "DROP" not in out
    async with LedgerSessionStorage(migrated) as storage:
        assert await storage.append("s1", "r2", UserMessage(content="y")) == 2
    read = "SELECT billing_account FROM agent_sessions WHERE id = 's1'"
    assert await on_connection(migrated, lambda c: c.exec_driver_sql(read).scalar()) == "acct-42"
    flags = await on_connection(
        migrated, lambda c: c.exec_driver_sql("SELECT app_flag FROM raw_messages").all()
    )
    assert flags == [(7,), (7,)]


async def test_an_applications_not_null_column_fails_chatledgers_inserts_until_fixed(
    migrated: URL, backend: str
) -> None:
    """Why a NOT NULL column without a default is drift: chatledger's append fails on it;
    after the fix (nullable, never dropped) it succeeds."""
    from zett_agent.messages import UserMessage

    from chatledger.errors import ChatledgerError
    from chatledger.zett import LedgerSessionStorage

    damage = next(damage for damage in DAMAGES if damage.name.startswith("application's NOT NULL"))
    await on_connection(migrated, damage.by_dialect[backend])
    async with LedgerSessionStorage(migrated) as storage:
        with pytest.raises(ChatledgerError):
            await storage.append("s1", "r", UserMessage(content="x"))
    (drift,) = await schema_drift(migrated)
    await apply(migrated, list(drift.fix))
    async with LedgerSessionStorage(migrated) as storage:
        assert await storage.append("s1", "r", UserMessage(content="x")) == 1


async def test_check_exits_with_its_own_status_and_prints_the_fix(
    migrated: URL, backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    damage = DAMAGES[0]  # the case: an index dropped
    await on_connection(migrated, damage.by_dialect[backend])
    dsn = migrated.render_as_string(hide_password=False)
    capsys.readouterr()
    assert await run(["check", "--dsn", dsn]) == DRIFT_STATUS
    out, err = capsys.readouterr()
    assert "differs from what the head revision creates" in err
    assert "ix_agent_sessions_activity" in err
    found = await schema_drift(migrated)
    assert out == fix_script(found, backend)
    assert "CREATE INDEX ix_agent_sessions_activity" in out
    await apply(migrated, [statement for drift in found for statement in drift.fix])
    assert await run(["check", "--dsn", dsn]) == 0


@pytest.mark.requires("connection_collations")
async def test_sqlite_a_collation_chatledger_does_not_know_is_drift(migrated: URL, backend: str) -> None:
    """SQLite: a column under an application's own collation (registered on its
    connections, unknown to chatledger's) is found, named, and rebuilt without it."""
    from sqlalchemy import create_engine, event
    from sqlalchemy.pool import NullPool

    def folded(left: str, right: str) -> int:
        return (left.lower() > right.lower()) - (left.lower() < right.lower())

    application = create_engine(f"sqlite:///{migrated.database}", poolclass=NullPool)
    event.listen(application, "connect", lambda connection, _: connection.create_collation("app_ci", folded))
    try:
        with application.begin() as connection:
            sqlite_rebuild(
                "raw_messages",
                lambda sql: sql.replace(
                    "session_id VARCHAR(255) NOT NULL", "session_id VARCHAR(255) COLLATE app_ci NOT NULL", 1
                ),
            )(connection)
        (drift,) = await schema_drift(migrated)
        assert "column session_id has the collation app_ci, chatledger's is the database default" in (
            drift.differences
        )
        with application.begin() as connection:
            statements(*drift.fix)(connection)
    finally:
        application.dispose()
    assert await schema_drift(migrated) == []
