"""``chatledger import --adk``: Google ADK's own ``DatabaseSessionService`` tables into
chatledger's, on every backend; read back with ``LedgerSessionService`` they are what
ADK's own service returns (events, state), without ``temp:`` state."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from google.adk.events import Event, EventActions
from google.adk.sessions import DatabaseSessionService, Session
from google.adk.sessions.schemas import v1
from sqlalchemy import inspect
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from chatledger import ConfigurationError, SchemaNotReady
from chatledger.adk import LedgerSessionService
from chatledger.engine import Ledger
from chatledger.migrate import upgrade_database
from chatledger.tools import cli
from chatledger.tools.moving_in import move_in

from .conftest import Database
from .support.schema_helpers import dsn_of, fresh_database

pytestmark = pytest.mark.dialect_only

SESSIONS = (("shop", "u1", "s-1", 3), ("shop", "u1", "s-2", 2), ("shop", "u2", "s-1", 1))


async def adk_store(path: Path) -> str:
    """A SQLite file ADK's DatabaseSessionService wrote: events with app:, user:,
    temp: and session state deltas, one pair of events at the same instant."""
    return await adk_writes(f"sqlite+aiosqlite:///{path}")


async def adk_writes(url: str) -> str:
    """What :func:`adk_store` holds, written by ADK's DatabaseSessionService at ``url``."""
    service = DatabaseSessionService(url)
    try:
        for app, user, id, count in SESSIONS:
            session = await service.create_session(
                app_name=app, user_id=user, session_id=id, state={"step": 0, "user:seen": id}
            )
            for n in range(count):
                delta = {"step": n + 1, "app:last": f"{user}/{id}/{n}", f"user:{id}": n, "temp:scratch": n}
                event = Event(
                    author="user",
                    invocation_id=f"inv-{n}",
                    id=f"{id}-e{n}",
                    timestamp=1_772_357_415.125 + (n // 2),  # events 0 and 1: one instant
                    actions=EventActions(state_delta=delta),
                )
                await service.append_event(session, event)
        # ADK's service never stores a partial event; one written by hand is skipped.
        partial = Event(author="model", invocation_id="inv-p", id="s-1-partial", partial=True)
        async with service.db_engine.begin() as conn:
            await conn.execute(
                v1.StorageEvent.__table__.insert(),
                {
                    "id": partial.id,
                    "app_name": "shop",
                    "user_id": "u1",
                    "session_id": "s-1",
                    "invocation_id": partial.invocation_id,
                    "timestamp": datetime.fromtimestamp(partial.timestamp, UTC).replace(tzinfo=None),
                    "event_data": partial.model_dump(exclude_none=True, mode="json"),
                },
            )
    finally:
        await service.close()
    return url


async def adk_sessions(url: str) -> list[Session]:
    service = DatabaseSessionService(url)
    try:
        found = []
        for app, user, id, _ in SESSIONS:
            session = await service.get_session(app_name=app, user_id=user, session_id=id)
            assert session is not None
            found.append(session)
        return found
    finally:
        await service.close()


def _shape(session: Session) -> tuple[object, ...]:
    events = [
        event.model_dump(exclude_none=True, mode="json") for event in session.events if not event.partial
    ]
    return session.app_name, session.user_id, session.id, events, session.state


async def test_adks_tables_are_imported_once_with_a_dry_run_first(database: Database, tmp_path: Path) -> None:
    source = await adk_store(tmp_path / "adk.sqlite3")
    expected = await adk_sessions(source)
    assert all(not key.startswith("temp:") for session in expected for key in session.state)
    dry = await move_in("adk", source, database.url, dry_run=True)
    assert (dry.sessions, dry.entries, dry.states, dry.identical, dry.dry_run) == (3, 6, 3, 0, True)
    async with LedgerSessionService(database.url) as service:
        assert await service.get_session(app_name="shop", user_id="u1", session_id="s-1") is None
        report = await move_in("adk", source, database.url)
        # 3 sessions, 6 events; app:/user: state rows: app shop, users u1 and u2.
        assert (report.sessions, report.entries, report.states, report.skipped) == (3, 6, 3, 1)
        assert (report.identical, report.differing, report.clean) == (0, 0, True)
        for want in expected:
            got = await service.get_session(app_name=want.app_name, user_id=want.user_id, session_id=want.id)
            assert got is not None
            assert _shape(got) == _shape(want)
            assert [event.id for event in got.events] == sorted(event.id for event in got.events)
        again = await move_in("adk", source, database.url)  # a re-run writes nothing
        assert (again.sessions, again.entries, again.states, again.clean) == (0, 0, 0, True)
        assert (again.identical, again.states_identical) == (3, 3)
        session = await service.get_session(app_name="shop", user_id="u2", session_id="s-1")
        assert session is not None
        await service.append_event(session, Event(author="user", invocation_id="later"))
    changed = await move_in("adk", source, database.url)
    assert (changed.sessions, changed.differing, changed.clean) == (0, 1, False)
    assert (changed.identical, changed.states_identical) == (2, 3)


async def test_a_chatledger_database_or_one_without_adks_tables_is_refused(tmp_path: Path) -> None:
    target = URL.create("sqlite+aiosqlite", database=str(tmp_path / "target.sqlite3"))
    other = URL.create("sqlite+aiosqlite", database=str(tmp_path / "other.sqlite3"))
    ledger = Ledger(other)
    await ledger.ensure_ready()
    await ledger.close()
    with pytest.raises(ConfigurationError, match="is a chatledger database"):
        await move_in("adk", other, other)
    with pytest.raises(ConfigurationError, match="is a chatledger database"):
        await move_in("adk", other, target)
    empty = URL.create("sqlite+aiosqlite", database=str(tmp_path / "empty.sqlite3"))
    (tmp_path / "empty.sqlite3").touch()
    with pytest.raises(ConfigurationError, match="has no table 'sessions'"):
        await move_in("adk", empty, target)
    # A source file that does not exist is refused, never created (nor the target).
    missing = tmp_path / "nonexist.db"
    with pytest.raises(ValueError, match=f"no such file: {missing}"):
        await move_in("adk", f"sqlite:///{missing}", target)
    assert not missing.exists() and not (tmp_path / "target.sqlite3").exists()


async def test_adks_tables_in_chatledgers_own_database_are_noticed_and_imported_from_there(
    database: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ADK's tools given chatledger's database's plain URL create ADK's own tables
    beside chatledger's: check names them and the import, which reads them from that
    same database."""
    async with fresh_database(database, tmp_path, "adk_beside") as url:
        await upgrade_database(url)
        dsn = dsn_of(url)
        assert await cli.run(["check", "--dsn", dsn]) == 0
        assert "DatabaseSessionService" not in capsys.readouterr().out
        adk_url = url.render_as_string(hide_password=False)
        await adk_writes(adk_url)
        expected = await adk_sessions(adk_url)
        assert await cli.run(["check", "--dsn", dsn]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert (
            "Google ADK's own DatabaseSessionService tables (sessions, events, app_states, user_states)"
            in out
        )
        assert "chatledger import --adk" in out and "chatledger+<the DSN>" in out
        report = await move_in("adk", url, url)
        assert (report.sessions, report.entries, report.states, report.clean) == (3, 6, 3, True)
        async with LedgerSessionService(url) as service:
            for want in expected:
                got = await service.get_session(
                    app_name=want.app_name, user_id=want.user_id, session_id=want.id
                )
                assert got is not None and _shape(got) == _shape(want)


async def test_a_dry_run_never_creates_or_migrates_the_target(tmp_path: Path) -> None:
    source = await adk_store(tmp_path / "adk.sqlite3")
    missing = tmp_path / "target.sqlite3"
    with pytest.raises(ValueError, match=f"no such file: {missing}"):
        await move_in("adk", source, f"sqlite:///{missing}", dry_run=True)
    assert not missing.exists()
    (tmp_path / "empty.sqlite3").touch()
    empty = URL.create("sqlite+aiosqlite", database=str(tmp_path / "empty.sqlite3"))
    with pytest.raises(SchemaNotReady, match="a dry run writes nothing, so it never migrates the target"):
        await move_in("adk", source, empty, dry_run=True)
    engine = create_async_engine(empty, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            assert await conn.run_sync(lambda sync: inspect(sync).get_table_names()) == []
    finally:
        await engine.dispose()


async def test_the_import_command_counts_and_dry_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = await adk_store(tmp_path / "adk.sqlite3")
    path = tmp_path / "target.sqlite3"
    target = f"sqlite:///{path}"
    assert await cli.run(["import", "--dsn", target, "--adk", source, "--dry-run"]) == 2
    assert not path.exists()  # a dry run creates no target
    capsys.readouterr()
    await upgrade_database(URL.create("sqlite+aiosqlite", database=str(path)))
    assert await cli.run(["import", "--dsn", target, "--adk", source, "--dry-run"]) == 0
    assert "would import 3 ADK sessions (6 events, 3 app:/user: state rows)" in capsys.readouterr().out
    assert await cli.run(["import", "--dsn", target, "--adk", source]) == 0
    assert "imported 3 ADK sessions (6 events, 3 app:/user: state rows)" in capsys.readouterr().out
    assert await cli.run(["import", "--dsn", target, "--adk", source]) == 0
    out = capsys.readouterr().out
    assert "3 sessions and 3 state rows already there and identical, skipped" in out
    missing = tmp_path / "nonexist.db"
    assert await cli.run(["import", "--dsn", target, "--adk", f"sqlite:///{missing}"]) == 2
    assert not missing.exists()
    assert await cli.run(["import", "--dsn", target, "--adk", source, "--openai-sdk", source]) == 2
