"""Conformance suites a session store runs to prove it keeps a framework's contract.

One suite per framework contract, each a class of pytest tests that a test module
subclasses with a fixture giving the store under test (as ``alembic.testing.suite``
and langgraph's checkpoint conformance package do):

- :class:`ZettStorageContract` (``chatledger.testing.zett``): zett-agent's
  ``SessionStorage`` and the extras of its SQL store; the fixture is ``storage``.
- :class:`ReinStoreContract` (``chatledger.testing.rein``): rein-agent's
  ``SessionStore``; the fixture is ``store``.
- :class:`OpenAISessionContract` (``chatledger.testing.openai_agents``): the OpenAI
  Agents SDK's ``Session``; the fixture is ``open_session`` (``session_id -> Session``).
- :class:`AdkSessionServiceContract` (``chatledger.testing.adk``): Google ADK's
  ``BaseSessionService``; the fixture is ``service``.
- :class:`LangGraphCheckpointerContract` (``chatledger.testing.langgraph``): LangGraph's
  ``BaseCheckpointSaver``, by LangGraph's own conformance suite; the fixture is
  ``checkpointer`` (a function yielding a fresh checkpointer).

Beside them, :mod:`chatledger.testing.kinds` holds the kind contract: the promises
every kind of session keeps through chatledger's core (identity, exactly once across a
lost COMMIT reply, a write overtaken by a delete, delete and purge, moves), run for
each registered kind through the ``driver()`` of its module here.

::

    # tests/test_my_store.py
    import pytest
    from chatledger.testing import ZettStorageContract

    class TestMyStorage(ZettStorageContract):
        @pytest.fixture
        async def storage(self):
            async with MyStorage("sqlite+aiosqlite:///...") as opened:
                yield opened

The suites need pytest, pytest-asyncio (``asyncio_mode = "auto"``) and the
framework's package (the ``zett`` / ``rein`` / ``openai-agents`` / ``adk`` / ``langgraph``
extra; LangGraph's also ``langgraph-checkpoint-conformance``). Nothing
here is imported by
``chatledger`` itself: the library never loads pytest.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

import pytest

#: The contract classes by name, and the module each lives in (imported on first use,
#: so a project with one framework need not install the other).
CONTRACTS = {
    "ZettStorageContract": "chatledger.testing.zett",
    "ReinStoreContract": "chatledger.testing.rein",
    "OpenAISessionContract": "chatledger.testing.openai_agents",
    "AdkSessionServiceContract": "chatledger.testing.adk",
    "LangGraphCheckpointerContract": "chatledger.testing.langgraph",
}

# pytest rewrites the asserts of test modules only; these modules' failures should
# say what differed too.
pytest.register_assert_rewrite(*sorted({*CONTRACTS.values(), f"{__name__}.kinds"}))

__all__ = [*CONTRACTS, "CONTRACTS", "expected_to_differ"]


def expected_to_differ(test: Callable[..., Any], reason: str, *, racy: bool = False) -> Any:
    """``test`` (a contract class's test) as a strict ``xfail`` with ``reason``, for a
    store that differs from the contract there on purpose; the shared test itself is
    left unmarked. Assign it in the subclass under the test's own name.

    ``racy``: the difference shows only when concurrent calls interleave (a lost
    update), which a busy machine may serialize; the ``xfail`` is then not strict, so
    a run where the race did not happen passes too.

    Returns:
        A ``staticmethod`` of a wrapper with the test's signature (its fixtures).
    """

    if inspect.iscoroutinefunction(test):

        @functools.wraps(test)
        async def differs(*args: Any, **kwargs: Any) -> None:
            await test(*args, **kwargs)

    else:

        @functools.wraps(test)
        def differs(*args: Any, **kwargs: Any) -> None:
            test(*args, **kwargs)

    return staticmethod(pytest.mark.xfail(reason=reason, strict=not racy)(differs))


def __getattr__(name: str) -> Any:
    if name in CONTRACTS:
        return getattr(importlib.import_module(CONTRACTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
