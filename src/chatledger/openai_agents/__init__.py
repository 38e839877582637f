"""The OpenAI Agents SDK's ``Session`` on the shared ledger (needs the ``openai-agents`` extra).

See :class:`LedgerSession`. Without openai-agents installed, importing this package
raises ``ModuleNotFoundError`` with the ``pip install 'chatledger[openai-agents]'`` line.
"""

from ..errors import require_extra

try:
    from .session import LedgerSession
except ModuleNotFoundError as error:
    require_extra(error, "agents", "openai-agents", "openai-agents")
    raise

__all__ = ["LedgerSession"]
