"""LangGraph's own conformance suite for checkpointers (``langgraph-checkpoint-conformance``)
on :class:`chatledger.langgraph.LedgerSaver`, on every target: each capability, base
(``put``, ``put_writes``, ``get_tuple``, ``list``, ``delete_thread``) and extended
(``delete_for_runs``, ``copy_thread``, ``prune``), is one test, and passes only when
the suite detects it and every one of its tests passes."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES, Capability

from chatledger.langgraph import LedgerSaver

from .conftest import Database


@pytest.mark.parametrize("capability", sorted(ALL_CAPABILITIES, key=lambda each: each.value), ids=str)
async def test_capability_passes_langgraphs_conformance_suite(
    database: Database, capability: Capability
) -> None:
    async def saver() -> AsyncGenerator[LedgerSaver, None]:
        async with LedgerSaver.from_url(database.url) as made:
            yield made

    registered = checkpointer_test(name=f"LedgerSaver[{database.target}]")(saver)
    report = await validate(registered, capabilities={capability.value})
    result = report.results[capability.value]
    assert result.detected, f"{capability.value} is not detected as implemented"
    assert result.passed, "\n".join(result.failures)
    assert result.tests_passed > 0
