"""LangGraph threads' lifecycle on rows (:mod:`chatledger.langgraph.threads`), on every
target: list and show with the latest checkpoint and its pending writes, delete, purge
by prefix and idleness (a thread written meanwhile kept), export and import (byte for
byte, idempotent, a tombstone's horizon carried), and the counts."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from langgraph.types import Command

from chatledger import SessionDeleted, clock
from chatledger.langgraph import LedgerSaver
from chatledger.langgraph import threads as lifecycle
from chatledger.selection import Selection

from .conftest import Database
from .support.langgraph_graphs import agent, approval, config, question


@pytest.fixture
async def saver(database: Database) -> AsyncIterator[LedgerSaver]:
    async with LedgerSaver.from_url(database.url) as opened:
        yield opened


async def test_a_thread_is_listed_and_shown_with_its_latest_checkpoint_and_pending_writes(
    saver: LedgerSaver,
) -> None:
    prefix = f"life-{uuid.uuid4()}"
    await agent(saver).ainvoke(question(1, 2), config(f"{prefix}-done"))
    await approval(saver).ainvoke({"request": "x"}, config(f"{prefix}-waiting"))  # stops at its interrupt
    listed = {item.thread_id: item for item in await lifecycle.list_threads(saver.ledger, limit=1000)}
    done, waiting = listed[f"{prefix}-done"], listed[f"{prefix}-waiting"]
    assert (
        done.checkpoints == 5 and done.namespaces == 1 and done.latest_step == 3 and done.pending_writes == 0
    )
    assert waiting.latest_source == "loop" and waiting.pending_writes == 1  # the interrupt's write
    assert await lifecycle.find_thread(saver.ledger, f"{prefix}-done") == done
    shown = await lifecycle.show_thread(saver.ledger, f"{prefix}-waiting", limit=10)
    assert [item.metadata["step"] for item in shown] == [1, 0, -1]
    assert shown[0].writes == ["__interrupt__"] and shown[-1].parent_checkpoint_id is None
    # Paged by activity: after the first page's last, the rest.
    first = await lifecycle.list_threads(saver.ledger, limit=1)
    rest = await lifecycle.list_threads(
        saver.ledger, limit=1000, after=(first[0].updated_at, first[0].thread_id)
    )
    assert first[0].thread_id not in {item.thread_id for item in rest}


async def test_delete_and_purge_leave_tombstones_and_keep_a_thread_written_meanwhile(
    saver: LedgerSaver,
) -> None:
    prefix = f"purge-{uuid.uuid4()}"
    graph = agent(saver)
    for n in range(3):
        await graph.ainvoke(question(n, n), config(f"{prefix}-{n}"))
    before = await lifecycle.counts(saver.ledger)
    assert await lifecycle.delete_thread(saver.ledger, f"{prefix}-0")
    assert not await lifecycle.delete_thread(saver.ledger, f"{prefix}-0")
    assert await lifecycle.count_selected(saver.ledger, Selection.of(prefix=prefix)) == 2

    async def written_meanwhile(thread_id: str, deleted: bool) -> None:
        if thread_id == f"{prefix}-1":
            await graph.ainvoke(question(5, 5), config(f"{prefix}-2"))

    purged = await lifecycle.purge_threads(
        saver.ledger, Selection.of(prefix=prefix), progress=written_meanwhile
    )
    assert purged == 1  # prefix-2 was written after its page was read: kept
    assert await lifecycle.find_thread(saver.ledger, f"{prefix}-2") is not None
    after = await lifecycle.counts(saver.ledger)
    assert after.threads == before.threads - 2 and after.tombstones == before.tombstones + 2
    idle = Selection.of(idle_before=clock.utc_now() + timedelta(seconds=1), prefix=prefix)
    assert await lifecycle.purge_threads(saver.ledger, idle) == 1


async def test_export_and_import_carry_a_thread_byte_for_byte_once(
    database: Database, saver: LedgerSaver
) -> None:
    source, target = f"exp-{uuid.uuid4()}", f"imp-{uuid.uuid4()}"
    await approval(saver).ainvoke({"request": "y"}, config(source))
    exported = await lifecycle.export_thread(saver.ledger, source)
    assert exported is not None and len(exported.checkpoints) == 3 and len(exported.writes) >= 1
    exported.thread["id"] = target
    assert await lifecycle.import_thread(saver.ledger, exported)
    assert not await lifecycle.import_thread(saver.ledger, exported)  # a re-run writes nothing twice
    original = [item async for item in saver.alist(config(source))]
    imported = [item async for item in saver.alist(config(target))]
    assert [item.checkpoint for item in imported] == [item.checkpoint for item in original]
    assert [item.pending_writes for item in imported] == [item.pending_writes for item in original]
    # The imported thread resumes like the original.
    final = await approval(saver).ainvoke(Command(resume="ok"), config(target))
    assert final["decision"] == "ok"
    # A deleted thread's checkpoints are not imported back over its tombstone.
    again = await lifecycle.export_thread(saver.ledger, target)
    assert again is not None
    await saver.adelete_thread(target)
    with pytest.raises(SessionDeleted):
        await lifecycle.import_thread(saver.ledger, again)
    assert await saver.aget_tuple(config(target)) is None
