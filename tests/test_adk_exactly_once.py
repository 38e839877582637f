"""ADK's ``append_event`` exactly once across a lost COMMIT, through the real TCP proxy
(tests/support/proxy.py) between the service and PostgreSQL / MariaDB: the retry
finds the event by ``Event.id`` and returns it; the log holds it once, and the
``Session`` object appends on without a stale refusal."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy.engine import URL

from chatledger.adk import LedgerSessionService
from chatledger.testing.adk import event

from .support.backends import Servers
from .support.proxy import Proxy, running_proxy
from .support.throwaway import migrated_database, shared_server

#: Seconds any single wait may take before the test fails.
TIMEOUT = 60.0


@pytest.fixture(scope="module", params=["postgresql", "mysql"])
async def server_url(request: pytest.FixtureRequest, servers: Servers) -> AsyncIterator[URL]:
    """A migrated database on this machine's server of the backend."""
    server = shared_server(servers, request.param)
    async with migrated_database(server) as url:
        await server.default_to_serializable(url.database)
        yield url


@pytest.fixture
async def proxy(server_url: URL) -> AsyncIterator[Proxy]:
    async with running_proxy(server_url) as running:
        yield running


@pytest.mark.parametrize("action", ["drop-after-commit", "commit-late"])
async def test_append_event_lost_in_its_commit_is_stored_once(
    proxy: Proxy, server_url: URL, action: str
) -> None:
    async with LedgerSessionService(proxy.url(server_url)) as service:
        await service.ledger.ensure_ready()  # its reads commit too: arm the proxy after them
        session = await service.create_session(app_name="once", user_id="u")
        await service.append_event(session, event("m1"))
        proxy.arm(action, delay=1.0)
        await asyncio.wait_for(service.append_event(session, event("m2", {"user:n": 2})), TIMEOUT)
        assert not proxy.armed
        await service.append_event(session, event("m3"))  # the object's counter is current
    async with LedgerSessionService(server_url) as direct:
        stored = await direct.get_session(app_name="once", user_id="u", session_id=session.id)
        assert stored is not None
        assert [part.text for item in stored.events if item.content for part in item.content.parts or []] == [
            "m1", "m2", "m3",
        ]  # fmt: skip
        assert stored._storage_update_marker == "3" and stored.state["user:n"] == 2


@pytest.mark.parametrize("since", ["deleted", "created again"])
async def test_append_committed_then_deleted_before_its_settle_counts_as_appended(
    proxy: Proxy, server_url: URL, since: str
) -> None:
    """The append commits and its answer is lost; the database stays unreachable for the
    writer while another writer deletes the session (and creates it again). The writer's
    settle then finds the event erased by that delete: appended, then deleted -- never
    ``SessionNotFoundError`` or ``StaleSessionError`` for a committed append."""
    async with LedgerSessionService(proxy.url(server_url), retry_timeout=30) as service:
        await service.ledger.ensure_ready()  # its reads commit too: arm the proxy after them
        session = await service.create_session(app_name="overtaken", user_id="u")
        await service.append_event(session, event("m1"))
        proxy.arm("drop-after-commit", refuse_after=True)
        appending = asyncio.create_task(service.append_event(session, event("m2", {"k": 2})))
        await asyncio.wait_for(proxy.noted("commit answered"), TIMEOUT)
        async with LedgerSessionService(server_url) as other:
            seen = await other.get_session(app_name="overtaken", user_id="u", session_id=session.id)
            assert seen is not None and len(seen.events) == 2  # other readers saw it
            await other.delete_session("overtaken", "u", session.id)
            if since == "created again":
                await other.create_session(app_name="overtaken", user_id="u", session_id=session.id)
        await proxy.accept()
        await asyncio.wait_for(appending, TIMEOUT)
        assert not appending.cancelled() and [e.id for e in session.events][-1] == seen.events[-1].id
        assert session.state == {"k": 2} and session._storage_update_marker == "2"
