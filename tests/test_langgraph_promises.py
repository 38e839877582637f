"""The ledger's promises in LangGraph's terms, on :class:`chatledger.langgraph.LedgerSaver`:
runs racing on one thread keep both checkpoints and their parent links; a deleted
thread's checkpoints never come back and a stale write is refused; bad input and
values past the statement limit are refused before anything is written; the serde is
honoured (an encrypting one leaves no plain value in the database); sync calls follow
``AsyncPostgresSaver``'s rules. (Exactly once across a lost COMMIT:
``tests/test_langgraph_exactly_once.py``.)"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from sqlalchemy import delete, func, select

from chatledger import SessionDeleted, clock, marks
from chatledger.langgraph import LedgerSaver
from chatledger.schema import (
    langgraph_blobs_table,
    langgraph_checkpoints_table,
    langgraph_threads_table,
    langgraph_writes_table,
)

from .conftest import Database
from .support.langgraph_graphs import agent, config, question


@pytest.fixture
async def saver(database: Database) -> AsyncIterator[LedgerSaver]:
    async with LedgerSaver.from_url(database.url) as opened:
        yield opened


def thread() -> str:
    return f"t-{uuid.uuid4()}"


def checkpoint(values: dict[str, Any] | None = None, versions: dict[str, Any] | None = None) -> Checkpoint:
    values = values or {}
    return Checkpoint(
        v=1,
        id=str(uuid6(clock_seq=-1)),
        ts="2026-12-08T00:00:00+00:00",
        channel_values=values,
        channel_versions=versions if versions is not None else dict.fromkeys(values, 1),
        versions_seen={},
        updated_channels=None,
    )


def on(thread_id: str, parent: str | None = None, ns: str = "") -> dict[str, Any]:
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if parent is not None:
        configurable["checkpoint_id"] = parent
    return {"configurable": configurable}


async def put(saver: LedgerSaver, thread_id: str, parent: str | None = None, **values: Any) -> str:
    made = checkpoint(values)
    stored = await saver.aput(
        on(thread_id, parent), made, {"source": "loop", "step": 0}, made["channel_versions"]
    )
    return str(stored["configurable"]["checkpoint_id"])


async def listed(saver: LedgerSaver, thread_id: str) -> list[CheckpointTuple]:
    return [item async for item in saver.alist(on(thread_id) | {"configurable": {"thread_id": thread_id}})]


async def counted(saver: LedgerSaver, thread_id: str) -> dict[str, int]:
    """The rows of the thread in each table."""

    async def work(conn: Any) -> dict[str, int]:
        counts = {}
        for table in (langgraph_checkpoints_table, langgraph_blobs_table, langgraph_writes_table):
            query = select(func.count()).select_from(table).where(table.c.thread_id == thread_id)
            counts[table.name] = int(await conn.scalar(query))
        query = (
            select(func.count())
            .select_from(langgraph_threads_table)
            .where(langgraph_threads_table.c.id == thread_id)
        )
        counts[langgraph_threads_table.name] = int(await conn.scalar(query))
        return counts

    result: dict[str, int] = await saver.ledger.read(work)
    return result


# -- races ---------------------------------------------------------------------------------


async def test_two_runs_racing_on_one_thread_keep_both_checkpoints_and_their_parents(
    database: Database,
) -> None:
    thread_id = thread()
    async with (
        LedgerSaver.from_url(database.url) as first,
        LedgerSaver.from_url(database.url, pool_size=2) as second,
    ):
        root = await put(first, thread_id, n=0)
        for _ in range(5):  # each round: two runs fork from the same parent at once
            left, right = await asyncio.gather(
                put(first, thread_id, root, n=1), put(second, thread_id, root, n=2)
            )
            stored = {item.checkpoint["id"]: item async for item in first.alist(on(thread_id))}
            for forked in (left, right):
                assert stored[forked].parent_config is not None
                assert stored[forked].parent_config["configurable"]["checkpoint_id"] == root
            root = max(left, right)
        assert len([item async for item in first.alist(on(thread_id))]) == 11


async def test_concurrent_writes_of_parallel_tasks_are_all_kept(saver: LedgerSaver) -> None:
    thread_id = thread()
    parent = await put(saver, thread_id)
    tasks = [str(uuid.uuid4()) for _ in range(8)]
    await asyncio.gather(
        *(
            saver.aput_writes(on(thread_id, parent), [("ch", n), ("other", n)], task)
            for n, task in enumerate(tasks)
        )
    )
    found = await saver.aget_tuple(on(thread_id, parent))
    assert found is not None and found.pending_writes is not None
    assert sorted((task, channel, value) for task, channel, value in found.pending_writes) == sorted(
        (task, channel, n) for n, task in enumerate(tasks) for channel in ("ch", "other")
    )


# -- deletes and stale writes ----------------------------------------------------------------


async def test_a_deleted_thread_never_comes_back_and_a_stale_write_is_refused(saver: LedgerSaver) -> None:
    thread_id = thread()
    first = await put(saver, thread_id, payload={"big": [1, 2, 3]})
    second = await put(saver, thread_id, first, payload={"big": [4]})
    await saver.aput_writes(on(thread_id, second), [("ch", "v")], "task-1")
    await saver.adelete_thread(thread_id)
    assert await saver.aget_tuple(on(thread_id)) is None
    assert await counted(saver, thread_id) == {
        "langgraph_checkpoints": 0,
        "langgraph_blobs": 0,
        "langgraph_writes": 0,
        "langgraph_threads": 1,  # the tombstone
    }
    # The run from before the delete goes on: its next checkpoint, its writes, a repeat
    # of an old put; all refused, nothing written.
    with pytest.raises(SessionDeleted, match=thread_id):
        await put(saver, thread_id, second, payload={"big": [5]})
    with pytest.raises(SessionDeleted):
        await saver.aput_writes(on(thread_id, second), [("ch", "late")], "task-2")
    old = checkpoint({"payload": {"big": [1]}})
    old["id"] = first
    with pytest.raises(SessionDeleted):
        await saver.aput(on(thread_id), old, {}, {"payload": 1})
    assert (await counted(saver, thread_id))["langgraph_checkpoints"] == 0
    # A new run starts the thread again; the old checkpoints stay gone.
    fresh = await put(saver, thread_id, payload={"big": [9]})
    assert [item.checkpoint["id"] for item in await listed(saver, thread_id)] == [fresh]
    # And the stale run is still refused in the new generation.
    with pytest.raises(SessionDeleted):
        await saver.aput_writes(on(thread_id, second), [("ch", "later")], "task-3")
    # Deleting again raises the horizon past the new generation too.
    await saver.adelete_thread(thread_id)
    with pytest.raises(SessionDeleted):
        await put(saver, thread_id, fresh)


async def test_a_purged_tombstones_mark_refuses_stale_writes_as_the_tombstone_did(saver: LedgerSaver) -> None:
    """The tombstone replaced by its mark (as a tombstone purge does it, in one
    transaction): the run from before the delete is still refused, and the thread's
    next generation numbers on from the mark's."""
    thread_id = thread()
    first = await put(saver, thread_id, payload={"n": 1})
    await saver.adelete_thread(thread_id)
    threads = langgraph_threads_table

    async def purge_tombstone(conn: Any) -> int:
        row = (
            await conn.execute(
                select(threads.c.generation, threads.c.deleted_through).where(threads.c.id == thread_id)
            )
        ).one()
        await conn.execute(delete(threads).where(threads.c.id == thread_id))
        await marks.raise_to(
            conn, marks.LANGGRAPH, thread_id, row.deleted_through, row.generation, clock.utc_now()
        )
        return int(row.generation)

    generation = await saver.ledger.write(purge_tombstone)
    assert generation == 2
    with pytest.raises(SessionDeleted):
        await put(saver, thread_id, first, payload={"n": 2})
    with pytest.raises(SessionDeleted):
        await saver.aput_writes(on(thread_id, first), [("ch", "late")], "task")
    fresh = await put(saver, thread_id, payload={"n": 3})
    assert [item.checkpoint["id"] for item in await listed(saver, thread_id)] == [fresh]

    async def state(conn: Any) -> Any:
        return (
            await conn.execute(
                select(threads.c.generation, threads.c.deleted_at).where(threads.c.id == thread_id)
            )
        ).one()

    now = await saver.ledger.read(state)
    assert now.generation == 2 and now.deleted_at is None


async def test_a_graph_runs_again_on_a_deleted_thread(saver: LedgerSaver) -> None:
    graph, thread_id = agent(saver), thread()
    await graph.ainvoke(question(1, 2), config(thread_id))
    await saver.adelete_thread(thread_id)
    again = await graph.ainvoke(question(3, 4), config(thread_id))
    assert [message.content for message in again["messages"]][-1] == "the sum is 7"
    assert len(again["messages"]) == 4  # the old conversation did not come back


async def test_prune_keep_latest_frees_the_blobs_no_kept_checkpoint_uses(saver: LedgerSaver) -> None:
    thread_id = thread()
    parent = None
    for n in range(4):
        made = checkpoint({"a": {"n": n}, "b": {"fixed": True}}, {"a": n + 1, "b": 1})
        stored = await saver.aput(on(thread_id, parent), made, {}, {"a": n + 1} if n else {"a": 1, "b": 1})
        parent = stored["configurable"]["checkpoint_id"]
    assert (await counted(saver, thread_id))["langgraph_blobs"] == 5
    await saver.aprune([thread_id])
    assert await counted(saver, thread_id) == {
        "langgraph_checkpoints": 1,
        "langgraph_blobs": 2,  # a at its last version, b at its only one
        "langgraph_writes": 0,
        "langgraph_threads": 1,
    }
    latest = await saver.aget_tuple(on(thread_id))
    assert latest is not None and latest.checkpoint["channel_values"] == {"a": {"n": 3}, "b": {"fixed": True}}
    assert latest.parent_config is None


# -- input checks and limits ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config_", "message"),
    [
        ({}, "configurable"),
        ({"configurable": {}}, "thread_id"),
        ({"configurable": {"thread_id": ""}}, "thread_id"),
        ({"configurable": {"thread_id": 7}}, "thread_id"),
        ({"configurable": {"thread_id": "t", "checkpoint_ns": "n" * 201}}, "checkpoint_ns"),
        ({"configurable": {"thread_id": "t", "checkpoint_ns": "a\x00b"}}, "checkpoint_ns"),
        ({"configurable": {"thread_id": "t", "checkpoint_id": "c" * 65}}, "checkpoint_id"),
    ],
)
async def test_a_bad_config_is_refused_naming_the_field(
    saver: LedgerSaver, config_: dict[str, Any], message: str
) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        await saver.aput(config_, checkpoint(), {}, {})  # type: ignore[arg-type]
    with pytest.raises((ValueError, TypeError), match=message):
        await saver.aget_tuple(config_)  # type: ignore[arg-type]


async def test_bad_checkpoints_metadata_and_writes_are_refused_before_anything_is_written(
    saver: LedgerSaver,
) -> None:
    thread_id = thread()
    made = checkpoint()
    made["id"] = ""
    with pytest.raises(ValueError, match=r'checkpoint\["id"\]'):
        await saver.aput(on(thread_id), made, {}, {})
    with pytest.raises(ValueError, match="metadata"):
        await saver.aput(on(thread_id), checkpoint(), {"when": object()}, {})  # type: ignore[typeddict-unknown-key]
    with pytest.raises(ValueError, match="new_versions"):
        await saver.aput(on(thread_id), checkpoint({"x": {"a": 1}}), {}, {"x" * 201: 1})
    with pytest.raises(TypeError, match="new_versions"):
        await saver.aput(on(thread_id), checkpoint({"x": {"a": 1}}), {}, {"x": None})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="checkpoint_id"):
        await saver.aput_writes(on(thread_id), [("ch", 1)], "task")
    with pytest.raises(TypeError, match=r"writes\[0\]"):
        await saver.aput_writes(on(thread_id, "c1"), ["ch"], "task")  # type: ignore[list-item]
    with pytest.raises(ValueError, match="task_id"):
        await saver.aput_writes(on(thread_id, "c1"), [("ch", 1)], "")
    with pytest.raises(TypeError, match="thread_ids"):
        await saver.aprune(thread_id)
    with pytest.raises(ValueError, match="strategy"):
        await saver.aprune([thread_id], strategy="all")
    assert (await counted(saver, thread_id))["langgraph_threads"] == 0


async def test_large_values_are_stored_and_those_past_the_limit_refused_naming_it(saver: LedgerSaver) -> None:
    thread_id = thread()
    big = bytes(range(256)) * 4096  # 1 MiB, every byte value: past BLOB's 64 KiB
    parent = await put(saver, thread_id, payload={"data": big})
    await saver.aput_writes(on(thread_id, parent), [("ch", big)], "task")
    found = await saver.aget_tuple(on(thread_id))
    assert found is not None and found.checkpoint["channel_values"]["payload"] == {"data": big}
    assert found.pending_writes == [("task", "ch", big)]
    await saver.ledger.ensure_ready()
    saver.ledger.statement_limit = 512 * 1024  # as a server with a small max_allowed_packet
    with pytest.raises(ValueError, match=r"channel_values\['payload'\].*statement limit.*524288"):
        await put(saver, thread_id, parent, payload={"data": big})
    with pytest.raises(ValueError, match=r"writes\[0\].*statement limit"):
        await saver.aput_writes(on(thread_id, parent), [("ch", big)], "task-2")
    assert (await counted(saver, thread_id))["langgraph_checkpoints"] == 1


# -- the serializer ---------------------------------------------------------------------------


class XorCipher:
    """A toy cipher (LangGraph's ``CipherProtocol``): enough to see that nothing is stored in the clear."""

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        return "xor", bytes(byte ^ 0x5A for byte in plaintext)

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        assert ciphername == "xor"
        return bytes(byte ^ 0x5A for byte in ciphertext)


async def test_an_encrypting_serde_is_honoured(database: Database) -> None:
    serde = EncryptedSerializer(XorCipher())
    thread_id = thread()
    async with LedgerSaver.from_url(database.url, serde=serde) as saver:
        parent = await put(saver, thread_id, secret={"text": "attack at dawn"}, inline="plain secret")
        await saver.aput_writes(on(thread_id, parent), [("ch", "hidden write")], "task")
        found = await saver.aget_tuple(on(thread_id))
        assert found is not None
        assert found.checkpoint["channel_values"] == {
            "secret": {"text": "attack at dawn"},
            "inline": "plain secret",
        }
        assert found.pending_writes == [("task", "ch", "hidden write")]

        async def raw(conn: Any) -> list[bytes]:
            stored = [await conn.scalar(select(langgraph_checkpoints_table.c.checkpoint_blob))]
            stored += list(await conn.scalars(select(langgraph_blobs_table.c.value_blob)))
            stored += list(await conn.scalars(select(langgraph_writes_table.c.value_blob)))
            return [bytes(value) for value in stored if value is not None]

        for value in await saver.ledger.read(raw):
            for secret in (b"attack at dawn", b"plain secret", b"hidden write"):
                assert secret not in value
    async with LedgerSaver.from_url(database.url) as plain:
        with pytest.raises(Exception):  # noqa: B017 - without the key the values do not load
            await plain.aget_tuple(on(thread_id))


async def test_next_versions_are_langgraphs_savers_own(saver: LedgerSaver) -> None:
    first = saver.get_next_version(None)
    second = saver.get_next_version(first)
    assert first.split(".")[0] == f"{1:032}" and second.split(".")[0] == f"{2:032}"
    assert first < second and saver.get_next_version(7).startswith(f"{8:032}.")


# -- sync calls -------------------------------------------------------------------------------


async def test_sync_calls_run_from_other_threads_and_are_refused_on_the_loop(saver: LedgerSaver) -> None:
    thread_id = thread()
    parent = await asyncio.to_thread(saver.put, on(thread_id), checkpoint({"x": {"a": 1}}), {}, {"x": 1})
    found = await asyncio.to_thread(saver.get_tuple, on(thread_id))
    assert found is not None and found.config == parent
    assert len(await asyncio.to_thread(lambda: list(saver.list(on(thread_id))))) == 1
    with pytest.raises(asyncio.InvalidStateError, match="aget_tuple"):
        saver.get_tuple(on(thread_id))


def test_a_sync_program_runs_a_graph_on_the_savers_own_loop(database: Database) -> None:
    thread_id = thread()
    outcome: list[Any] = []

    def program() -> None:  # no event loop in this thread
        saver = LedgerSaver(database.url)
        try:
            graph = agent(saver)
            outcome.append(graph.invoke(question(20, 22), config(thread_id)))
            outcome.append(saver.get_tuple(config(thread_id)))
        finally:
            saver.close()

    runner = threading.Thread(target=program)
    runner.start()
    runner.join(120)
    assert outcome[0]["messages"][-1].content == "the sum is 42"
    assert outcome[1] is not None and outcome[1].metadata["step"] == 3
