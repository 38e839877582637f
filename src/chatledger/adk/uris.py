"""Session service URIs: ``chatledger+`` and a chatledger DSN."""

from __future__ import annotations

__all__ = ["SCHEME_PREFIX", "service_dsn"]

#: What a chatledger session service URI's scheme starts with, before a DSN scheme.
SCHEME_PREFIX = "chatledger+"


def service_dsn(uri: object) -> str:
    """The chatledger DSN inside a session service URI: ``chatledger+postgresql://u@h/db``
    is ``postgresql://u@h/db``. A URI without the prefix is taken as a DSN as it is.

    Raises:
        TypeError: ``uri`` is not a string.
        ValueError: nothing follows the prefix.
    """
    if not isinstance(uri, str):
        raise TypeError(f"uri must be a string, not {type(uri).__name__}")
    if uri[: len(SCHEME_PREFIX)].lower() != SCHEME_PREFIX:
        return uri
    dsn = uri[len(SCHEME_PREFIX) :]
    if "://" not in dsn or dsn.startswith("://"):
        raise ValueError(
            f"uri: a database scheme must follow {SCHEME_PREFIX!r}, as in chatledger+sqlite:///path"
        )
    return dsn
