"""Internal work is never ambiguous: the schema check's probes and the reads run before a
caller's own work leave nothing to settle when their COMMIT's answer is lost, so they
are retried as any transient failure is and never raise ``OutcomeUnknown``. Through the
real TCP proxy (tests/support/proxy.py), on the first call of a ledger: the answer to
the COMMIT of the isolation probe (PostgreSQL's ``SHOW transaction_isolation``, read on
a write's connection) is swallowed and the connection dropped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import pytest
from sqlalchemy.engine import URL

from chatledger.adk import LedgerSessionService
from chatledger.engine import Ledger
from chatledger.openai_agents import LedgerSession
from chatledger.zett import LedgerSessionStorage

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
        yield url


@pytest.fixture
async def proxy(server_url: URL) -> AsyncIterator[Proxy]:
    async with running_proxy(server_url) as running:
        yield running


async def _zett_load(url: URL) -> tuple[Ledger, Coroutine[Any, Any, Any]]:
    storage = LedgerSessionStorage(url)
    return storage.ledger, storage.load("probed")


async def _openai_get_items(url: URL) -> tuple[Ledger, Coroutine[Any, Any, Any]]:
    session = LedgerSession.from_url("probed", url=url)
    return session.ledger, session.get_items()


async def _adk_get_session(url: URL) -> tuple[Ledger, Coroutine[Any, Any, Any]]:
    service = LedgerSessionService(url)
    return service.ledger, service.get_session(app_name="probed", user_id="u", session_id="s")


@pytest.mark.parametrize("first_call", [_zett_load, _openai_get_items, _adk_get_session])
async def test_a_lost_commit_of_the_isolation_probe_is_retried(
    proxy: Proxy,
    server_url: URL,
    first_call: Callable[[URL], Awaitable[tuple[Ledger, Coroutine[Any, Any, Any]]]],
) -> None:
    ledger, call = await first_call(proxy.url(server_url))
    try:
        query = ledger.backend.write_isolation_query
        if query is None:
            call.close()
            pytest.skip(f"{ledger.backend.display_name} runs no isolation probe")
        proxy.arm("drop-after-commit", after=query.encode())
        await asyncio.wait_for(call, TIMEOUT)  # read, after the probe was retried
        assert not proxy.armed and proxy.events("commit answered"), proxy.log
        assert ledger.readiness.ready
    finally:
        await ledger.close()
