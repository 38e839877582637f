"""LangGraph's checkpointer on the shared ledger (needs the ``langgraph`` extra).

See :class:`LedgerSaver`, LangGraph's ``BaseCheckpointSaver`` built as its own savers
are: ``async with LedgerSaver.from_url(DSN) as checkpointer:``. Without langgraph
installed, importing this package raises ``ModuleNotFoundError`` with the
``pip install 'chatledger[langgraph]'`` line.
"""

from ..errors import require_extra

try:
    from .saver import LedgerSaver
except ModuleNotFoundError as error:
    require_extra(error, "langgraph", "langgraph", "langgraph")
    raise

__all__ = ["LedgerSaver"]
