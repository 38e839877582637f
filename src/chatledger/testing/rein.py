"""The conformance suite of rein-agent's ``SessionStore`` contract, for any implementation.

The contract is ``rein.SessionStore`` (``save(id, session)``, ``load(id)``, ``None``
for an id never saved) and the ``delete(id)`` that rein's own stores have too
(``MemorySessionStore``, ``FileSessionStore``): a ``rein.Session`` comes back equal
to what was saved, whatever it holds, under exactly the id it was saved under. The
tests here use nothing else, so another implementation runs them by subclassing
:class:`ReinStoreContract` in a test module of its own and providing a fixture:

* ``store``: the implementation, on a database it may share with other tests;
* ``conv_id`` (given by the class; override it if ids must look otherwise): a
  conversation id no other test uses.

chatledger runs them on its own store on every backend (``tests/test_rein.py``) and on
rein's own stores (``tests/test_rein_contract_on_rein.py``), which marks where they
differ.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pytest
import rein
from rein import Agent, LoopConfig, MockProvider, Session, ToolCall, Usage

if TYPE_CHECKING:
    from .kinds import Driver

__all__ = ["TESTS", "ReinStoreContract", "add", "tool_agent"]

#: A ``rein.SessionStore`` with the ``delete`` of rein's own stores.
ContractStore = Any

# -- helpers --------------------------------------------------------------------------


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def tool_agent(**options: Any) -> Agent:
    """An agent whose model asks for add(1, 2) once, then answers."""
    provider = MockProvider(
        [[ToolCall(id="call-1", name="add", arguments={"a": 1, "b": 2})], "1 + 2 = 3"],
        usage_per_call=Usage(input_tokens=7, output_tokens=3, cost_usd=0.125),
    )
    return Agent(provider=provider, tools=[add], system="You add numbers.", **options)


# -- the contract ------------------------------------------------------------------------


def test_satisfies_session_store_protocol(store: ContractStore, conv_id: str) -> None:
    assert store.load(conv_id) is None
    store.save(conv_id, Session())
    assert store.load(conv_id) == Session()
    store.save(conv_id, Session(iteration=2))  # a save replaces what the id held
    assert store.load(conv_id) == Session(iteration=2)
    store.delete(conv_id)
    assert store.load(conv_id) is None
    store.delete(conv_id)  # deleting a missing id is no error
    assert isinstance(store, rein.SessionStore)


async def test_pending_tool_calls_round_trip_and_resume(store: ContractStore, conv_id: str) -> None:
    agent = tool_agent(config=LoopConfig(permission="ask"))
    chat = agent.chat()
    result = await chat.asend("What is 1 + 2?")
    assert result.status == "interrupted"
    assert chat.session.pending_tool_calls
    store.save(conv_id, chat.session)
    loaded = store.load(conv_id)
    assert loaded == chat.session
    assert loaded is not None
    assert loaded.stage == rein.Stage.RUN_TOOLS
    assert loaded.stop_reason == "interrupted"
    # Another process would resume from exactly this state.
    resumed = await agent.aresume(loaded, approve=True)
    assert resumed.output == "1 + 2 = 3"
    store.save(conv_id, resumed.session)
    assert store.load(conv_id) == resumed.session


def test_large_unicode_session_round_trip(store: ContractStore, conv_id: str) -> None:
    """Past MySQL's 64 KiB TEXT, with characters every backend must keep exactly."""
    text = 'Grüße 你好 🦜 "quoted" \\back\\slash\n\tend \x00 \u2028 ' * 4000
    session = Session(
        messages=[
            rein.Message(role="user", content=text),
            rein.Message(
                role="assistant",
                tool_calls=[
                    ToolCall(id="ü-1", name="lookup", arguments={"q": text[:500], "n": [1, 2.5, None]})
                ],
            ),
        ],
        pending_tool_calls=[ToolCall(id="ü-1", name="lookup", arguments={"nested": {"deep": [True, {}]}})],
        usage=Usage(input_tokens=2**40, output_tokens=3, cost_usd=1e-9),
        last_signature="lookup:{}",
        repeat_count=2,
    )
    assert len(session.model_dump_json().encode()) > 200_000
    store.save(conv_id, session)
    assert store.load(conv_id) == session


def test_ids_are_exact(store: ContractStore, conv_id: str) -> None:
    """Case, trailing spaces and path separators all count (MySQL collations fold them)."""
    ids = [conv_id, conv_id.upper(), f"{conv_id} ", f"{conv_id}/../x", f"{conv_id}-ü", "x" * 255]
    for n, each in enumerate(ids):
        store.delete(each)
        store.save(each, Session(iteration=n))
    for n, each in enumerate(ids):
        assert store.load(each) == Session(iteration=n)
        store.delete(each)


# -- the entry point --------------------------------------------------------------------

#: The contract's tests by name: the ``test_*`` functions above, in their order.
TESTS: dict[str, Callable[..., Awaitable[None] | None]] = {
    name: test for name, test in list(globals().items()) if name.startswith("test_") and callable(test)
}


class ReinStoreContract:
    """The contract's tests as methods: subclass it as ``Test<YourStore>`` and give a
    ``store`` fixture (pytest-asyncio in auto mode runs the coroutine tests)::

        class TestMyStore(ReinStoreContract):
            @pytest.fixture
            def store(self) -> Iterator[MyStore]:
                with MyStore(...) as opened:
                    yield opened

    A store that differs from the contract on purpose overrides that test with
    :func:`chatledger.testing.expected_to_differ`.
    """

    @pytest.fixture
    def conv_id(self) -> str:
        """A conversation id no other test uses (the tests may share one database)."""
        return f"rein-{uuid.uuid4()}"


for _name, _test in TESTS.items():
    setattr(ReinStoreContract, _name, staticmethod(_test))


# -- the kind driver (chatledger.testing.kinds) --------------------------------------------


class _Handle:
    """A rein session as a writer holds it: the ``Session`` and the version it saved."""

    def __init__(self, session_id: str) -> None:
        self.id = session_id
        self.session = Session()
        self.version = 0


class _Writer:
    """A :class:`chatledger.testing.kinds.Writer` of rein sessions: chatledger's store."""

    def __init__(self, url: Any, **options: Any) -> None:
        from ..rein import LedgerSessionStore

        self.store = LedgerSessionStore(url, **options)
        self.ledger = self.store.ledger

    async def ready(self) -> None:
        await self.store.acontains(f"ready-{uuid.uuid4()}")  # on the store's own loop

    async def create(self, session_id: str) -> _Handle:
        return _Handle(session_id)  # a session begins with its first save

    async def write(
        self, handle: _Handle, text: str, *, write_id: str | None = None, in_transaction: bool = False
    ) -> int:
        if write_id is not None:
            raise ValueError("write_id: rein's saves mint their own")
        session = handle.session.model_copy(deep=True)
        session.messages.append(rein.Message(role="user", content=text))
        await self.store.asave(handle.id, session)
        handle.session = session
        handle.version += 1
        return handle.version

    async def texts(self, session_id: str) -> list[str]:
        found = await self.store.aload_versioned(session_id)
        return [] if found is None else [str(message.content) for message in found.session.messages]

    async def stale_write(self, handle: _Handle, text: str) -> None:
        session = handle.session.model_copy(deep=True)
        session.messages.append(rein.Message(role="user", content=text))
        await self.store.asave(handle.id, session, expected_version=handle.version)

    def commit_point(self, text: str, *, in_transaction: bool) -> bytes | None:
        return None

    async def close(self) -> None:
        await self.store.aclose()


def driver() -> Driver:
    """The rein kind's driver for :mod:`chatledger.testing.kinds`."""
    from .. import kinds
    from ..errors import VersionConflict
    from .kinds import Driver

    return Driver(
        kinds.REIN,
        _Writer,
        identity="each save mints its write id (rein_writes.write_id): a repeat is another save",
        caller_ids=False,
        refused=(VersionConflict,),
    )
