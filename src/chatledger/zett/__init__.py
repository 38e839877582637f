"""chatledger for zett-agent: ``LedgerSessionStorage`` and ``LedgerSessionExtension``.

Needs the ``zett`` extra (``pip install 'chatledger[zett]'``).
"""

from .extension import LedgerSessionExtension
from .storage import LedgerSessionStorage

__all__ = ["LedgerSessionExtension", "LedgerSessionStorage"]
