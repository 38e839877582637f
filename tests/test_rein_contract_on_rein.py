"""The conformance suite (:mod:`chatledger.testing.rein`) on rein-agent's own stores.

It shows the suite is implementation-neutral: rein's ``MemorySessionStore`` keeps the
whole contract; its ``FileSessionStore`` differs where an id must be a file name
(each an ``xfail`` with the reason, strict, so that a change is noticed).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rein.store import FileSessionStore, MemorySessionStore

from chatledger.testing import ReinStoreContract, expected_to_differ


class TestOnReinsMemoryStore(ReinStoreContract):
    @pytest.fixture
    def store(self) -> MemorySessionStore:
        return MemorySessionStore()


class TestOnReinsFileStore(ReinStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> FileSessionStore:
        return FileSessionStore(tmp_path / "sessions")

    test_ids_are_exact = expected_to_differ(
        ReinStoreContract.test_ids_are_exact,
        "rein's file store names a file by the id: it refuses ids with a path separator, and one of "
        "255 characters makes a file name past the file system's limit",
    )
