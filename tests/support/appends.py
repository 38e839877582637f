"""Helpers of the tests of the one-statement appends (revision 0007's SQLite trigger,
revision 0008's MySQL procedure): a log checked gap-free, old and new appends mixed,
the statements a storage sends."""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy import event
from zett_agent.messages import UserMessage

from chatledger.zett import LedgerSessionStorage


async def gap_free(storage: LedgerSessionStorage, session_id: str, count: int) -> None:
    """The session's raw log runs 1..``count``, and its count says so."""
    raw = await storage.list_raw_messages(session_id, limit=10**6)
    assert [record.sequence for record in raw] == list(range(1, count + 1))
    assert await storage.count_messages(session_id) == count


async def mix_old_and_new(
    new: LedgerSessionStorage, old: LedgerSessionStorage, ids: list[str], appends: int, *, titled: bool
) -> None:
    """``old`` (made to run the counter upsert and the insert, as code of the revision
    before) and ``new`` (the one-statement append) append ``appends`` messages each to
    every session of ``ids`` at once (``titled``: each sets a title too); every log is
    gap-free, and each path then appends after the other at the counter's next."""
    await new.ledger.ensure_ready()
    await old.ledger.ensure_ready()
    backend = new.ledger.backend
    assert new.ledger.append_message is backend.counted_append
    old.ledger.readiness.append_message = backend.append_message

    async def writer(storage: LedgerSessionStorage, name: str, session_id: str) -> list[int]:
        return [
            await storage.append(
                session_id,
                name,
                UserMessage(content=f"{name} {number}"),
                title=f"{name} {number % 3}" if titled else None,
            )
            for number in range(appends)
        ]

    written = await asyncio.gather(
        *(writer(storage, name, id) for id in ids for storage, name in ((new, "new"), (old, "old")))
    )
    for number, id in enumerate(ids):
        both = written[2 * number] + written[2 * number + 1]
        assert sorted(both) == list(range(1, 2 * appends + 1))
        await gap_free(new, id, 2 * appends)
        assert await old.append(id, "old", UserMessage(content="last old")) == 2 * appends + 1
        assert await new.append(id, "new", UserMessage(content="last new")) == 2 * appends + 2


def record_statements(storage: LedgerSessionStorage) -> list[str]:
    """Every statement the storage sends from now on."""
    sent: list[str] = []

    @event.listens_for(storage.ledger.engine.sync_engine, "before_cursor_execute")
    def _record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement)

    return sent
