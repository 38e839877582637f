"""A command a person waits on: a shorter retry budget, and one line saying it retries.

A service keeps the library's budget (``retry_timeout``, 20 s by default), riding out
a failover. A person who mistyped a port would wait as long, in silence; inside
:func:`command` (the ``chatledger`` CLI) every :class:`chatledger.engine.Ledger`
built without its own ``retry_timeout`` gets :data:`RETRY_TIMEOUT`, and the first
retry of the command says so on stderr, once. ``chatledger retention``, run from cron
with no one waiting, passes the library's budget (``--retry-timeout``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine import URL

from .dsn import display

#: The retry budget of an interactive command, in seconds.
RETRY_TIMEOUT = 5.0

# Process-wide, not a context variable: the rein store runs its calls on a thread of its own.
_active = False
_told = False


@contextmanager
def command() -> Iterator[None]:
    """Inside: ledgers take :data:`RETRY_TIMEOUT` unless given a budget, and the first
    retry prints one line on stderr."""
    global _active, _told
    before = _active, _told
    _active, _told = True, False
    try:
        yield
    finally:
        _active, _told = before


def options(given: Mapping[str, Any]) -> dict[str, Any]:
    """A ledger's options: ``given``, with the interactive budget inside :func:`command`."""
    if _active and "retry_timeout" not in given:
        return {**given, "retry_timeout": RETRY_TIMEOUT}
    return dict(given)


def retrying(url: URL, failure: object, budget: float) -> None:
    """Say, once per command, that a call to ``url`` failed (``failure``, its ``detail``
    when it has one) and is retried."""
    global _told
    if not _active or _told:
        return
    _told = True
    said = " ".join(str(getattr(failure, "detail", failure)).split())[:200]
    print(
        f"chatledger: {display(url)} did not answer ({said}); retrying for up to {budget:g} s",
        file=sys.stderr,
        flush=True,
    )
