"""``read_dsn`` on every server target, without a replica that answers: the reads a
replica would serve go to the primary, and hold every write (the replicas themselves:
``tests/test_replicas.py``)."""

from __future__ import annotations

import pytest
from zett_agent.messages import UserMessage

from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.throwaway import free_port

pytestmark = pytest.mark.requires("read_replicas")


async def test_an_unreachable_replica_leaves_the_reads_to_the_primary(database: Database) -> None:
    nowhere = database.url.set(host="127.0.0.1", port=free_port()).render_as_string(hide_password=False)
    async with LedgerSessionStorage(database.url, read_dsn=nowhere) as storage:
        await storage.append("fallback", "r", UserMessage(content="kept"))
        assert (await storage.load("fallback")).raw_tail[-1].message.content == "kept"
        assert (await storage.get_session("fallback")) is not None
        assert "fallback" in {found.session_id for found in await storage.list_sessions()}
        reads = storage.ledger.replica_reads
        assert (reads.served, reads.fell_back) == (0, 3)
