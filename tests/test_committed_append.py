"""Revision 0010's procedure (MySQL/MariaDB): the append that commits itself, its row
sent before its COMMIT.

* Its parameters are revision 0008's, which are the append's in the order the code
  binds them.
* An append to a session it only moves along is its one ``CALL``: committed when the
  call returns (another connection reads it), no transaction left open, no ``COMMIT``
  or ``ROLLBACK`` sent after it.
* What it does not move along (a new session, a tombstone, another parent, a field to
  change) it leaves alone, and the transaction's append decides as before.
* A statement failing inside it (the repeat of a message id) leaves nothing behind:
  its transaction is rolled back, the repeat returns the stored sequence.
* The connection lost, the call interrupted (a time limit, ``KILL QUERY``) or
  cancelled after its COMMIT: the append stands, once, and a repeat with its message
  id returns it; never reported as "nothing committed".
* Its row comes before its COMMIT: lost or interrupted between the two, the append was
  not committed, and is made again, once; the row read is not taken as its answer.
* Its fields compare as utf8mb4 whatever the column's character set.
* Dropped or given other parameters after the ledger's schema check: the append that
  finds it so is made by the transaction, as every later one.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.engine import URL
from zett_agent.messages import UserMessage

from chatledger import OutcomeUnknown, SessionDeleted
from chatledger.dialects.appends import MESSAGE_COLUMNS, SESSION_BINDS
from chatledger.migrate import head_revision, upgrade_database
from chatledger.schema import raw_messages_table, sessions_table
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.appends import gap_free, record_statements
from .support.schema_helpers import execute, fresh_database, revision_module


def test_the_procedure_takes_revision_0008s_parameters() -> None:
    committed, called = revision_module("0010"), revision_module("0008")
    assert committed.SESSION_PARAMETERS == called.SESSION_PARAMETERS
    assert committed.MESSAGE_PARAMETERS == called.MESSAGE_PARAMETERS
    assert [name for name, _ in committed.SESSION_PARAMETERS] == list(SESSION_BINDS)
    assert [name for name, _ in committed.MESSAGE_PARAMETERS] == list(MESSAGE_COLUMNS)


async def _open_transactions(storage: LedgerSessionStorage) -> int:
    """InnoDB transactions open on the test's database, this read's own aside."""
    return int(
        await storage.ledger.read(
            lambda conn: conn.scalar(
                text(
                    "SELECT COUNT(*) FROM information_schema.innodb_trx t "
                    "JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id "
                    "WHERE p.db = DATABASE() AND t.trx_mysql_thread_id <> CONNECTION_ID()"
                )
            )
        )
    )


async def _stored(url: URL, session_id: str) -> tuple[int, int]:
    """The session's counter and its number of messages, read on a connection of its own."""
    async with LedgerSessionStorage(url) as reader:

        async def read(conn: Any) -> tuple[int, int]:
            counter = await conn.scalar(
                select(sessions_table.c.last_sequence).where(sessions_table.c.id == session_id)
            )
            count = await conn.scalar(
                select(func.count())
                .select_from(raw_messages_table)
                .where(raw_messages_table.c.session_id == session_id)
            )
            return int(counter), int(count)

        return await reader.ledger.read(read)


@pytest.mark.requires("append_procedure")
async def test_an_append_it_moves_along_is_one_call_committed_by_itself(database: Database) -> None:
    session = f"committed-{uuid.uuid4().hex[:8]}"
    async with LedgerSessionStorage(database.url) as storage:
        assert await storage.append(session, "r", UserMessage(content="one"), title="kept") == 1
        assert storage.ledger.single_append is storage.ledger.backend.single_append
        sent = record_statements(storage)
        for sequence in (2, 3):
            assert await storage.append(session, "r", UserMessage(content="more"), title="kept") == sequence
            assert await _stored(database.url, session) == (sequence, sequence)
        assert [statement.split("(")[0] for statement in sent] == ["CALL chatledger_append_committed_v2"] * 2
        assert storage.ledger.engine.pool.checkedout() == 0
        assert await _open_transactions(storage) == 0
        await gap_free(storage, session, 3)


@pytest.mark.requires("append_procedure")
async def test_what_it_does_not_move_along_takes_the_transaction(database: Database) -> None:
    parent, child, gone, titled = (f"along-{uuid.uuid4().hex[:8]}-{name}" for name in ("p", "c", "g", "t"))
    async with LedgerSessionStorage(database.url) as storage:
        await storage.ledger.ensure_ready()
        sent = record_statements(storage)
        assert await storage.append(parent, "r", UserMessage(content="parent")) == 1
        # A new session: the procedure writes nothing; the transaction's CALL makes it
        # (and looks up the high-water mark of a purged tombstone).
        assert [statement.split("(")[0] for statement in sent[:2]] == [
            "CALL chatledger_append_committed_v2",
            "CALL chatledger_append",
        ]
        assert len(sent) == 3
        assert await storage.append(child, "r", UserMessage(content="one"), parent_session_id=parent) == 1
        assert await storage.append(child, "r", UserMessage(content="two"), parent_session_id=parent) == 2
        with pytest.raises(ValueError, match="parent"):
            await storage.append(child, "r", UserMessage(content="x"))
        assert await storage.append(gone, "r", UserMessage(content="one")) == 1
        assert await storage.delete_session(gone) is True
        with pytest.raises(SessionDeleted):
            await storage.append(gone, "r", UserMessage(content="x"))
        assert await storage.append(titled, "r", UserMessage(content="one"), title="Title") == 1
        assert await storage.append(titled, "r", UserMessage(content="two"), title="title") == 2
        summary = await storage.get_session(titled)
        assert summary is not None and summary.title == "title"
        assert await _stored(database.url, child) == (2, 2)
        assert await _open_transactions(storage) == 0


@pytest.mark.requires("append_procedure")
async def test_a_failure_inside_it_leaves_nothing_behind(database: Database) -> None:
    session = f"inside-{uuid.uuid4().hex[:8]}"
    async with LedgerSessionStorage(database.url) as storage:
        assert await storage.append(session, "r", UserMessage(content="one")) == 1
        message_id = str(uuid.uuid4())
        assert await storage.append(session, "r", UserMessage(content="two"), message_id=message_id) == 2
        # Its insert fails on the message id after its counter moved: rolled back, and
        # the repeat is answered with the stored sequence.
        assert await storage.append(session, "r", UserMessage(content="two"), message_id=message_id) == 2
        assert await _open_transactions(storage) == 0
        assert await storage.append(session, "r", UserMessage(content="three")) == 3
        await gap_free(storage, session, 3)


async def _after_the_commit_once(url: URL, statement: str) -> None:
    """Put the real procedure under another name, behind one that calls it and then, on
    the first append it commits only, runs ``statement``: after the COMMIT and the row,
    before the call's closing status. The flag table is MyISAM: no transaction keeps it."""
    module = revision_module("0010")
    names = ", ".join(
        [f"s_{name}" for name, _ in module.SESSION_PARAMETERS]
        + [f"m_{name}" for name, _ in module.MESSAGE_PARAMETERS]
    )
    await execute(
        url,
        "CREATE TABLE failed_once (done INTEGER) ENGINE=MyISAM",
        module.APPEND_PROCEDURE.replace(
            "chatledger_append_committed_v2(", "chatledger_append_committed_real(", 1
        ),
        "DROP PROCEDURE chatledger_append_committed_v2",
        f"""CREATE PROCEDURE chatledger_append_committed_v2({module._parameters()})
        BEGIN
          CALL chatledger_append_committed_real({names});
          IF s_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM failed_once)
            AND EXISTS (SELECT 1 FROM raw_messages WHERE id = m_id) THEN
            INSERT INTO failed_once VALUES (1);
            {statement};
          END IF;
        END""",
    )


@pytest.mark.requires("append_procedure")
async def test_a_connection_lost_after_its_commit_is_settled(database: Database, tmp_path: Path) -> None:
    async with fresh_database(database, tmp_path) as url:
        assert await upgrade_database(url) == head_revision()
        await _after_the_commit_once(url, "KILL CONNECTION_ID()")
        async with LedgerSessionStorage(url) as storage:
            assert await storage.append("lost", "r", UserMessage(content="one")) == 1
            assert storage.ledger.single_append is not None
            # Committed, then the connection lost: whether it was is unknown to the
            # ledger, which finds the message by its id rather than append it again.
            assert await storage.append("lost", "r", UserMessage(content="two")) == 2
            assert storage.ledger.retries == 1
            assert await storage.append("lost", "r", UserMessage(content="three")) == 3
            await gap_free(storage, "lost", 3)


#: What the server may report once the procedure has committed: a statement's time
#: limit or KILL QUERY ending the call (ER_QUERY_INTERRUPTED).
INTERRUPTED = "SIGNAL SQLSTATE '70100' SET MYSQL_ERRNO = 1317, MESSAGE_TEXT = 'interrupted (test)'"


@pytest.mark.requires("append_procedure")
async def test_an_interruption_after_its_commit_is_settled(database: Database, tmp_path: Path) -> None:
    """A transient code out of the call, not one of a lock wait: the append may have
    been committed. Settled before any retry; with no budget left, its outcome is
    unknown (never "nothing committed"), and the repeat with its id returns it."""
    async with fresh_database(database, tmp_path) as url:
        assert await upgrade_database(url) == head_revision()
        await _after_the_commit_once(url, INTERRUPTED)
        async with LedgerSessionStorage(url) as storage:
            assert await storage.append("interrupted", "r", UserMessage(content="one")) == 1
            assert await storage.append("interrupted", "r", UserMessage(content="two")) == 2
            assert storage.ledger.retries == 1
            await gap_free(storage, "interrupted", 2)
        await execute(url, "DELETE FROM failed_once")
        async with LedgerSessionStorage(url, retry_timeout=0) as storage:
            message_id = str(uuid.uuid4())
            with pytest.raises(OutcomeUnknown):
                await storage.append("interrupted", "r", UserMessage(content="three"), message_id=message_id)
            repeat = UserMessage(content="three")
            assert await storage.append("interrupted", "r", repeat, message_id=message_id) == 3
            await gap_free(storage, "interrupted", 3)


async def _before_the_commit_once(url: URL, statement: str) -> None:
    """Put a copy of the procedure in its place that, on the first append it moves
    along only, runs ``statement`` after its row and before its COMMIT. The flag table
    is MyISAM: no rollback takes its row back."""
    module = revision_module("0010")
    row_then_commit = "    SELECT v_sequence AS sequence;\n    COMMIT;"
    assert row_then_commit in module.APPEND_PROCEDURE
    await execute(
        url,
        "CREATE TABLE failed_once (done INTEGER) ENGINE=MyISAM",
        "DROP PROCEDURE chatledger_append_committed_v2",
        module.APPEND_PROCEDURE.replace(
            row_then_commit,
            "    SELECT v_sequence AS sequence;\n"
            "    IF NOT EXISTS (SELECT 1 FROM failed_once) THEN\n"
            f"      INSERT INTO failed_once VALUES (1);\n      {statement};\n    END IF;\n"
            "    COMMIT;",
        ),
    )


@pytest.mark.requires("append_procedure")
@pytest.mark.parametrize("failure", ["connection lost", "interrupted"])
async def test_its_row_is_the_answer_only_once_its_commit_is(
    database: Database, tmp_path: Path, failure: str
) -> None:
    """Its row comes before its COMMIT: the connection lost, or the call interrupted,
    between the two left nothing committed. The row read is not the answer: the append
    is settled by its message id (not found), made again, and stored once."""
    statement = {"connection lost": "KILL CONNECTION_ID()", "interrupted": INTERRUPTED}[failure]
    async with fresh_database(database, tmp_path) as url:
        assert await upgrade_database(url) == head_revision()
        async with LedgerSessionStorage(url) as storage:
            assert await storage.append("uncommitted", "r", UserMessage(content="one")) == 1
            await _before_the_commit_once(url, statement)
            assert await storage.append("uncommitted", "r", UserMessage(content="two")) == 2
            assert storage.ledger.retries == 1
            assert await storage.append("uncommitted", "r", UserMessage(content="three")) == 3
            assert await _open_transactions(storage) == 0
            await gap_free(storage, "uncommitted", 3)


@pytest.mark.requires("append_procedure")
async def test_fields_compare_as_utf8mb4_in_a_column_of_another_character_set(
    database: Database, tmp_path: Path
) -> None:
    """A title column changed by hand to latin1: its bytes for 'Ã©' are UTF-8's for
    'é', yet the two titles differ, and the append given 'é' sets it."""
    async with fresh_database(database, tmp_path) as url:
        assert await upgrade_database(url) == head_revision()
        await execute(url, "ALTER TABLE agent_sessions MODIFY title VARCHAR(200) CHARACTER SET latin1 NULL")
        async with LedgerSessionStorage(url) as storage:
            assert await storage.append("latin1", "r", UserMessage(content="one"), title="Ã©") == 1
            assert await storage.append("latin1", "r", UserMessage(content="two"), title="é") == 2
            summary = await storage.get_session("latin1")
            assert summary is not None and summary.title == "é"


@pytest.mark.requires("append_procedure")
async def test_an_append_cancelled_after_its_commit_stands_once(database: Database, tmp_path: Path) -> None:
    """Cancelled while the call's closing status is awaited: the caller gets the
    cancellation, the connection is dropped rather than pooled with a reply unread, and
    the append, committed, is answered to its repeat with the stored sequence."""
    async with fresh_database(database, tmp_path) as url:
        assert await upgrade_database(url) == head_revision()
        async with LedgerSessionStorage(url) as storage:
            assert await storage.append("cancelled", "r", UserMessage(content="one")) == 1
            await _after_the_commit_once(url, "DO SLEEP(3)")
            message_id = str(uuid.uuid4())
            appending = asyncio.create_task(
                storage.append("cancelled", "r", UserMessage(content="two"), message_id=message_id)
            )
            await asyncio.sleep(1)  # committed at once; its closing status in 3 s
            appending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await appending
            assert storage.ledger.engine.pool.checkedout() == 0
            repeat = UserMessage(content="two")
            assert await storage.append("cancelled", "r", repeat, message_id=message_id) == 2
            assert await storage.append("cancelled", "r", UserMessage(content="three")) == 3
            await gap_free(storage, "cancelled", 3)


@pytest.mark.requires("append_procedure")
@pytest.mark.parametrize("change", ["dropped", "more parameters"])
async def test_a_procedure_changed_after_the_check_is_left_for_the_transaction(
    database: Database, tmp_path: Path, change: str
) -> None:
    async with fresh_database(database, tmp_path) as url:
        assert await upgrade_database(url) == head_revision()
        # No retry budget: the append the refusal met is made all the same.
        async with LedgerSessionStorage(url, retry_timeout=0) as storage:
            assert await storage.append("changed", "r", UserMessage(content="one")) == 1
            assert storage.ledger.single_append is not None
            await execute(url, "DROP PROCEDURE chatledger_append_committed_v2")
            if change == "more parameters":  # as a later revision's, under this name
                await execute(url, "CREATE PROCEDURE chatledger_append_committed_v2(IN a INTEGER) SELECT a")
            for sequence in (2, 3):
                assert await storage.append("changed", "r", UserMessage(content="more")) == sequence
            assert storage.ledger.single_append is None
            assert storage.ledger.retries == 0
            await gap_free(storage, "changed", 3)
