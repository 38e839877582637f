"""The conformance suite of LangGraph's checkpointer contract (``BaseCheckpointSaver``),
for any implementation: LangGraph's own suite (``langgraph-checkpoint-conformance``),
one test per capability, base (``put``, ``put_writes``, ``get_tuple``, ``list``,
``delete_thread``) and extended (``delete_for_runs``, ``copy_thread``, ``prune``).

A capability passes only when the suite detects it as implemented and every one of
its tests passes. Another implementation runs them by subclassing
:class:`LangGraphCheckpointerContract` in a test module of its own and providing a
fixture:

* ``checkpointer``: a function returning an async generator that yields a fresh
  checkpointer and closes it after (the suite's ``checkpointer_test`` factory).

chatledger runs them on :class:`chatledger.langgraph.LedgerSaver` on every backend
(``tests/test_langgraph_conformance.py``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES, Capability

if TYPE_CHECKING:
    from .kinds import Driver

__all__ = ["CAPABILITIES", "LangGraphCheckpointerContract"]

#: Every capability of the suite, in name order.
CAPABILITIES = tuple(sorted(ALL_CAPABILITIES, key=lambda each: each.value))

#: A function yielding a fresh checkpointer (and closing it after).
Factory = Callable[[], AsyncGenerator[Any, None]]


class LangGraphCheckpointerContract:
    """LangGraph's conformance suite, a capability per test; subclass it with a
    ``checkpointer`` fixture."""

    @pytest.mark.parametrize("capability", CAPABILITIES, ids=str)
    async def test_capability_passes_langgraphs_conformance_suite(
        self, checkpointer: Factory, capability: Capability
    ) -> None:
        registered = checkpointer_test(name=type(self).__name__)(checkpointer)
        report = await validate(registered, capabilities={capability.value})
        result = report.results[capability.value]
        assert result.detected, f"{capability.value} is not detected as implemented"
        assert result.passed, "\n".join(result.failures)
        assert result.tests_passed > 0


# -- the kind driver (chatledger.testing.kinds) --------------------------------------------

#: The channel each checkpoint of the kind contract's threads holds its item in: a dict,
#: so stored as a blob of the channel's version (not inline in the checkpoint).
DRIVER_CHANNEL = "item"


@dataclass
class _Put:
    """One ``aput``'s arguments, kept to repeat the call exactly."""

    config: dict[str, Any]
    checkpoint: dict[str, Any]
    metadata: dict[str, Any]
    new_versions: dict[str, str]


@dataclass
class _Handle:
    """A thread as a run holds it: its id, and the checkpoint it put last (the parent of
    its next put), with the item channel's version and the step."""

    thread_id: str
    head: str | None = None
    version: str | None = None
    step: int = -1
    #: The puts made with a write id, by that id: a repeat is the same call.
    puts: dict[str, tuple[str, _Put]] = field(default_factory=dict)


class _Writer:
    """A :class:`chatledger.testing.kinds.Writer` of LangGraph threads: chatledger's
    ``LedgerSaver`` on a ledger of its own. A write is an ``aput`` of the thread's next
    checkpoint of the root namespace, the item in its channel, as a graph's step makes
    one; its write id names the checkpoint (its ``checkpoint_id``, a LangGraph id
    minted at the first call with it)."""

    def __init__(self, url: Any, **options: Any) -> None:
        from ..engine import Ledger
        from ..langgraph import LedgerSaver

        self.ledger = Ledger(url, **options)
        self.saver = LedgerSaver(ledger=self.ledger)

    async def ready(self) -> None:
        await self.saver.setup()

    async def create(self, session_id: str) -> _Handle:
        return _Handle(session_id)  # a thread begins with its first checkpoint

    def _next(self, handle: _Handle, text: str, checkpoint_id: str | None = None) -> _Put:
        from langgraph.checkpoint.base import empty_checkpoint

        version = self.saver.get_next_version(handle.version)
        checkpoint: dict[str, Any] = dict(empty_checkpoint())
        if checkpoint_id is not None:
            checkpoint["id"] = checkpoint_id
        checkpoint["channel_values"] = {DRIVER_CHANNEL: {"text": text}}
        checkpoint["channel_versions"] = {DRIVER_CHANNEL: version}
        configurable = {"thread_id": handle.thread_id, "checkpoint_ns": ""}
        if handle.head is not None:
            configurable["checkpoint_id"] = handle.head
        metadata = {"source": "loop", "step": handle.step + 1, "parents": {}}
        return _Put({"configurable": configurable}, checkpoint, metadata, {DRIVER_CHANNEL: version})

    async def _put(self, handle: _Handle, put: _Put) -> Any:
        stored = await self.saver.aput(put.config, put.checkpoint, put.metadata, put.new_versions)  # type: ignore[arg-type]
        handle.head = put.checkpoint["id"]
        handle.version = put.new_versions[DRIVER_CHANNEL]
        handle.step = put.metadata["step"]
        return stored

    async def write(
        self, handle: _Handle, text: str, *, write_id: str | None = None, in_transaction: bool = False
    ) -> Any:
        # Every put tells its thread's generation before its COMMIT: in_transaction or not.
        if write_id is None:
            return await self._put(handle, self._next(handle, text))
        made = handle.puts.get(write_id)
        if made is not None and made[0] == text:  # the same call again: the thread's head stays
            put = made[1]
            return await self.saver.aput(put.config, put.checkpoint, put.metadata, put.new_versions)  # type: ignore[arg-type]
        put = self._next(handle, text, None if made is None else made[1].checkpoint["id"])
        handle.puts[write_id] = (text, put)
        return await self._put(handle, put)

    async def texts(self, session_id: str) -> list[str]:
        config: Any = {"configurable": {"thread_id": session_id, "checkpoint_ns": ""}}
        found = [item async for item in self.saver.alist(config)]  # newest first
        return [str(item.checkpoint["channel_values"][DRIVER_CHANNEL]["text"]) for item in reversed(found)]

    async def stale_write(self, handle: _Handle, text: str) -> Any:
        return await self._put(handle, self._next(handle, text))  # its parent: what it read

    def commit_point(self, text: str, *, in_transaction: bool) -> bytes | None:
        return None

    async def close(self) -> None:
        await self.saver.aclose()


def driver() -> Driver:
    """The LangGraph kind's driver for :mod:`chatledger.testing.kinds`: a write is a
    checkpoint's ``aput``; one whose parent a delete erased is refused."""
    from .. import kinds
    from ..errors import SessionDeleted
    from .kinds import Driver

    return Driver(
        kinds.LANGGRAPH,
        _Writer,
        identity="the checkpoint's key (thread_id, checkpoint_ns, checkpoint_id) and its content's digest",
        refused=(SessionDeleted,),
        skipped={
            "test_a_write_id_with_other_content_is_an_identity_conflict": (
                "a put under a stored checkpoint's key replaces it, as BaseCheckpointSaver's "
                "contract and LangGraph's own savers have it; only the settle of a put whose "
                "COMMIT reply was lost tells other content apart (IdentityConflict)"
            )
        },
    )
