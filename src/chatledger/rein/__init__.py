"""rein-agent's ``SessionStore`` on the shared ledger (needs the ``rein`` extra).

See :class:`LedgerSessionStore`. Without rein-agent installed, importing this package
raises ``ModuleNotFoundError`` with the ``pip install 'chatledger[rein]'`` line.
"""

from ..errors import require_extra

try:
    from .store import LedgerSessionStore, ReinSessionInfo, VersionConflict, VersionedSession
except ModuleNotFoundError as error:
    require_extra(error, "rein", "rein-agent", "rein")
    raise

__all__ = ["LedgerSessionStore", "ReinSessionInfo", "VersionConflict", "VersionedSession"]
