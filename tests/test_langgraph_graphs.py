"""Real LangGraph graphs on :class:`chatledger.langgraph.LedgerSaver`, on every backend: a
tool-calling agent with a scripted model (no network), an interrupt resumed by another
process, a subgraph's namespace, time travel and forks, every durability mode, and two
processes running graphs on different threads of one database."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.types import Command

from chatledger.langgraph import LedgerSaver

from .conftest import Database
from .support.langgraph_graphs import agent, approval, config, question, with_subgraph
from .support.throwaway import ROOT

pytestmark = pytest.mark.dialect_only

#: Seconds a worker process may take.
WORKER_TIMEOUT = 120


@pytest.fixture
async def saver(database: Database) -> AsyncIterator[LedgerSaver]:
    async with LedgerSaver.from_url(database.url) as opened:
        yield opened


def thread() -> str:
    return f"t-{uuid.uuid4()}"


def _url(database: Database) -> str:
    return database.url.render_as_string(hide_password=False)


async def _worker(*args: str) -> str:
    """Run ``tests.support.langgraph_graphs`` as a process of its own; its stdout."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.langgraph_graphs",
        *args,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), WORKER_TIMEOUT)
    assert process.returncode == 0, err.decode()
    return out.decode()


async def test_an_agent_with_a_tool_node_keeps_its_conversation(saver: LedgerSaver) -> None:
    graph, thread_id = agent(saver), thread()
    first = await graph.ainvoke(question(2, 3), config(thread_id))
    assert first["messages"][-1].content == "the sum is 5"
    assert any(isinstance(message, ToolMessage) for message in first["messages"])
    second = await graph.ainvoke(question(4, 5), config(thread_id))
    assert [
        message.content
        for message in second["messages"]
        if isinstance(message, AIMessage) and message.content
    ] == [
        "the sum is 5",
        "the sum is 9",
    ]
    state = await graph.aget_state(config(thread_id))
    assert state.values["messages"] == second["messages"] and state.next == ()


async def test_an_interrupt_is_resumed_by_another_process(database: Database, saver: LedgerSaver) -> None:
    thread_id = thread()
    await _worker("approve", _url(database), thread_id, "start")
    state = await approval(saver).aget_state(config(thread_id))
    assert state.next == ("ask",)
    assert [item.value for task in state.tasks for item in task.interrupts] == [
        {"question": "approve the budget?"}
    ]
    out = await _worker("approve", _url(database), thread_id, "resume", "yes")
    assert json.loads(out) == {"decision": "yes", "log": ["drafted the budget", "answered yes"]}
    assert (await approval(saver).aget_state(config(thread_id))).next == ()


async def test_a_subgraph_keeps_its_checkpoints_in_its_namespace(saver: LedgerSaver) -> None:
    graph, thread_id = with_subgraph(saver), thread()
    await graph.ainvoke({"request": "a trip"}, config(thread_id))
    state = await graph.aget_state(config(thread_id), subgraphs=True)
    assert state.next == ("approval",)
    (task,) = state.tasks
    assert task.state is not None and task.state.next == ("ask",)  # type: ignore[union-attr]
    # Without a checkpoint_ns, every namespace's: the subgraph (checkpointer=True) keeps
    # its own under its node's name.
    namespaces = {
        item.config["configurable"]["checkpoint_ns"] async for item in saver.alist(config(thread_id))
    }
    assert namespaces == {"", "approval"}
    final = await graph.ainvoke(Command(resume="no"), config(thread_id))
    assert final["decision"] == "no" and final["log"][-1] == "outer finish no"
    assert "drafted a trip" in final["log"] and "answered no" in final["log"]


async def test_time_travel_forks_from_an_old_checkpoint(saver: LedgerSaver) -> None:
    graph, thread_id = agent(saver), thread()
    await graph.ainvoke(question(2, 3), config(thread_id))
    history = [state async for state in graph.aget_state_history(config(thread_id))]
    ids = [state.config["configurable"]["checkpoint_id"] for state in history]
    assert ids == sorted(ids, reverse=True)  # newest first
    for newer, older in itertools.pairwise(history):
        assert newer.parent_config is not None
        assert (
            newer.parent_config["configurable"]["checkpoint_id"]
            == older.config["configurable"]["checkpoint_id"]
        )
    # The checkpoint after the model asked for the tool: fork it with another question.
    asked = next(state for state in history if state.next == ("tools",))
    forked = await graph.aupdate_state(asked.config, {"messages": [AIMessage(content="", tool_calls=[
        {"name": "add", "args": {"a": 10, "b": 20}, "id": "call-fork"}
    ])]})  # fmt: skip
    final = await graph.ainvoke(None, forked)
    assert final["messages"][-1].content == "the sum is 30"
    after = [state async for state in graph.aget_state_history(config(thread_id))]
    assert len(after) > len(history)
    # The old branch is still there, unchanged; the fork's parent is the old checkpoint.
    assert {state.config["configurable"]["checkpoint_id"] for state in history} <= {
        state.config["configurable"]["checkpoint_id"] for state in after
    }
    fork = await saver.aget_tuple(forked)
    assert fork is not None and fork.parent_config is not None
    assert (
        fork.parent_config["configurable"]["checkpoint_id"] == asked.config["configurable"]["checkpoint_id"]
    )
    replayed = await graph.ainvoke(None, asked.config)  # replay the old branch
    assert replayed["messages"][-1].content == "the sum is 5"


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
async def test_every_durability_mode_keeps_the_final_state(saver: LedgerSaver, durability: str) -> None:
    graph, thread_id = agent(saver), thread()
    result = await graph.ainvoke(question(7, 8), config(thread_id), durability=durability)  # type: ignore[arg-type]
    assert result["messages"][-1].content == "the sum is 15"
    state = await graph.aget_state(config(thread_id))
    assert state.values["messages"] == result["messages"] and state.next == ()
    stored = [item async for item in saver.alist(config(thread_id))]
    if durability == "exit":
        assert len(stored) == 1  # only the run's last checkpoint
    else:
        assert len(stored) == 5  # input, model, tools, model... one per step
    # A sync graph on another thread uses the same saver (AsyncPostgresSaver's rule).
    again = await asyncio.to_thread(graph.invoke, question(1, 1), config(thread_id), durability=durability)
    assert again["messages"][-1].content == "the sum is 2"


async def test_two_processes_run_graphs_on_their_threads_of_one_database(
    database: Database, saver: LedgerSaver
) -> None:
    prefixes = [f"p{n}-{uuid.uuid4()}" for n in range(2)]
    await asyncio.gather(*(_worker("agent", _url(database), prefix, "4") for prefix in prefixes))
    graph = agent(saver)
    for prefix in prefixes:
        for n in range(4):
            state = await graph.aget_state(config(f"{prefix}-{n}"))
            assert state.values["messages"][-1].content == f"the sum is {n + 1}"
