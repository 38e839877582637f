"""The opening and closing a kind's operations share when they work through a
:class:`chatledger.engine.Ledger` of their own (:class:`chatledger.kinds.Operations`)."""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

from sqlalchemy.engine import URL

from ..engine import Ledger


class OnLedger:
    """Operations on one database through a ledger opened with its DSN and options,
    closed when the ``async with`` block ends."""

    def __init__(self, url: URL, options: Mapping[str, Any]) -> None:
        self.ledger = Ledger(url, **options)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.ledger.close()
