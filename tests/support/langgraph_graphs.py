"""LangGraph graphs for the saver's tests: a scripted model (no network, no provider), a
tool node, an approval that interrupts, a subgraph.

Run as a module it is a worker process:

* ``python -m tests.support.langgraph_graphs approve <url> <thread_id> start`` runs the
  approval graph until its interrupt and exits; ``... resume <answer>`` resumes it with
  ``Command(resume=answer)`` and prints the final state's ``decision`` as JSON;
* ``python -m tests.support.langgraph_graphs agent <url> <prefix> <count>`` runs the
  tool-calling agent on ``count`` threads ``<prefix>-<n>`` one after another.
"""

from __future__ import annotations

import asyncio
import json
import operator
import sys
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from chatledger.langgraph import LedgerSaver


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class AgentState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def scripted_model(state: AgentState) -> dict[str, Any]:
    """The model, scripted: a human question asks the ``add`` tool for the two numbers it
    names; a tool's answer is repeated as the reply."""
    last = state["messages"][-1]
    if isinstance(last, ToolMessage):
        return {"messages": [AIMessage(content=f"the sum is {last.content}")]}
    numbers = [int(word) for word in str(last.content).split() if word.isdigit()]
    call = {"name": "add", "args": {"a": numbers[0], "b": numbers[1]}, "id": f"call-{len(state['messages'])}"}
    return {"messages": [AIMessage(content="", tool_calls=[call])]}


def _route(state: AgentState) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


def agent(checkpointer: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    """model -> tools -> model -> END, on ``checkpointer``."""
    graph = StateGraph(AgentState)
    graph.add_node("model", scripted_model)
    graph.add_node("tools", ToolNode([add]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", _route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=checkpointer)


def question(a: int, b: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=f"what is {a} plus {b}")]}


class Approval(TypedDict, total=False):
    request: str
    decision: str
    log: Annotated[list[str], operator.add]


def _draft(state: Approval) -> dict[str, Any]:
    return {"log": [f"drafted {state['request']}"]}


def _ask(state: Approval) -> dict[str, Any]:
    answer = interrupt({"question": f"approve {state['request']}?"})
    return {"decision": str(answer), "log": [f"answered {answer}"]}


def approval(checkpointer: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    """draft -> ask (interrupts for a human's answer) -> END."""
    graph = StateGraph(Approval)
    graph.add_node("draft", _draft)
    graph.add_node("ask", _ask)
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "ask")
    graph.add_edge("ask", END)
    return graph.compile(checkpointer=checkpointer)


class Outer(TypedDict, total=False):
    request: str
    decision: str
    log: Annotated[list[str], operator.add]


def with_subgraph(checkpointer: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    """start -> the approval graph as a node (its checkpoints in a namespace of their
    own) -> finish."""
    graph = StateGraph(Outer)
    graph.add_node("start", lambda state: {"log": ["outer start"]})
    graph.add_node("approval", approval(checkpointer=True))  # type: ignore[arg-type]
    graph.add_node("finish", lambda state: {"log": [f"outer finish {state.get('decision')}"]})
    graph.add_edge(START, "start")
    graph.add_edge("start", "approval")
    graph.add_edge("approval", "finish")
    graph.add_edge("finish", END)
    return graph.compile(checkpointer=checkpointer)


def config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


async def _approve(url: str, thread_id: str, step: str, answer: str | None) -> None:
    async with LedgerSaver.from_url(url) as saver:
        graph = approval(saver)
        if step == "start":
            await graph.ainvoke({"request": "the budget"}, config(thread_id))
            return
        final = await graph.ainvoke(Command(resume=answer), config(thread_id))
        print(json.dumps({"decision": final["decision"], "log": final["log"]}))


async def _agent(url: str, prefix: str, count: int) -> None:
    async with LedgerSaver.from_url(url) as saver:
        graph = agent(saver)
        for n in range(count):
            await graph.ainvoke(question(n, 1), config(f"{prefix}-{n}"))


def main(argv: list[str]) -> None:
    kind, url, *rest = argv
    if kind == "approve":
        thread_id, step, *answer = rest
        asyncio.run(_approve(url, thread_id, step, answer[0] if answer else None))
    elif kind == "agent":
        prefix, count = rest
        asyncio.run(_agent(url, prefix, int(count)))
    else:
        raise SystemExit(f"unknown worker {kind!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
