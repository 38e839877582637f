"""chatledger's URI schemes in Google ADK's service registry.

ADK's command-line tools (``adk web``, ``adk api_server``, ``adk run``) build their
session service from ``--session_service_uri`` through ADK's service registry, which
maps a URI's scheme to a factory. ADK's own schemes (``postgresql``, ``mysql``,
``sqlite``) give ADK's own services; chatledger's are the same names behind
``chatledger+``: ``chatledger+postgresql://…``, ``chatledger+mysql://…``,
``chatledger+mariadb://…``, ``chatledger+sqlite:///path`` (a driver may follow, as in
``chatledger+postgresql+psycopg://…``). :func:`register` adds them; an agents
directory's ``services.py`` calls it, or its ``services.yaml`` names
:class:`~chatledger.adk.LedgerSessionService` for one scheme.
"""

from __future__ import annotations

from typing import Any, Protocol

from google.adk.cli.service_registry import get_service_registry

from .. import dialects
from .service import LedgerSessionService
from .uris import SCHEME_PREFIX

__all__ = ["register", "schemes"]


class _SessionRegistry(Protocol):
    """What :func:`register` uses of ADK's ``ServiceRegistry``."""

    def register_session_service(self, scheme: str, factory: Any) -> None: ...


def schemes() -> tuple[str, ...]:
    """Every ``chatledger+…`` scheme :func:`register` adds: each backend's DSN schemes,
    alone and with the backend's async driver."""
    found: dict[str, None] = {}
    for backend in dialects.registered():
        for scheme in backend.schemes:
            found[f"{SCHEME_PREFIX}{scheme}"] = None
            found[f"{SCHEME_PREFIX}{scheme}+{backend.driver}"] = None
    return tuple(found)


def _factory(uri: str, **kwargs: Any) -> Any:
    """ADK's factory signature: the URI and the options ADK passes (``agents_dir``, and
    the CLI's session database options) to :class:`~chatledger.adk.LedgerSessionService`."""
    return LedgerSessionService(uri=uri, **kwargs)


def register(registry: _SessionRegistry | None = None) -> tuple[str, ...]:
    """Add chatledger's schemes to ADK's service registry (ADK's global one by default),
    so that ``create_session_service("chatledger+sqlite:///…")`` and
    ``--session_service_uri chatledger+postgresql://…`` give a
    :class:`~chatledger.adk.LedgerSessionService`. Calling it again changes nothing.

    Returns the schemes registered.
    """
    if registry is None:
        registry = get_service_registry()
    added = schemes()
    for scheme in added:
        registry.register_session_service(scheme, _factory)
    return added
