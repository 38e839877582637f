"""The conformance suite of the OpenAI Agents SDK's ``Session`` contract, for any implementation.

The contract is ``agents.memory.Session`` (``session_id``, ``session_settings``,
``get_items(limit)``, ``add_items(items)``, ``pop_item()``, ``clear_session()``): items
come back equal to what was added, in order, under exactly the id they were added
under; the newest ``limit`` in order; a pop removes exactly the newest, once; a clear
empties the session and the next add starts it again; and the SDK's own ``Runner`` and
``OpenAIResponsesCompactionSession`` work on it. The tests use nothing else, so another
implementation runs them by subclassing :class:`OpenAISessionContract` with a fixture:

* ``open_session``: a callable ``(session_id) -> Session``, a new session object each
  call (as another process would open it), on a database it may share with other tests;
* ``session_id`` (given by the class): an id no other test uses.

chatledger runs them on :class:`chatledger.openai_agents.LedgerSession` on every
backend (``tests/test_openai_agents.py``).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool
from agents.items import ModelResponse, TResponseInputItem
from agents.memory import OpenAIResponsesCompactionSession, Session, SessionSettings
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

if TYPE_CHECKING:
    from .kinds import Driver

__all__ = ["TESTS", "OpenAISessionContract", "ScriptedModel", "adder_agent"]

OpenSession = Callable[[str], Session]

# -- helpers --------------------------------------------------------------------------


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class ScriptedModel(Model):
    """A model that needs no network: asked "add A and B" it calls ``add(A, B)``; given
    the tool's output it answers "the sum is N". It decides from the input alone, so a
    new instance (a restarted service) continues any conversation. ``inputs`` keeps the
    number of input items of every call."""

    def __init__(self) -> None:
        self.inputs: list[int] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        items: list[Any] = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.inputs.append(len(items))
        last = items[-1]
        if last.get("type") == "function_call_output":
            text = ResponseOutputText(type="output_text", text=f"the sum is {last['output']}", annotations=[])
            output: Any = ResponseOutputMessage(
                id=f"msg-{len(items)}", type="message", role="assistant", status="completed", content=[text]
            )
        else:
            a, b = (int(found) for found in re.findall(r"-?\d+", str(last.get("content")))[:2])
            output = ResponseFunctionToolCall(
                type="function_call",
                call_id=f"call-{len(items)}",
                name="add",
                arguments=f'{{"a":{a},"b":{b}}}',
            )
        return ModelResponse(output=[output], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("ScriptedModel does not stream")


def adder_agent() -> tuple[Agent[Any], ScriptedModel]:
    """An agent on a :class:`ScriptedModel` with the ``add`` tool, and its model."""
    model = ScriptedModel()
    return Agent(name="adder", instructions="You add numbers.", model=model, tools=[add]), model


#: No traces are sent anywhere: the tests run offline.
OFFLINE = RunConfig(tracing_disabled=True)


def message(text: str, role: str = "user") -> TResponseInputItem:
    return {"role": role, "content": text}  # type: ignore[return-value,misc]


def texts(items: list[Any]) -> list[str]:
    return [str(item.get("content")) for item in items]


# -- the contract ------------------------------------------------------------------------


async def test_satisfies_session_protocol(open_session: OpenSession, session_id: str) -> None:
    session = open_session(session_id)
    assert isinstance(session, Session)
    assert session.session_id == session_id
    assert await session.get_items() == []
    assert await session.pop_item() is None
    await session.add_items([message("one"), message("two", "assistant")])
    await session.add_items([])  # nothing to add: no error
    await session.add_items([message("three")])
    assert await session.get_items() == [message("one"), message("two", "assistant"), message("three")]
    await session.clear_session()
    assert await session.get_items() == []
    await session.clear_session()  # clearing an empty session is no error


async def test_get_items_returns_the_newest_in_order(open_session: OpenSession, session_id: str) -> None:
    session = open_session(session_id)
    for n in range(10):
        await session.add_items([message(f"m{n}")])
    assert texts(await session.get_items(3)) == ["m7", "m8", "m9"]
    assert texts(await session.get_items(1)) == ["m9"]
    assert texts(await session.get_items(100)) == [f"m{n}" for n in range(10)]
    assert await session.get_items(0) == []
    session.session_settings = SessionSettings(limit=2)
    assert texts(await session.get_items()) == ["m8", "m9"]  # the settings' limit
    assert texts(await session.get_items(4)) == ["m6", "m7", "m8", "m9"]  # an explicit one wins


async def test_pop_removes_exactly_the_newest_once(open_session: OpenSession, session_id: str) -> None:
    session = open_session(session_id)
    await session.add_items([message("a"), message("b"), message("c")])
    assert await session.pop_item() == message("c")
    assert texts(await open_session(session_id).get_items()) == ["a", "b"]  # it never comes back
    await session.add_items([message("d")])
    assert texts(await session.get_items()) == ["a", "b", "d"]
    assert [await session.pop_item() for _ in range(4)] == [message("d"), message("b"), message("a"), None]


async def test_concurrent_pops_never_return_the_same_item(open_session: OpenSession, session_id: str) -> None:
    await open_session(session_id).add_items([message(f"m{n}") for n in range(12)])
    popped = await asyncio.gather(*(open_session(session_id).pop_item() for _ in range(16)))
    found = [item for item in popped if item is not None]
    assert sorted(texts(found)) == sorted(f"m{n}" for n in range(12))
    assert popped.count(None) == 4
    assert await open_session(session_id).get_items() == []


async def test_concurrent_adds_each_stay_together(open_session: OpenSession, session_id: str) -> None:
    """Each add's items are one run, in order; none is lost or doubled."""

    async def adder(worker: int) -> None:
        await open_session(session_id).add_items([message(f"w{worker}-{k}") for k in range(3)])

    await asyncio.gather(*(adder(worker) for worker in range(10)))
    stored = texts(await open_session(session_id).get_items())
    assert sorted(stored) == sorted(f"w{worker}-{k}" for worker in range(10) for k in range(3))
    for start in range(0, len(stored), 3):
        worker = stored[start].split("-")[0]
        assert stored[start : start + 3] == [f"{worker}-{k}" for k in range(3)], stored


async def test_rewind_pop_and_add_back_leaves_the_session_as_it_was(
    open_session: OpenSession, session_id: str
) -> None:
    """The SDK's retry rewind pops the retried items and adds them back."""
    session = open_session(session_id)
    call: Any = {"type": "function_call", "call_id": "c1", "name": "add", "arguments": "{}"}
    items = [message("q"), call]
    await session.add_items([message("before"), *items])
    before = await session.get_items()
    popped = [await session.pop_item(), await session.pop_item()]
    await session.add_items(list(reversed(popped)))  # type: ignore[arg-type]
    assert await session.get_items() == before
    assert [list(item) for item in await session.get_items()] == [list(item) for item in before]  # key order


async def test_clear_then_add_starts_again(open_session: OpenSession, session_id: str) -> None:
    session = open_session(session_id)
    await session.add_items([message("old 1"), message("old 2")])
    await session.clear_session()
    await session.add_items([message("new")])
    assert texts(await open_session(session_id).get_items()) == ["new"]
    assert await session.pop_item() == message("new")
    assert await session.pop_item() is None


async def test_large_unicode_items_round_trip_in_key_order(
    open_session: OpenSession, session_id: str
) -> None:
    """Past MySQL's 64 KiB TEXT, with characters every backend must keep exactly."""
    text = 'Grüße 你好 🦜 "quoted" \\back\\slash\n\tend \x00 \u2028 ' * 3000
    item: Any = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    odd: Any = {"z": 1, "a": [1, 2.5, None, True], "m": {"y": {}, "b": []}}
    session = open_session(session_id)
    await session.add_items([item, odd])
    found: list[Any] = await open_session(session_id).get_items()
    assert found == [item, odd]
    assert list(found[1]) == ["z", "a", "m"] and list(found[1]["m"]) == ["y", "b"]


async def test_ids_are_exact(open_session: OpenSession, session_id: str) -> None:
    """Case and trailing spaces count (MySQL collations fold them)."""
    ids = [session_id, session_id.upper(), f"{session_id} ", f"{session_id}-ü", "x" * 200 + session_id[:55]]
    for n, each in enumerate(ids):
        await open_session(each).add_items([message(f"s{n}")])
    for n, each in enumerate(ids):
        assert texts(await open_session(each).get_items()) == [f"s{n}"]
        await open_session(each).clear_session()


async def test_runner_turns_with_tools_survive_a_restart(open_session: OpenSession, session_id: str) -> None:
    """The SDK's real Runner: turns with a tool call each, the service restarted between
    them (a new session object and agent), and the history read back."""
    agent, model = adder_agent()
    first = await Runner.run(agent, "add 1 and 2", session=open_session(session_id), run_config=OFFLINE)
    assert first.final_output == "the sum is 3"
    second = await Runner.run(agent, "add 20 and 22", session=open_session(session_id), run_config=OFFLINE)
    assert second.final_output == "the sum is 42"
    restarted, restarted_model = adder_agent()  # another process, after a restart
    third = await Runner.run(restarted, "add 5 and -7", session=open_session(session_id), run_config=OFFLINE)
    assert third.final_output == "the sum is -2"
    assert restarted_model.inputs[0] == 9  # the two earlier turns' 8 items and the new question
    stored: list[Any] = await open_session(session_id).get_items()
    kinds = [item.get("type", "message") for item in stored]
    assert kinds == ["message", "function_call", "function_call_output", "message"] * 3
    outputs = [item["output"] for item in stored if item.get("type") == "function_call_output"]
    assert outputs == ["3", "42", "-2"]
    assert len({item["call_id"] for item in stored if item.get("type") == "function_call"}) == 3
    assert model.inputs == [1, 3, 5, 7]


async def test_works_under_the_compaction_wrapper(open_session: OpenSession, session_id: str) -> None:
    """``OpenAIResponsesCompactionSession`` replaces the history by clear, then add."""
    compacted: Any = [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "sum"}]}
    ]

    async def compact(**kwargs: Any) -> Any:
        assert texts(kwargs["input"]) == [f"m{n}" for n in range(6)]
        return SimpleNamespace(output=compacted)

    client: Any = SimpleNamespace(responses=SimpleNamespace(compact=compact))
    wrapped = OpenAIResponsesCompactionSession(
        session_id, open_session(session_id), client=client, compaction_mode="input"
    )
    await wrapped.add_items([message(f"m{n}") for n in range(6)])
    await wrapped.run_compaction({"force": True, "compaction_mode": "input"})
    assert await open_session(session_id).get_items() == compacted
    await wrapped.add_items([message("after")])
    assert texts(await open_session(session_id).get_items())[-1] == "after"


# -- the entry point --------------------------------------------------------------------

#: The contract's tests by name: the ``test_*`` functions above, in their order.
TESTS: dict[str, Callable[..., Awaitable[None]]] = {
    name: test for name, test in list(globals().items()) if name.startswith("test_") and callable(test)
}


class OpenAISessionContract:
    """The contract's tests as methods: subclass it as ``Test<YourSession>`` and give an
    ``open_session`` fixture (pytest-asyncio in auto mode runs the tests)::

        class TestMySession(OpenAISessionContract):
            @pytest.fixture
            def open_session(self):
                return lambda session_id: MySession(session_id, ...)

    A session that differs from the contract on purpose overrides that test with
    :func:`chatledger.testing.expected_to_differ`.
    """

    @pytest.fixture
    def session_id(self) -> str:
        """A session id no other test uses (the tests may share one database)."""
        return f"openai-{uuid.uuid4()}"


for _name, _test in TESTS.items():
    setattr(OpenAISessionContract, _name, staticmethod(_test))


# -- the kind driver (chatledger.testing.kinds) --------------------------------------------


class _Writer:
    """A :class:`chatledger.testing.kinds.Writer` of OpenAI Agents sessions: chatledger's
    ``LedgerSession`` on a ledger of its own."""

    def __init__(self, url: Any, **options: Any) -> None:
        from ..engine import Ledger

        self.ledger = Ledger(url, **options)

    async def ready(self) -> None:
        await self.ledger.ensure_ready()

    def _session(self, session_id: str) -> Any:
        from ..openai_agents import LedgerSession

        return LedgerSession(session_id, ledger=self.ledger)

    async def create(self, session_id: str) -> str:
        return session_id  # a session begins with its first add

    async def write(
        self, handle: str, text: str, *, write_id: str | None = None, in_transaction: bool = False
    ) -> None:
        item: TResponseInputItem = {"role": "user", "content": text}
        if write_id is None:
            await self._session(handle).add_items([item])
            return
        # ``add_items`` with its first item's id fixed, as its retry after a lost COMMIT is.
        from ..openai_agents import items as _items
        from ..openai_agents.session import _encode

        await _items.add(self.ledger, handle, [write_id], _encode([item], False))

    async def texts(self, session_id: str) -> list[str]:
        return [str(item.get("content")) for item in await self._session(session_id).get_items()]

    async def stale_write(self, handle: str, text: str) -> None:
        await self.write(handle, text)

    def commit_point(self, text: str, *, in_transaction: bool) -> bytes | None:
        return None

    async def close(self) -> None:
        await self.ledger.close()


def driver() -> Driver:
    """The OpenAI Agents kind's driver for :mod:`chatledger.testing.kinds`: a write
    after a clear or delete starts the session again (the SDK's semantics)."""
    from .. import kinds
    from .kinds import Driver

    return Driver(
        kinds.OPENAI, _Writer, identity="the first item's id (add_items fixes it before its first attempt)"
    )
