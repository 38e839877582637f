"""``chatledger import --openai-sdk``: the OpenAI Agents SDK's own tables (written by its
``SQLAlchemySession``) into chatledger's, on every backend; chatledger's own
``agent_sessions`` is never taken for the SDK's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from agents.extensions.memory import SQLAlchemySession
from sqlalchemy import inspect
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from chatledger import ConfigurationError, SchemaNotReady, kinds, tombstones
from chatledger.engine import Ledger
from chatledger.migrate import upgrade_database
from chatledger.openai_agents import LedgerSession
from chatledger.openai_agents import items as openai_items
from chatledger.tools import cli
from chatledger.tools.importer import Importer
from chatledger.tools.moving_in import move_in, source_records
from chatledger.tools.rows import Record

from .conftest import Database
from .support.schema_helpers import fresh_database

pytestmark = pytest.mark.dialect_only


async def sdk_store(path: Path, sessions: dict[str, int]) -> str:
    """A SQLite file the SDK's SQLAlchemySession wrote: ``count`` items per session id."""
    url = f"sqlite+aiosqlite:///{path}"
    for session_id, count in sessions.items():
        session = SQLAlchemySession.from_url(session_id, url=url, create_tables=True)
        await session.add_items([{"role": "user", "content": f"{session_id} {n}"} for n in range(count)])
        await session.engine.dispose()
    return url


async def test_the_sdks_tables_are_imported_once_with_a_dry_run_first(
    database: Database, tmp_path: Path
) -> None:
    source = await sdk_store(tmp_path / "sdk.sqlite3", {"alpha": 3, "beta": 5})
    dry = await move_in("openai", source, database.url, dry_run=True)
    assert (dry.sessions, dry.entries, dry.identical) == (2, 8, 0)
    ledger = Ledger(database.url)
    try:
        assert await LedgerSession("alpha", ledger=ledger).get_items() == []  # nothing written
        report = await move_in("openai", source, database.url)
        assert (report.sessions, report.entries, report.identical, report.differing) == (2, 8, 0, 0)
        items = await LedgerSession("beta", ledger=ledger).get_items()
        assert items == [{"role": "user", "content": f"beta {n}"} for n in range(5)]
        again = await move_in("openai", source, database.url)  # a re-run writes nothing
        assert (again.sessions, again.identical) == (0, 2)
        await LedgerSession("alpha", ledger=ledger).add_items([{"role": "user", "content": "new"}])
        changed = await move_in("openai", source, database.url)
        assert (changed.sessions, changed.identical, changed.differing, changed.clean) == (0, 1, 1, False)
    finally:
        await ledger.close()


async def test_chatledgers_own_agent_sessions_is_never_read_as_the_sdks(tmp_path: Path) -> None:
    target = URL.create("sqlite+aiosqlite", database=str(tmp_path / "target.sqlite3"))
    # A chatledger database the SDK was pointed at too: its agent_sessions is chatledger's.
    other = URL.create("sqlite+aiosqlite", database=str(tmp_path / "other.sqlite3"))
    ledger = Ledger(other)
    await ledger.ensure_ready()
    await ledger.close()
    with pytest.raises(ValueError, match="is the target"):
        await move_in("openai", other, other)
    mixed = SQLAlchemySession.from_url("x", url=other.render_as_string(), create_tables=True)
    await mixed.get_items()  # creates agent_messages beside chatledger's agent_sessions
    await mixed.engine.dispose()
    with pytest.raises(ConfigurationError, match="is chatledger's own agent_sessions"):
        await move_in("openai", other, target)
    with pytest.raises(ConfigurationError, match="has no table 'nope'"):
        await move_in("openai", other, target, messages_table="nope")


async def test_the_sdks_own_database_is_refused_and_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The one-line swap pointed at the SDK's own database: refused with the way in
    (import from it into another database), never advice to drop its tables."""
    source = await sdk_store(tmp_path / "sdk.sqlite3", {"alpha": 2})
    session = LedgerSession.from_url("alpha", url=source, create_tables=True)
    try:
        with pytest.raises(SchemaNotReady, match="OpenAI Agents SDK's own tables") as refused:
            await session.get_items()
    finally:
        await session.close()
    assert "chatledger import --dsn" in str(refused.value)
    assert "drop" not in str(refused.value)
    assert await cli.run(["check", "--dsn", source]) != 0
    assert "--openai-sdk" in capsys.readouterr().err
    engine = create_async_engine(source)
    try:
        async with engine.connect() as conn:
            assert set(await conn.run_sync(lambda sync: inspect(sync).get_table_names())) == {
                "agent_sessions",
                "agent_messages",
            }
    finally:
        await engine.dispose()


async def test_the_import_command_counts_and_dry_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = await sdk_store(tmp_path / "sdk.sqlite3", {"gamma": 2})
    path = tmp_path / "target.sqlite3"
    target = f"sqlite:///{path}"
    # A dry run writes nothing: it neither creates nor migrates a target.
    assert await cli.run(["import", "--dsn", target, "--openai-sdk", source, "--dry-run"]) == 2
    assert f"no such file: {path}" in capsys.readouterr().err.replace("\n", "")
    assert not path.exists()
    assert await cli.run(["import", "--dsn", target, "--openai-sdk", source]) == 0
    assert "imported 1 OpenAI Agents session (2 items)" in capsys.readouterr().out
    assert await cli.run(["import", "--dsn", target, "--openai-sdk", source, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would import 0 OpenAI Agents sessions (0 items); 1 already there, compared on import" in out
    assert await cli.run(["import", "--dsn", target, "--openai-sdk", source]) == 0
    assert "0 differing, left alone; 0 refused" in capsys.readouterr().out
    missing = tmp_path / "nosdk.db"
    assert await cli.run(["import", "--dsn", target, "--openai-sdk", f"sqlite:///{missing}"]) == 2
    assert f"no such file: {missing}" in capsys.readouterr().err.replace("\n", "")
    assert not missing.exists()
    assert await cli.run(["import", "--dsn", target]) == 2  # neither FILE nor --openai-sdk


async def tables(url: URL) -> list[str]:
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(lambda sync: inspect(sync).get_table_names())
    finally:
        await engine.dispose()


async def test_a_dry_run_never_creates_or_migrates_a_target_and_a_missing_source_is_refused(
    tmp_path: Path,
) -> None:
    source = await sdk_store(tmp_path / "sdk.sqlite3", {"delta": 1})
    missing = tmp_path / "target.sqlite3"
    with pytest.raises(ValueError, match="no such file: "):
        await move_in("openai", source, f"sqlite:///{missing}", dry_run=True)
    assert not missing.exists()
    empty = URL.create("sqlite+aiosqlite", database=str(tmp_path / "empty.sqlite3"))
    (tmp_path / "empty.sqlite3").touch()
    with pytest.raises(SchemaNotReady, match="a dry run writes nothing, so it never migrates the target"):
        await move_in("openai", source, empty, dry_run=True)
    assert await tables(empty) == []
    nosdk = tmp_path / "nosdk.db"
    with pytest.raises(ValueError, match=f"no such file: {nosdk}"):
        await move_in("openai", f"sqlite:///{nosdk}", empty)
    assert not nosdk.exists()
    assert await tables(empty) == []  # refused before the target was opened


async def test_a_live_add_during_the_import_never_interleaves(database: Database, tmp_path: Path) -> None:
    """A writer adding to a session while the import writes it waits for the import's
    transaction and appends after its items; one that added first keeps the session
    (the import finds it differing and leaves it alone)."""
    source = await sdk_store(tmp_path / "sdk.sqlite3", {"live-early": 2, "live-during": 3})
    sdk = [{"role": "user", "content": f"live-during {n}"} for n in range(3)]
    writer, ledger = Ledger(database.url), Ledger(database.url)
    added: list[asyncio.Task[None]] = []

    async def with_a_live_add(records: AsyncIterator[Record]) -> AsyncIterator[Record]:
        async for record in records:
            yield record
            if record.get("type") == "openai_session" and record["row"]["id"] == "live-during":
                # The import's transaction holds the new counter row: the add waits for it.
                live = LedgerSession("live-during", ledger=writer)
                added.append(asyncio.create_task(live.add_items([{"role": "user", "content": "live"}])))
                await asyncio.sleep(0.3)
                assert not added[-1].done()  # it waits for the import's COMMIT

    try:
        await LedgerSession("live-early", ledger=writer).add_items([{"role": "user", "content": "first"}])
        engine = create_async_engine(source, poolclass=NullPool)
        try:
            async with engine.connect() as conn:
                rows = await source_records(kinds.OPENAI, conn, {})
                imported = await Importer(ledger).run(with_a_live_add(rows.records()))
        finally:
            await engine.dispose()
        await asyncio.gather(*added)
        counts = imported.frameworks["OpenAI Agents"]
        assert (counts.imported, counts.entries, counts.identical, counts.differing) == (1, 3, 0, 1)
        assert any("live-early" in line for line in imported.problems)
        assert await LedgerSession("live-during", ledger=ledger).get_items() == [
            *sdk,
            {"role": "user", "content": "live"},
        ]
        assert await LedgerSession("live-early", ledger=ledger).get_items() == [
            {"role": "user", "content": "first"}
        ]
    finally:
        await writer.close()
        await ledger.close()


async def test_a_purged_sessions_mark_refuses_its_import_again(database: Database, tmp_path: Path) -> None:
    source = await sdk_store(tmp_path / "sdk.sqlite3", {"purged": 2})
    async with fresh_database(database, tmp_path, "openai_import") as url:
        await upgrade_database(url)
        assert (await move_in("openai", source, url)).sessions == 1
        ledger = Ledger(url)
        try:
            assert await openai_items.delete_session(ledger, "purged")
            cutoff = tombstones.cutoff(timedelta(0), None)
            assert await tombstones.purge_tombstones(ledger, kinds.OPENAI.tombstone_rows(), cutoff) == 1
            # Its mark keeps sequences 1-2 and generation 2: importing it again would reuse them.
            again = await move_in("openai", source, url)
            assert (again.sessions, again.failed, again.clean) == (0, 1, False)
            assert again.report is not None and "tombstone purged" in again.report.problems[0]
            assert await LedgerSession("purged", ledger=ledger).get_items() == []
        finally:
            await ledger.close()


async def test_moving_in_keeps_each_sessions_last_activity_and_the_list_order(
    database: Database, tmp_path: Path
) -> None:
    """The SDK touches a session's ``updated_at`` on every add, also one whose item is
    popped later: that is the last activity its users saw, and the order of a list of
    sessions. The import keeps both (the last remaining item's time would move
    ``earlier`` behind ``later``)."""
    source = await sdk_store(tmp_path / "sdk.sqlite3", {"earlier": 2, "later": 1})
    popped = SQLAlchemySession.from_url("earlier", url=source)
    await popped.add_items([{"role": "user", "content": "undone"}])
    assert await popped.pop_item() == {"role": "user", "content": "undone"}
    await popped.engine.dispose()
    # The SDK's times, one second apart (CURRENT_TIMESTAMP's resolution), set for the test.
    times = (
        "UPDATE agent_messages SET created_at = '2026-03-01 10:00:00' WHERE session_id = 'earlier'",
        "UPDATE agent_messages SET created_at = '2026-03-01 10:00:03' WHERE session_id = 'later'",
        "UPDATE agent_sessions SET created_at = '2026-03-01 09:59:59', updated_at = '2026-03-01 10:00:05' "
        "WHERE session_id = 'earlier'",
        "UPDATE agent_sessions SET created_at = '2026-03-01 10:00:02', updated_at = '2026-03-01 10:00:03' "
        "WHERE session_id = 'later'",
    )
    engine = create_async_engine(source, poolclass=NullPool)
    async with engine.begin() as conn:
        for statement in times:
            await conn.exec_driver_sql(statement)
    await engine.dispose()
    async with fresh_database(database, tmp_path, "moved") as url:
        await upgrade_database(url)
        report = await move_in("openai", source, url)
        assert (report.sessions, report.entries) == (2, 3)
        ledger = Ledger(url)
        try:
            listed = await ledger.read(
                lambda conn: openai_items.list_recent(
                    conn, 10, tombstone_first=ledger.backend.order_live_by_tombstone
                )
            )
        finally:
            await ledger.close()
    assert [summary.id for summary in listed] == ["earlier", "later"]
    utc = [
        (summary.created_at.replace(tzinfo=None), summary.updated_at.replace(tzinfo=None))
        for summary in listed
    ]
    assert [(str(created), str(updated)) for created, updated in utc] == [
        ("2026-03-01 09:59:59", "2026-03-01 10:00:05"),
        ("2026-03-01 10:00:02", "2026-03-01 10:00:03"),
    ]
