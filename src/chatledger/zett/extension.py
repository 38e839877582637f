"""``LedgerSessionExtension``: zett's persistence lifecycle over ``LedgerSessionStorage``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import URL
from zett_agent.extensions.persistence import (
    BaseSessionPersistenceExtension,
    RawMessageRecord,
    SessionSummary,
)

from .storage import DEFAULT_SESSION_TYPE, LedgerSessionStorage


class LedgerSessionExtension(BaseSessionPersistenceExtension[LedgerSessionStorage]):
    """Restore and save zett-agent sessions in a chatledger database.

    zett's ``BaseSessionPersistenceExtension`` owns the lifecycle (load on start,
    append each message, snapshot on compaction); this class builds the storage
    and forwards the storage extras, as zett's ``SQLSessionExtension`` does.

    Args:
        storage: an open :class:`LedgerSessionStorage`; or, when ``None``, one is
            built from ``dsn`` and ``**options``. The extension owns it either way
            and disposes of it in :meth:`close`.
    """

    def __init__(
        self, storage: LedgerSessionStorage | None = None, *, dsn: str | URL | None = None, **options: Any
    ) -> None:
        if storage is not None and (dsn is not None or options):
            raise TypeError("pass either storage or dsn/options, not both")
        super().__init__(storage if storage is not None else LedgerSessionStorage(dsn, **options))

    async def close(self) -> None:
        """Dispose of the storage's connection pool; history stays."""
        await self.storage.close()

    async def list_raw_messages(
        self,
        session_id: str,
        *,
        after_sequence: int = 0,
        through_sequence: int | None = None,
        limit: int = 10_000,
        offset: int = 0,
    ) -> list[RawMessageRecord]:
        """See :meth:`LedgerSessionStorage.list_raw_messages`."""
        return await self.storage.list_raw_messages(
            session_id,
            after_sequence=after_sequence,
            through_sequence=through_sequence,
            limit=limit,
            offset=offset,
        )

    async def create_session(
        self,
        *,
        session_id: str | None = None,
        parent_session_id: str | None = None,
        title: str | None = None,
        agent_name: str | None = None,
        session_type: int = DEFAULT_SESSION_TYPE,
    ) -> SessionSummary:
        """See :meth:`LedgerSessionStorage.create_session`."""
        return await self.storage.create_session(
            session_id=session_id,
            parent_session_id=parent_session_id,
            title=title,
            agent_name=agent_name,
            session_type=session_type,
        )

    async def list_sessions(
        self, *, session_types: Sequence[int] | None = None, limit: int = 100, offset: int = 0
    ) -> list[SessionSummary]:
        """See :meth:`LedgerSessionStorage.list_sessions`."""
        return await self.storage.list_sessions(session_types=session_types, limit=limit, offset=offset)

    async def get_session(self, session_id: str) -> SessionSummary | None:
        """See :meth:`LedgerSessionStorage.get_session`."""
        return await self.storage.get_session(session_id)

    async def update_session(
        self, session_id: str, *, title: str | None = None, agent_name: str | None = None
    ) -> SessionSummary | None:
        """See :meth:`LedgerSessionStorage.update_session`."""
        return await self.storage.update_session(session_id, title=title, agent_name=agent_name)

    async def delete_session(self, session_id: str) -> bool:
        """See :meth:`LedgerSessionStorage.delete_session`."""
        return await self.storage.delete_session(session_id)

    async def count_messages(self, session_id: str) -> int:
        """See :meth:`LedgerSessionStorage.count_messages`."""
        return await self.storage.count_messages(session_id)
