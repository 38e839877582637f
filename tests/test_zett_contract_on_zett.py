"""The conformance suite (:mod:`chatledger.testing.zett`) on zett-agent's own SQL store.

It shows the suite is implementation-neutral, and marks each place where chatledger
differs from zett's own store on purpose (each an ``xfail`` with the reason, strict,
so that a change on either side is noticed). Each reason is a row of the
table "Where it differs from zett-agent's own store" (``docs/zett.md``); keep the two in step.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from chatledger.testing import ZettStorageContract, expected_to_differ

#: Where chatledger differs from zett-agent's own store on purpose: the row's behaviour
#: cell in docs/zett.md ("Where it differs from zett-agent's own store") and the reason.
DIFFERENCES = {
    "test_append_strips_the_session_fields": (
        "a title or agent name given to `append`",
        "zett's store keeps a title or agent name given to append as it is (its create_session and "
        "update_session strip them); chatledger strips them whichever call gives them",
    ),
    "test_timestamps_keep_microseconds_and_come_back_utc": (
        "aware datetimes",
        "zett's store keeps the wall time of an aware datetime and drops its zone on SQLite and "
        "MySQL (a time given in another zone comes back shifted); chatledger stores the instant",
    ),
    "test_naive_datetimes_are_refused": (
        "naive datetimes",
        "zett's store accepts naive datetimes; chatledger refuses them",
    ),
    "test_bad_ids_are_refused_before_writing": (
        "empty, blank, NUL-bearing or unencodable ids",
        "zett's store accepts empty, blank, NUL-bearing and unencodable ids; chatledger refuses them",
    ),
}


class TestOnZettsOwnStore(ZettStorageContract):
    """The conformance suite on zett's ``SQLSessionStorage`` (an SQLite file per test)."""

    @pytest.fixture
    async def storage(self, tmp_path: Path) -> AsyncIterator[Any]:
        from zett_agent.storage import SQLSessionStorage

        opened = SQLSessionStorage(f"sqlite+aiosqlite:///{tmp_path / 'zett.sqlite3'}")
        try:
            yield opened
        finally:
            await opened.close()


for _name, (_, _reason) in DIFFERENCES.items():
    setattr(TestOnZettsOwnStore, _name, expected_to_differ(getattr(ZettStorageContract, _name), _reason))


def test_each_difference_is_a_row_of_the_docs() -> None:
    guide = (Path(__file__).parent.parent / "docs" / "zett.md").read_text(encoding="utf-8")
    table = guide.split("## Where it differs from zett-agent's own store", 1)[1].split("\n## ", 1)[0]
    for row, _ in DIFFERENCES.values():
        assert f"\n| {row} |" in table, row
