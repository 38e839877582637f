"""Google ADK (``google-adk``) sessions on the shared ledger.

:class:`LedgerSessionService` is an ADK ``BaseSessionService`` built like ADK's own
``DatabaseSessionService(db_url=...)``: one line swaps it in. Needs the ``adk`` extra
(``pip install 'chatledger[adk]'``).

:func:`register` adds chatledger's ``chatledger+…`` URI schemes to ADK's service
registry, for ADK's command-line tools (``adk web``, ``adk api_server``).
"""

from __future__ import annotations

from .registration import register
from .service import LedgerListSessionsResponse, LedgerSessionService

__all__ = ["LedgerListSessionsResponse", "LedgerSessionService", "register"]
