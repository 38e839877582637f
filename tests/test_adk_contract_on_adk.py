"""The conformance suite (:mod:`chatledger.testing.adk`) on ADK's own session services.

It shows the suite is implementation-neutral: ADK's ``InMemorySessionService`` and
``DatabaseSessionService`` (on a SQLite file) run the same tests; where they differ
from the contract the test is a strict ``xfail`` naming the difference.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from google.adk.sessions.database_session_service import DatabaseSessionService
from google.adk.sessions.in_memory_session_service import InMemorySessionService

from chatledger.testing import AdkSessionServiceContract, expected_to_differ

_NO_STALENESS = (
    "ADK's in-memory service has no staleness check: a Session object read before another "
    "writer's append (or before a delete and create of its id) still appends"
)


class TestOnAdksInMemoryService(AdkSessionServiceContract):
    @pytest.fixture
    def service(self) -> InMemorySessionService:
        return InMemorySessionService()

    test_stale_session_is_refused = expected_to_differ(
        AdkSessionServiceContract.test_stale_session_is_refused, _NO_STALENESS
    )
    test_created_again_after_delete_starts_empty = expected_to_differ(
        AdkSessionServiceContract.test_created_again_after_delete_starts_empty, _NO_STALENESS
    )


class TestOnAdksDatabaseService(AdkSessionServiceContract):
    @pytest.fixture
    async def service(self, tmp_path: Path) -> AsyncIterator[DatabaseSessionService]:
        async with DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{tmp_path / 'adk.db'}") as opened:
            yield opened

    test_equal_timestamps_keep_append_order = expected_to_differ(
        AdkSessionServiceContract.test_equal_timestamps_keep_append_order,
        "ADK's database service orders events by (timestamp, event id): events with equal "
        "timestamps come back in the order of their random ids, not as appended",
    )
    test_concurrent_user_state_updates_are_all_kept = expected_to_differ(
        AdkSessionServiceContract.test_concurrent_user_state_updates_are_all_kept,
        "ADK's database service merges user: state into the row it read, without a lock on "
        "SQLite: concurrent appends from the user's other sessions overwrite each other's keys",
        racy=True,
    )
