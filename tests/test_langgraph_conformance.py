"""LangGraph's own conformance suite for checkpointers (``langgraph-checkpoint-conformance``)
on :class:`chatledger.langgraph.LedgerSaver`, on every target, through the contract
class :class:`chatledger.testing.LangGraphCheckpointerContract`: each capability, base
(``put``, ``put_writes``, ``get_tuple``, ``list``, ``delete_thread``) and extended
(``delete_for_runs``, ``copy_thread``, ``prune``), is one test, and passes only when
the suite detects it and every one of its tests passes."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest

from chatledger.langgraph import LedgerSaver
from chatledger.testing.langgraph import Factory, LangGraphCheckpointerContract

from .conftest import Database


class TestLedgerSaver(LangGraphCheckpointerContract):
    @pytest.fixture
    def checkpointer(self, database: Database) -> Factory:
        async def saver() -> AsyncGenerator[LedgerSaver, None]:
            async with LedgerSaver.from_url(database.url) as made:
                yield made

        return saver
