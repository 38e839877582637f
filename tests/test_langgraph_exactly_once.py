"""LangGraph's ``put`` and ``put_writes`` exactly once across a lost COMMIT, through the real
TCP proxy (tests/support/proxy.py) between the saver and PostgreSQL / MariaDB: the
server commits, its answer never reaches the saver, and the retry settles by the write
id fixed before the first attempt instead of writing again. The thread row's
``version`` moves once per write, so a second attempt would show."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.base.id import uuid6
from sqlalchemy import select
from sqlalchemy.engine import URL

from chatledger import IdentityConflict
from chatledger.langgraph import LedgerSaver
from chatledger.schema import langgraph_threads_table

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


def _checkpoint(n: int) -> Checkpoint:
    return Checkpoint(
        v=1,
        id=str(uuid6(clock_seq=n)),
        ts="2026-12-08T00:00:00+00:00",
        channel_values={"messages": [f"m{n}"]},
        channel_versions={"messages": n},
        versions_seen={},
        updated_channels=None,
    )


def _on(thread_id: str, parent: str | None = None) -> dict[str, Any]:
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if parent is not None:
        configurable["checkpoint_id"] = parent
    return {"configurable": configurable}


async def _version(saver: LedgerSaver, thread_id: str) -> int:
    async def work(conn: Any) -> int:
        table = langgraph_threads_table
        return int(await conn.scalar(select(table.c.version).where(table.c.id == thread_id)))

    result: int = await saver.ledger.read(work)
    return result


@pytest.mark.parametrize("action", ["drop-after-commit", "commit-late"])
async def test_put_and_put_writes_lost_in_their_commit_are_stored_once(
    proxy: Proxy, server_url: URL, action: str
) -> None:
    thread_id = f"once-{action}"
    async with LedgerSaver.from_url(proxy.url(server_url)) as saver:
        first = await saver.aput(_on(thread_id), _checkpoint(1), {"step": 1}, {"messages": 1})
        parent = first["configurable"]["checkpoint_id"]
        proxy.arm(action, delay=1.0)
        second = await asyncio.wait_for(
            saver.aput(_on(thread_id, parent), _checkpoint(2), {"step": 2}, {"messages": 2}), TIMEOUT
        )
        assert not proxy.armed
        proxy.arm(action, delay=1.0)
        await asyncio.wait_for(
            saver.aput_writes(second, [("messages", "w"), ("__interrupt__", {"ask": 1})], "task-1"), TIMEOUT
        )
        assert not proxy.armed
    async with LedgerSaver.from_url(server_url) as direct:
        assert await _version(direct, thread_id) == 3  # created by the first put, +1 each after
        stored = [item async for item in direct.alist(_on(thread_id))]
        assert [item.checkpoint["id"] for item in stored] == [second["configurable"]["checkpoint_id"], parent]
        assert stored[0].parent_config is not None
        assert stored[0].parent_config["configurable"]["checkpoint_id"] == parent
        assert stored[0].checkpoint["channel_values"] == {"messages": ["m2"]}
        assert stored[0].pending_writes == [
            ("task-1", "__interrupt__", {"ask": 1}),
            ("task-1", "messages", "w"),
        ]


async def test_a_lost_commit_over_other_content_under_the_key_is_an_identity_conflict(
    proxy: Proxy, server_url: URL
) -> None:
    """The key LangGraph's savers key a checkpoint and a write by is the write's
    identity: a put (or put_writes) whose COMMIT never arrived, finding that key
    holding other content, raises IdentityConflict and leaves the stored write as it was."""
    thread_id = "once-conflict"
    async with LedgerSaver.from_url(proxy.url(server_url)) as saver:
        stored = _checkpoint(1)
        first = await saver.aput(_on(thread_id), stored, {"step": 1}, {"messages": 1})
        proxy.arm("drop-before", delay=0.0)
        with pytest.raises(IdentityConflict, match="LangGraph checkpoint"):  # other metadata
            await asyncio.wait_for(saver.aput(_on(thread_id), stored, {"step": 7}, {"messages": 1}), TIMEOUT)
        assert not proxy.armed
        await saver.aput_writes(first, [("messages", "w")], "task-1")
        proxy.arm("drop-before", delay=0.0)
        with pytest.raises(IdentityConflict, match="LangGraph write"):
            await asyncio.wait_for(saver.aput_writes(first, [("messages", "not w")], "task-1"), TIMEOUT)
        assert not proxy.armed
        # The same content again, its COMMIT lost: settled as stored, nothing twice.
        proxy.arm("drop-before", delay=0.0)
        await asyncio.wait_for(saver.aput_writes(first, [("messages", "w")], "task-1"), TIMEOUT)
    async with LedgerSaver.from_url(server_url) as direct:
        found = await direct.aget_tuple(first)
        assert found is not None and found.metadata["step"] == 1
        assert found.checkpoint["channel_values"] == {"messages": ["m1"]}
        assert found.pending_writes == [("task-1", "messages", "w")]


async def test_a_retried_special_write_replaces_the_one_under_its_key(proxy: Proxy, server_url: URL) -> None:
    """A special channel's write (an interrupt raised again on resume) replaces the one
    stored under its key, as LangGraph's savers upsert it, also when its call is retried:
    the other content under the key is what it replaces, no identity conflict."""
    thread_id = "once-special-retried"
    async with LedgerSaver.from_url(proxy.url(server_url)) as saver:
        first = await saver.aput(_on(thread_id), _checkpoint(1), {"step": 1}, {"messages": 1})
        await saver.aput_writes(first, [("__interrupt__", {"ask": 1})], "task-1")
        proxy.arm("drop-before", delay=0.0)
        await asyncio.wait_for(saver.aput_writes(first, [("__interrupt__", {"ask": 2})], "task-1"), TIMEOUT)
        assert not proxy.armed
    async with LedgerSaver.from_url(server_url) as direct:
        found = await direct.aget_tuple(first)
        assert found is not None
        assert found.pending_writes == [("task-1", "__interrupt__", {"ask": 2})]
