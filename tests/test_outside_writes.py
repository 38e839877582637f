"""Raw messages another writer numbered past a session's counter row, on every backend.

zett-agent's own store, still running after ``chatledger adopt``, numbers a session's
messages by ``MAX(sequence) + 1`` and leaves chatledger's counter row behind. The next
chatledger append to that session takes the sequence zett took: that is refused with
``CorruptData`` naming the session, the sequence, the counter and the cause -- never
the driver's duplicate-key error, never retried -- while an append repeated with its
own ``message_id`` still returns its stored sequence (the exactly-once path).
``chatledger check`` lists such sessions (exit 4) and the statement that repairs them.

Every database here is written by zett-agent's ``SQLSessionStorage`` itself, created
as an application would (see ``tests/test_adopt.py``). The message past the counter is
zett's store's own append, but on MySQL/MariaDB: there zett's store cannot write to an
adopted database at all (it passes the binary ids it reads back to aiomysql, which
fails on bytes parameters with PyMySQL 2.2), so a plain INSERT, as zett's would be,
stands in for it.

On SQLite revision 0007's trigger moves the counter row along with a message numbered
right after it, so zett's store keeps it in step from then on: the message past the
counter is written there at revision 0006, as by zett before the upgrade, and the last
test shows zett's store and chatledger numbering in turn after it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy.engine import URL
from sqlalchemy.exc import IntegrityError
from zett_agent.messages import UserMessage
from zett_agent.storage import SQLSessionStorage

from chatledger import ChatledgerError, ConstraintViolation, CorruptData
from chatledger.dsn import DSN_ENV
from chatledger.integrity import REPAIR, REPAIR_DELETED
from chatledger.migrate import downgrade_database, head_revision, upgrade_database
from chatledger.schema import raw_messages_table
from chatledger.tools.adopt import adopt
from chatledger.tools.cli import CHECK_PAST_COUNTER, run
from chatledger.zett import LedgerSessionStorage, codec

from .conftest import Database
from .support.facts import facts_of
from .support.fresh import fresh_database
from .support.schema_helpers import dsn_of, execute, on_connection
from .support.zett_data import write_zett_sessions, zett_url


@pytest.fixture(autouse=True)
def no_env_dsn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(DSN_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


@pytest.fixture
async def adopted(database: Database, tmp_path: Path) -> AsyncIterator[tuple[URL, list[str]]]:
    """A database zett-agent's own store wrote, adopted, and its session ids; then
    zett's store, still running, appends message 8 to the first session (of 7)."""
    async with fresh_database(
        database.server, tmp_path, prefix="chatledger_outside", as_an_app_would=True
    ) as url:
        ids = await write_zett_sessions(url)
        await adopt(url)
        follows = facts_of(database.backend).counter_follows_raw_log
        if follows:  # the module docstring says why
            assert await downgrade_database(url, "0006") == "0006"
        message = UserMessage(content="by zett, after adopt")
        if not facts_of(database.backend).zett_writes_adopted:  # the module docstring says why
            row = codec.raw_row(
                session_id=ids[0],
                request_id="zett-req",
                message=message,
                timing=None,
                metadata=None,
                tags=None,
                usage=None,
                now=datetime.now(UTC),
            )
            await on_connection(
                url, lambda conn: conn.execute(raw_messages_table.insert(), {**row, "sequence": 8})
            )
        else:
            zett = SQLSessionStorage(zett_url(url))
            try:
                assert await zett.append(ids[0], "zett-req", message) == 8
            finally:
                await zett.close()
        if follows:
            assert await upgrade_database(url) == head_revision()
        yield url, ids


async def test_an_append_after_outside_writes_names_them_and_writes_nothing(
    adopted: tuple[URL, list[str]],
) -> None:
    url, ids = adopted
    async with LedgerSessionStorage(url) as storage:
        with pytest.raises(CorruptData) as raised:
            await storage.append(ids[0], "r", UserMessage(content="never stored"))
        error = raised.value
        message = str(error)
        assert isinstance(error, ChatledgerError) and isinstance(error, ValueError)
        # The driver's IntegrityError is kept as the cause of the cause, never raised.
        assert isinstance(error.__cause__, ConstraintViolation)
        assert isinstance(error.__cause__.__cause__, IntegrityError)
        assert repr(ids[0]) in message and "sequence 8" in message and "last_sequence 7" in message
        assert "written outside chatledger" in message and "zett-agent's own store" in message
        assert "chatledger check --dsn " in message and "\n" not in message
        assert storage.ledger.retries == 0  # refused at once, not retried
        # Nothing written: the counter and zett's message stay as they were.
        assert await storage.count_messages(ids[0]) == 7
        raw = await storage.list_raw_messages(ids[0])
        assert [record.message.text for record in raw[-1:]] == ["by zett, after adopt"]

        # The exactly-once path is untouched: repeating an append that was stored (its
        # message_id, request and message) returns its sequence, though the next
        # sequence is taken too.
        repeated = await storage.append(ids[0], raw[0].request_id, raw[0].message, message_id=raw[0].id)
        assert repeated == 1
        # The other sessions append as ever.
        assert await storage.append(ids[1], "r", UserMessage(content="elsewhere")) == 13


async def test_check_lists_them_and_the_repair_lets_appends_go_on(
    adopted: tuple[URL, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    url, ids = adopted
    dsn = dsn_of(url)
    assert await run(["check", "--dsn", dsn]) == CHECK_PAST_COUNTER
    error = capsys.readouterr().err
    assert error.startswith("chatledger check: ") and error.count("\n") == 1
    assert f"session {ids[0]!r} (last_sequence 7, raw messages up to 8)" in error
    assert "written outside chatledger" in error and REPAIR in error
    assert not any(repr(other) in error for other in ids[1:])

    await execute(url, REPAIR)  # what the message says to run, as it says it
    assert await run(["check", "--dsn", dsn]) == 0
    async with LedgerSessionStorage(url) as storage:
        assert await storage.append(ids[0], "r", UserMessage(content="after the repair")) == 9
        tail = (await storage.load(ids[0])).raw_tail
        assert [record.message.text for record in tail[-2:]] == ["by zett, after adopt", "after the repair"]


async def test_the_repair_leaves_a_deleted_sessions_next_generation_clean(
    adopted: tuple[URL, list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows another writer added to a session after its delete belong to no generation:
    the repair removes them instead of numbering the next generation on from them."""
    url, ids = adopted
    dsn = dsn_of(url)
    await execute(url, REPAIR)
    async with LedgerSessionStorage(url) as storage:
        last = await storage.count_messages(ids[1])
        await storage.delete_session(ids[1])
    # An outside writer numbering past the tombstone's counter (by MAX(sequence) + 1 on
    # rows it wrote before the delete).
    await execute(
        url,
        "INSERT INTO raw_messages (id, session_id, request_id, sequence, role, content, message_json, "
        "metadata_json, tags_json, started_at, completed_at, duration_ns, created_at, updated_at) "
        f"SELECT 'outside-after-delete', '{ids[1]}', request_id, {last + 1}, role, content, message_json, "
        "metadata_json, tags_json, started_at, completed_at, duration_ns, created_at, updated_at "
        f"FROM raw_messages WHERE session_id = '{ids[0]}' AND sequence = 1",
    )
    assert await run(["check", "--dsn", dsn]) == CHECK_PAST_COUNTER
    error = capsys.readouterr().err
    assert repr(ids[1]) in error and REPAIR in error and REPAIR_DELETED in error
    await execute(url, REPAIR)
    await execute(url, REPAIR_DELETED)
    async with LedgerSessionStorage(url) as storage:
        await storage.create_session(session_id=ids[1])
        assert (await storage.load(ids[1])).raw_tail == []
        assert await storage.list_raw_messages(ids[1]) == []


@pytest.mark.requires("counter_trigger")
async def test_zett_numbering_after_the_counter_keeps_it_in_step_where_it_follows_the_log(
    adopted: tuple[URL, list[str]],
) -> None:
    """Where a trigger moves the counter along (revision 0007 on SQLite), zett's store
    appending after the repair takes the counter's next sequence and the counter follows:
    chatledger's next append takes the one after, and ``check`` finds nothing."""
    url, ids = adopted
    await execute(url, REPAIR)
    zett = SQLSessionStorage(zett_url(url))
    try:
        assert await zett.append(ids[0], "zett-req", UserMessage(content="by zett, in step")) == 9
    finally:
        await zett.close()
    assert await run(["check", "--dsn", dsn_of(url)]) == 0
    async with LedgerSessionStorage(url) as storage:
        assert await storage.count_messages(ids[0]) == 9
        assert await storage.append(ids[0], "r", UserMessage(content="by chatledger")) == 10
        raw = await storage.list_raw_messages(ids[0])
        assert [record.sequence for record in raw] == list(range(1, 11))
