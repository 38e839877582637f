"""Google ADK (``google-adk``) sessions on the shared ledger.

:class:`LedgerSessionService` is an ADK ``BaseSessionService`` built like ADK's own
``DatabaseSessionService(db_url=...)``: one line swaps it in. Needs the ``adk`` extra
(``pip install 'chatledger[adk]'``).
"""

from __future__ import annotations

from .service import LedgerListSessionsResponse, LedgerSessionService

__all__ = ["LedgerListSessionsResponse", "LedgerSessionService"]
