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
from typing import Any

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES, Capability

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
