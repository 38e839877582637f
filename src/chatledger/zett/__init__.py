"""chatledger for zett-agent: ``LedgerSessionStorage`` and ``LedgerSessionExtension``.

Needs the ``zett`` extra: without zett-agent installed, importing this package raises
``ModuleNotFoundError`` with the ``pip install 'chatledger[zett]'`` line.
"""

from ..errors import require_extra

try:
    from .extension import LedgerSessionExtension
    from .storage import LedgerSessionStorage
except ModuleNotFoundError as error:
    require_extra(error, "zett_agent", "zett-agent", "zett")
    raise

__all__ = ["LedgerSessionExtension", "LedgerSessionStorage"]
