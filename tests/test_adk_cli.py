"""ADK's own command-line tools on chatledger: ``adk api_server`` (a real subprocess)
with an agents directory whose ``services.py`` calls :func:`chatledger.adk.register`
and ``--session_service_uri chatledger+<DSN>`` serves a session moved in from ADK's own
store over HTTP (list, get, run with a scripted model), and the run's events are
stored in chatledger's tables; ``create_session_service`` of ADK's registry gives a
:class:`~chatledger.adk.LedgerSessionService` for every ``chatledger+`` scheme."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from google.adk.cli.service_registry import ServiceRegistry, get_service_registry
from sqlalchemy import select
from sqlalchemy.engine import Connection

import chatledger.adk
from chatledger.adk import LedgerSessionService
from chatledger.adk.registration import schemes
from chatledger.migrate import upgrade_database
from chatledger.schema import adk_events_table
from chatledger.tools.moving_in import move_in

from .conftest import Database
from .support.adk_server import adk_server, agents_dir, session_uri
from .support.schema_helpers import fresh_database, on_connection
from .test_adk_import import adk_store

pytestmark = [pytest.mark.one_transaction_at_a_time, pytest.mark.dialect_only]

REPLY = "answered from the ledger"


def test_register_gives_adks_registry_a_ledger_service_for_every_chatledger_scheme(tmp_path: Path) -> None:
    registry = ServiceRegistry()
    added = chatledger.adk.register(registry)
    assert set(added) == set(schemes())
    assert {"chatledger+sqlite", "chatledger+postgresql", "chatledger+mysql", "chatledger+mariadb"} <= set(
        added
    )
    assert "chatledger+postgresql+psycopg" in added
    assert chatledger.adk.register(registry) == added  # again: the same
    path = tmp_path / "adk.sqlite3"
    service = registry.create_session_service(f"chatledger+sqlite:///{path}", agents_dir=str(tmp_path))
    assert isinstance(service, LedgerSessionService)
    assert service.ledger.url.database == str(path)
    for uri, driver in (
        ("chatledger+postgresql://agent@db/chat", "postgresql+asyncpg"),
        ("chatledger+postgresql+psycopg://agent@db/chat", "postgresql+psycopg"),
        ("chatledger+mysql://agent@db/chat", "mysql+aiomysql"),
        ("chatledger+mariadb://agent@db/chat", "mysql+aiomysql"),
    ):
        made = registry.create_session_service(uri, agents_dir=str(tmp_path))
        assert isinstance(made, LedgerSessionService) and made.ledger.url.drivername == driver
    # ADK's own schemes stay ADK's.
    assert not isinstance(registry.create_session_service("sqlite:///x.db"), LedgerSessionService)
    # ADK's global registry, as its CLI uses it.
    chatledger.adk.register()
    assert isinstance(
        get_service_registry().create_session_service(f"chatledger+sqlite:///{path}"), LedgerSessionService
    )


def test_the_uri_argument_is_adks_generic_factorys(tmp_path: Path) -> None:
    """services.yaml's generic factory calls ``cls(uri=uri, **kwargs)``."""
    service = LedgerSessionService(uri=f"chatledger+sqlite:///{tmp_path / 'a.db'}", agents_dir=str(tmp_path))
    assert service.ledger.url.drivername == "sqlite+aiosqlite"
    assert LedgerSessionService(uri=f"sqlite:///{tmp_path / 'b.db'}").ledger.url.database.endswith("b.db")
    with pytest.raises(ValueError, match="db_url= or uri="):
        LedgerSessionService(
            f"sqlite:///{tmp_path / 'a.db'}", uri=f"chatledger+sqlite:///{tmp_path / 'a.db'}"
        )
    with pytest.raises(ValueError, match="a database scheme must follow"):
        LedgerSessionService(uri="chatledger+")
    with pytest.raises(TypeError, match="uri must be a string"):
        LedgerSessionService(uri=5)  # type: ignore[arg-type]


async def test_adk_api_server_serves_a_moved_in_session(database: Database, tmp_path: Path) -> None:
    source = await adk_store(tmp_path / "adk.sqlite3")
    async with fresh_database(database, tmp_path, "adk_cli") as url:
        await upgrade_database(url)
        moved = await move_in("adk", source, url)
        assert moved.sessions == 3
        agents = agents_dir(tmp_path, "shop", REPLY)
        uri = session_uri(url.render_as_string(hide_password=False))
        with adk_server("api_server", agents, uri) as server:
            listed = await asyncio.to_thread(server.request, "GET", "/apps/shop/users/u1/sessions")
            assert sorted(session["id"] for session in listed) == ["s-1", "s-2"]
            got = await asyncio.to_thread(server.request, "GET", "/apps/shop/users/u1/sessions/s-1")
            assert [event["id"] for event in got["events"]] == ["s-1-e0", "s-1-e1", "s-1-e2"]
            assert got["state"]["step"] == 3
            body = {
                "app_name": "shop",
                "user_id": "u1",
                "session_id": "s-1",
                "new_message": {"role": "user", "parts": [{"text": "what did I buy?"}]},
            }
            ran = await asyncio.to_thread(server.request, "POST", "/run", body)
            assert [part["text"] for event in ran for part in event["content"]["parts"]] == [REPLY]
            after = await asyncio.to_thread(server.request, "GET", "/apps/shop/users/u1/sessions/s-1")
            assert len(after["events"]) == 5
        stored = await on_connection(url, stored_events)
        assert [event_id for event_id, _ in stored[:3]] == ["s-1-e0", "s-1-e1", "s-1-e2"]
        assert len(stored) == 5 and REPLY in stored[4][1] and "what did I buy?" in stored[3][1]
        async with LedgerSessionService(url) as service:
            session = await service.get_session(app_name="shop", user_id="u1", session_id="s-1")
            assert session is not None and [event.id for event in session.events] == [e for e, _ in stored]


def stored_events(conn: Connection) -> list[tuple[str, str]]:
    """Session shop/u1/s-1's events in chatledger's ``adk_events``, in sequence order."""
    events = adk_events_table
    query = (
        select(events.c.event_id, events.c.event_json)
        .where(events.c.app_name == "shop", events.c.user_id == "u1", events.c.session_id == "s-1")
        .order_by(events.c.sequence)
    )
    return [(row.event_id, row.event_json) for row in conn.execute(query)]
