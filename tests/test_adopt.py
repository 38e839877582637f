"""``chatledger adopt``: databases written by zett-agent's own store, converted in place.

Every database here is written by zett-agent's ``SQLSessionStorage`` itself (through
psycopg on PostgreSQL, as zett's documentation connects), in a database created as
an application would: MySQL with the server's case-insensitive default collation,
PostgreSQL with a session time zone other than UTC (zett stores naive wall times).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.extensions.events import MessageTiming
from zett_agent.messages import UserMessage

from chatledger.adoption import NotAdoptable, adopt_hint, survey
from chatledger.dsn import display, resolve_dsn
from chatledger.migrate import head_revision, run_on_connection, upgrade_database
from chatledger.schema import metadata
from chatledger.tools.adopt import adopt, drift
from chatledger.tools.bench import Seeder
from chatledger.tools.cli import run
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.facts import facts_of
from .support.fresh import fresh_database
from .support.zett_data import read_back, write_zett_sessions, zett_read_back, zett_url

pytestmark = pytest.mark.one_transaction_at_a_time

OURS = sorted(metadata.tables)


@pytest.fixture
async def zett_db(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    """An empty database created as an application would, for zett-agent to fill."""
    async with fresh_database(
        database.server, tmp_path, prefix="chatledger_adopt", as_an_app_would=True
    ) as url:
        yield url


def dsn_of(url: URL) -> str:
    return url.render_as_string(hide_password=False)


async def on(url: URL, work: Any) -> Any:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(work)
    finally:
        await engine.dispose()


def catalog(connection: Connection, tables: list[str] | None = None) -> dict[str, Any]:
    """Every table's columns (type as the dialect writes it, nullability, default),
    indexes, primary key and check constraints; on MySQL also SHOW CREATE TABLE."""
    inspector = inspect(connection)
    found: dict[str, Any] = {}
    for name in tables if tables is not None else sorted(inspector.get_table_names()):
        found[name] = {
            "columns": {
                column["name"]: (
                    str(column["type"].compile(dialect=connection.dialect)),
                    column["nullable"],
                    column.get("default"),
                )
                for column in inspector.get_columns(name)
            },
            "indexes": sorted(
                (str(index["name"]), tuple(index["column_names"]), bool(index["unique"]))
                for index in inspector.get_indexes(name)
            ),
            "primary_key": inspector.get_pk_constraint(name),
            "checks": inspector.get_check_constraints(name),
        }
        show_create = facts_of(connection.dialect.name).show_create_table
        if show_create is not None:
            found[name]["create"] = connection.exec_driver_sql(show_create.format(name=name)).one()[1]
    return found


def ours(connection: Connection) -> dict[str, Any]:
    return catalog(connection, OURS)


async def test_zett_database_is_adopted_in_place_and_reads_back_identically(
    zett_db: URL, database: Database, tmp_path: Path
) -> None:
    ids = await write_zett_sessions(zett_db)
    before = await zett_read_back(zett_db, ids)
    schema_before = await on(zett_db, catalog)
    assert before.views[ids[0]].snapshot is not None and before.counts[ids[0]] == 7

    dry = await adopt(zett_db, dry_run=True)
    assert dry.revision is None and len(dry.steps) >= 5
    assert await on(zett_db, catalog) == schema_before  # a dry run changes nothing

    report = await adopt(zett_db)
    assert (report.sessions, report.messages, report.checkpoints) == (5, 21, 3)
    assert report.revision == head_revision() and not report.resumed

    async with LedgerSessionStorage(zett_db) as storage:
        after = await read_back(storage, ids)
        # Checkpoints, tails, list_sessions and list_raw_messages: field for field.
        assert after.listed == before.listed
        assert after.summaries == before.summaries
        assert after.views == before.views
        assert after.raw == before.raw
        assert after.counts == before.counts

        # chatledger carries the sessions on: the counter and the checkpoint version
        # were filled from zett's rows, and timestamps keep microseconds now.
        at = datetime(2026, 4, 1, 8, 0, 0, 654321, tzinfo=UTC)
        timing = MessageTiming(started_at=at, completed_at=at + timedelta(seconds=3), duration_ns=3 * 10**9)
        assert (
            await storage.append(ids[0], "req-3", UserMessage(content="and next week?"), timing=timing) == 8
        )
        snapshot = await storage.snapshot(ids[0], CompactedMessage(content="all of it"), 8, 2)
        assert snapshot.version == 3
        (record,) = await storage.list_raw_messages(ids[0], after_sequence=7)
        assert (record.started_at, record.duration_ns) == (at, 3 * 10**9)
        assert await storage.append(ids[1], "r", UserMessage(content="thirteen")) == 13

    assert await on(zett_db, drift) == []
    async with fresh_database(database.server, tmp_path, prefix="chatledger_adopt_fresh") as fresh:
        await upgrade_database(fresh)
        # The very schema `chatledger upgrade` creates (on MySQL: SHOW CREATE TABLE too).
        assert await on(zett_db, ours) == await on(fresh, ours)


async def test_adopt_command(zett_db: URL, capsys: pytest.CaptureFixture[str]) -> None:
    await write_zett_sessions(zett_db)
    dsn = dsn_of(zett_db)
    assert await run(["check", "--dsn", dsn]) == 1
    capsys.readouterr()

    assert await run(["adopt", "--dsn", dsn, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "5 sessions, 21 raw messages, 3 checkpoints" in out
    assert "- raw_messages:" in out and "dry run: nothing was changed" in out
    assert await run(["check", "--dsn", dsn]) == 1
    capsys.readouterr()

    assert await run(["adopt", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert f"now at revision {head_revision()}" in out and "chatledger sessions list" in out
    assert await run(["check", "--dsn", dsn]) == 0
    capsys.readouterr()

    # Adopting again, as upgrading twice: nothing to do, said, and exit 0.
    assert await run(["adopt", "--dsn", dsn]) == 0
    captured = capsys.readouterr()
    shown, head = display(resolve_dsn(dsn)), head_revision()
    assert captured.out == f"{shown} is chatledger's already (revision {head}): nothing to adopt\n"
    assert captured.err == ""


async def test_adopt_on_a_chatledger_database_behind_head_names_the_upgrade(
    zett_db: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    await upgrade_database(zett_db, "0001")
    dsn = dsn_of(zett_db)
    assert await run(["adopt", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert (
        f"is chatledger's already (revision 0001): nothing to adopt; upgrade it to {head_revision()} with "
        in out
    )
    if not facts_of(zett_db.get_backend_name()).server:  # a file: its own URL, as given
        assert f"with `chatledger upgrade --dsn {dsn}`" in out
    else:  # a server: the schema owner's DSN, which this one need not be
        assert "with the schema owner's DSN: `chatledger upgrade --dsn OWNER_DSN`" in out
    assert await run(["adopt", "--dsn", dsn, "--dry-run"]) == 0
    assert "nothing to adopt" in capsys.readouterr().out


async def test_unrecognised_schema_is_refused_with_every_reason_and_nothing_changes(zett_db: URL) -> None:
    ids = await write_zett_sessions(zett_db)

    def mutate(connection: Connection) -> None:
        connection.exec_driver_sql("ALTER TABLE raw_messages ADD COLUMN note VARCHAR(10)")
        connection.exec_driver_sql("CREATE INDEX ix_my_titles ON agent_sessions (title)")
        connection.exec_driver_sql("CREATE VIEW recent_sessions AS SELECT id, title FROM agent_sessions")

    await run_on_connection(zett_db, mutate)
    before, schema = await zett_read_back(zett_db, ids), await on(zett_db, catalog)

    with pytest.raises(NotAdoptable) as refused:
        await adopt(zett_db)
    message = str(refused.value)
    assert "raw_messages has columns zett-agent does not create: note" in message
    assert "ix_my_titles" in message and "recent_sessions" in message
    assert await on(zett_db, catalog) == schema
    assert await zett_read_back(zett_db, ids) == before


async def test_data_chatledger_cannot_keep_is_refused_and_nothing_changes(zett_db: URL) -> None:
    ids = await write_zett_sessions(zett_db)

    def mutate(connection: Connection) -> None:
        # A gap in a raw log, and messages whose session row is gone (edited by hand).
        connection.exec_driver_sql(f"DELETE FROM raw_messages WHERE session_id = '{ids[1]}' AND sequence = 5")
        connection.exec_driver_sql(f"DELETE FROM agent_sessions WHERE id = '{ids[4]}'")

    await run_on_connection(zett_db, mutate)
    before, schema = await zett_read_back(zett_db, ids), await on(zett_db, catalog)

    with pytest.raises(NotAdoptable) as refused:
        await adopt(zett_db, dry_run=True)
    message = str(refused.value)
    assert f"{ids[1]!r} (11 messages, last sequence 12)" in message
    assert f"without a session row (ids {ids[4]!r})" in message
    with pytest.raises(NotAdoptable):
        await adopt(zett_db)
    assert await on(zett_db, catalog) == schema
    assert await zett_read_back(zett_db, ids) == before


async def test_nothing_to_adopt(zett_db: URL, database: Database, tmp_path: Path) -> None:
    if database.server is None:
        await asyncio.to_thread(Path(str(zett_db.database)).touch)  # an empty SQLite file
    with pytest.raises(NotAdoptable, match="none of zett-agent's tables"):
        await adopt(zett_db)
    already = await adopt(database.url)
    assert already.already and already.revision == head_revision() and not already.steps
    if database.server is None:
        missing = tmp_path / "missing.sqlite3"
        with pytest.raises(NotAdoptable, match="no such file"):
            await adopt(f"sqlite:///{missing}")
        assert not missing.exists()


async def test_adopt_hint_names_the_command(zett_db: URL, database: Database) -> None:
    assert await run_on_connection(zett_db, adopt_hint) is None  # empty: not zett's
    await write_zett_sessions(zett_db)
    hint = await run_on_connection(zett_db, adopt_hint)
    assert hint is not None and "chatledger adopt --dsn" in hint
    assert await run_on_connection(database.url, adopt_hint) is None


async def _adopt_subprocess_killed_at(url: URL, marker: str) -> None:
    """Run ``chatledger adopt`` in a process of its own and SIGKILL it as soon as it
    announces the step whose description contains ``marker``."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "chatledger.tools.cli",
        "adopt",
        "--dsn",
        dsn_of(url),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    seen: list[str] = []
    try:
        while True:
            line = (await asyncio.wait_for(process.stdout.readline(), timeout=120)).decode()
            assert line, f"adopt ended before {marker!r}: {''.join(seen)}"
            seen.append(line)
            if marker in line:
                process.send_signal(signal.SIGKILL)
                break
    finally:
        await asyncio.wait_for(process.wait(), timeout=60)
    assert process.returncode == -signal.SIGKILL, "".join(seen)


async def test_killed_adoption_changed_nothing_or_continues(zett_db: URL, backend: str) -> None:
    """SIGKILL while the raw log is being converted: SQLite and PostgreSQL roll the one
    transaction back (zett's database as it was); on MySQL the committed steps stay,
    and adopting again continues from there. Either way the result is complete."""
    ids = await write_zett_sessions(zett_db)
    engine = create_async_engine(zett_url(zett_db), poolclass=NullPool)
    try:  # enough rows that converting the raw log takes a while
        await Seeder("zett", engine, datetime(2026, 1, 1, tzinfo=UTC)).session("bulk", 30_000, 29_950, 0)
    finally:
        await engine.dispose()
    ids.append("bulk")
    before, schema = await zett_read_back(zett_db, ids), await on(zett_db, catalog)

    await _adopt_subprocess_killed_at(zett_db, "- raw_messages:")

    if not facts_of(backend).transactional_ddl:
        columns = await on(
            zett_db, lambda conn: [c["name"] for c in inspect(conn).get_columns("agent_sessions")]
        )
        assert "last_sequence" in columns  # the session table's steps had committed
        assert (await on(zett_db, survey)).partly_adopted
    else:
        assert await on(zett_db, catalog) == schema
        assert await zett_read_back(zett_db, ids) == before

    report = await adopt(zett_db)
    assert report.revision == head_revision() and report.resumed == (not facts_of(backend).transactional_ddl)
    assert report.messages == 21 + 30_000
    async with LedgerSessionStorage(zett_db) as storage:
        after = await read_back(storage, ids)
    assert (after.listed, after.views, after.raw, after.counts) == (
        before.listed,
        before.views,
        before.raw,
        before.counts,
    )
    assert await on(zett_db, drift) == []


async def test_old_zett_without_session_type_is_adopted(zett_db: URL, backend: str) -> None:
    """zett-agent releases before ``session_type`` created the session table without it
    (zett adds it on its next start); adoption adds it as revision 0001 has it."""
    ids = await write_zett_sessions(zett_db)
    drop = "ALTER TABLE agent_sessions DROP COLUMN session_type"

    def older(connection: Connection) -> None:
        connection.exec_driver_sql(drop)

    await run_on_connection(zett_db, older)
    report = await adopt(zett_db)
    assert report.revision == head_revision()
    async with LedgerSessionStorage(zett_db) as storage:
        assert {summary.session_type for summary in await storage.list_sessions()} == {0}
        assert await storage.count_messages(ids[1]) == 12
    assert await on(zett_db, drift) == []


@pytest.mark.requires("case_folding_collations")
async def test_mysql_case_folded_ids_are_refused(zett_db: URL, backend: str) -> None:
    """zett's MySQL ids compare case-insensitively; chatledger's byte for byte. A raw
    message whose session id matches its session row only when folded would lose its
    session: refused, naming it."""
    ids = await write_zett_sessions(zett_db)

    def fold(connection: Connection) -> None:
        connection.execute(
            text("UPDATE raw_messages SET session_id = UPPER(session_id) WHERE session_id = :id"),
            {"id": ids[1]},
        )

    await run_on_connection(zett_db, fold)
    with pytest.raises(NotAdoptable, match=ids[1].upper()):
        await adopt(zett_db)
