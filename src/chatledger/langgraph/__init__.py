"""LangGraph's checkpointer on the shared ledger (needs the ``langgraph`` extra).

See :class:`LedgerSaver`, LangGraph's ``BaseCheckpointSaver`` built as its own savers
are: ``async with LedgerSaver.from_url(DSN) as checkpointer:``. Without langgraph
installed, ``LedgerSaver`` raises ``ModuleNotFoundError`` with the
``pip install 'chatledger[langgraph]'`` line; the threads' lifecycle
(:mod:`chatledger.langgraph.threads`) works on rows alone and needs no LangGraph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import require_extra

if TYPE_CHECKING:
    from .saver import LedgerSaver

__all__ = ["LedgerSaver"]


def __getattr__(name: str) -> Any:
    """``LedgerSaver``, imported on first use: the package's row modules need no LangGraph."""
    if name != "LedgerSaver":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from .saver import LedgerSaver
    except ModuleNotFoundError as error:
        require_extra(error, "langgraph", "langgraph", "langgraph")
        raise
    return LedgerSaver
