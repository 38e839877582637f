"""rein-agent's ``SessionStore`` on the shared ledger (needs the ``rein`` extra).

See :class:`LedgerSessionStore`.
"""

from .store import LedgerSessionStore, ReinSessionInfo, VersionConflict, VersionedSession

__all__ = ["LedgerSessionStore", "ReinSessionInfo", "VersionConflict", "VersionedSession"]
