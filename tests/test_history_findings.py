"""What the history checker (``tests/test_history.py``) found, each as its minimal history.

Each was marked ``xfail(strict=True)`` until its fix landed; the rein settle findings
are fixed by the rein write log (revision 0004).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from rein import Session
from sqlalchemy.engine import URL

from chatledger import VersionConflict
from chatledger.rein import LedgerSessionStore

from .support.backends import Servers
from .support.proxy import running_proxy
from .support.throwaway import migrated_database, shared_server

#: Seconds any single wait may take before the test fails.
TIMEOUT = 60.0


@pytest.fixture(scope="module", params=["postgresql", "mysql"])
async def server_url(request: pytest.FixtureRequest, servers: Servers) -> AsyncIterator[URL]:
    """A migrated database on this machine's server of the backend."""
    async with migrated_database(shared_server(servers, request.param)) as url:
        yield url


async def _save_lost_then_overtaken(server_url: URL, conv_id: str, expected_version: int | None) -> object:
    """Store A saves; the server commits it, the answer is lost and the database stays
    unreachable for A; meanwhile store B saves the same id; then A reaches the database
    again and settles. Returns what A's save returned or raised."""
    async with running_proxy(server_url) as proxy:
        a = LedgerSessionStore(proxy.url(server_url))
        b = LedgerSessionStore(server_url)
        try:
            await a.asave(conv_id, Session(iteration=1))  # version 1
            proxy.arm("drop-after-commit", refuse_after=True)
            saving = asyncio.create_task(
                a.asave(conv_id, Session(iteration=2), expected_version=expected_version)
            )
            for _ in range(int(TIMEOUT / 0.01)):  # until A's save is committed, its answer lost
                if proxy.events("refusing"):
                    break
                await asyncio.sleep(0.01)
            await asyncio.wait_for(b.asave(conv_id, Session(iteration=3)), TIMEOUT)  # version 3
            await proxy.accept()
            try:
                return await asyncio.wait_for(saving, TIMEOUT)
            except VersionConflict as error:
                return error
        finally:
            await a.aclose()
            await b.aclose()


async def test_a_lost_rein_save_overtaken_by_another_is_applied_once(server_url: URL) -> None:
    conv_id = "lost-then-overtaken"
    assert await _save_lost_then_overtaken(server_url, conv_id, None) is None
    async with LedgerSessionStore(server_url) as reader:
        found = await reader.aload_versioned(conv_id)
    # Two saves after version 1: version 3, and the later one's session (B's) kept.
    assert found is not None
    assert (found.version, found.session.iteration) == (3, 3), found


async def test_a_lost_rein_compare_and_set_overtaken_by_another_is_not_refused(server_url: URL) -> None:
    outcome = await _save_lost_then_overtaken(server_url, "cas-lost-then-overtaken", 1)
    assert outcome is None, f"the save was applied (version 2), yet it raised {outcome!r}"
