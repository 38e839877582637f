"""Revision 0008's append procedure (MySQL/MariaDB): the append in one ``CALL``.

* Its parameters are the append's, in the order the code binds them.
* Code of revision 0007, which runs the counter upsert and the insert itself,
  appending concurrently with this code's ``CALL`` to the same sessions: every
  session's log runs 1, 2, 3... with its counter at the last.
* A refused append (another parent, a tombstone) through the procedure leaves the
  counter row as it was: its upsert rolls back with the transaction.
* A login without ``EXECUTE`` appends with the two statements, even one that sees the
  procedure (``CREATE ROUTINE``, ``ALTER ROUTINE``); one granted it, with the
  ``CALL``; one whose ``EXECUTE`` is revoked while it runs retries that append with
  the two statements, and keeps them.
* A procedure dropped after the ledger's schema check, or given other parameters: the
  append that finds it so is retried with the two statements, as every later one.
* A failure reported after the procedure's row, in the call's closing status (a Galera
  certification abort, a connection killed): the append is retried, once written.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.engine import URL
from zett_agent.messages import UserMessage

from chatledger import DatabaseError, SessionDeleted
from chatledger.dialects.appends import MESSAGE_COLUMNS, SESSION_BINDS
from chatledger.migrate import head_revision, upgrade_database
from chatledger.schema import sessions_table
from chatledger.tools.cli import run
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.appends import gap_free, mix_old_and_new, record_statements
from .support.facts import logins_of
from .support.schema_helpers import dsn_of, execute, fresh_database, revision_module

SESSIONS = 3
APPENDS = 12  # per writer and session


def test_the_procedure_takes_the_append_parameters_in_order() -> None:
    module = revision_module("0008")
    assert [name for name, _ in module.SESSION_PARAMETERS] == list(SESSION_BINDS)
    assert [name for name, _ in module.MESSAGE_PARAMETERS] == list(MESSAGE_COLUMNS)


@pytest.mark.requires("append_procedure")
async def test_old_and_new_appends_mixed_stay_gap_free(database: Database) -> None:
    async with LedgerSessionStorage(database.url) as new, LedgerSessionStorage(database.url) as old:
        # Code of revision 0007: the counter upsert, then the insert.
        ids = [f"mixed-{uuid.uuid4().hex[:8]}-{number}" for number in range(SESSIONS)]
        await mix_old_and_new(new, old, ids, APPENDS, titled=True)
    assert await run(["check", "--dsn", dsn_of(database.url)]) == 0


@pytest.mark.requires("append_procedure")
async def test_a_refused_append_leaves_the_counter_row_as_it_was(database: Database) -> None:
    parent, child, gone = (f"refused-{uuid.uuid4().hex[:8]}-{name}" for name in ("p", "c", "g"))
    async with LedgerSessionStorage(database.url) as storage:
        assert await storage.append(parent, "r", UserMessage(content="parent")) == 1
        assert await storage.append(child, "r", UserMessage(content="one"), parent_session_id=parent) == 1
        assert await storage.append(gone, "r", UserMessage(content="one"), title="kept") == 1
        assert storage.ledger.append_message is storage.ledger.backend.counted_append
        assert await storage.delete_session(gone) is True

        async def rows() -> list[Any]:
            async def read(conn: Any) -> list[Any]:
                return list(
                    (
                        await conn.execute(
                            select(sessions_table).where(sessions_table.c.id.in_([child, gone]))
                        )
                    ).all()
                )

            return await storage.ledger.read(read)

        before = await rows()
        with pytest.raises(ValueError, match="parent"):
            await storage.append(child, "r", UserMessage(content="x"), title="new", parent_session_id=None)
        with pytest.raises(SessionDeleted):
            await storage.append(gone, "r", UserMessage(content="x"), title="changed")
        assert await rows() == before
        await gap_free(storage, child, 1)


@pytest.mark.requires("append_procedure")
# Each but the first makes the procedure visible in information_schema.ROUTINES to a
# login that still may not call it.
@pytest.mark.parametrize("more", ["", ", CREATE ROUTINE", ", ALTER ROUTINE"])
async def test_a_login_without_execute_appends_with_two_statements(database: Database, more: str) -> None:
    assert database.server is not None
    logins = logins_of(database.backend)
    name, password = f"cl_noexec_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    on, login_name = f"ON `{database.url.database}`.*", f"'{name}'@'%'"
    await database.server.execute(logins.create.format(name=name, password=password))
    try:
        await database.server.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE{more} {on} TO {login_name}")
        login = database.url.set(username=name, password=password)
        session = f"noexec-{uuid.uuid4().hex[:8]}"
        async with LedgerSessionStorage(login) as storage:
            await storage.ledger.ensure_ready()
            sent = record_statements(storage)
            assert await storage.append(session, "r", UserMessage(content="one")) == 1
            assert storage.ledger.append_message is storage.ledger.backend.append_message
            assert sent and not [statement for statement in sent if statement.startswith("CALL")]
        await database.server.execute(f"GRANT EXECUTE {on} TO {login_name}")
        async with LedgerSessionStorage(login) as storage:
            assert await storage.append(session, "r", UserMessage(content="two")) == 2
            assert storage.ledger.append_message is storage.ledger.backend.counted_append
            # EXECUTE revoked under the running ledger: the CALL refused (nothing ran),
            # the append is retried with the two statements, as every later one.
            await database.server.execute(f"REVOKE EXECUTE {on} FROM {login_name}")
            # A database-level grant changes for a connection at its next USE: new ones.
            await storage.ledger.engine.dispose()
            assert await storage.append(session, "r", UserMessage(content="three")) == 3
            assert storage.ledger.append_message is storage.ledger.backend.append_message
            assert storage.ledger.retries == 0  # made again at once, outside the budget
            assert await storage.append(session, "r", UserMessage(content="four")) == 4
            await gap_free(storage, session, 4)
    finally:
        await database.server.execute(logins.drop.format(name=name))


@pytest.mark.requires("append_procedure")
@pytest.mark.parametrize("change", ["dropped", "more parameters"])
async def test_a_procedure_changed_after_the_check_is_left_for_two_statements(
    database: Database, tmp_path: Path, change: str
) -> None:
    async with fresh_database(database, tmp_path) as url:
        assert await upgrade_database(url) == head_revision()
        await _without_the_committed_append(url)
        # No retry budget: the append the refusal met is made again all the same.
        async with LedgerSessionStorage(url, retry_timeout=0) as storage:
            assert await storage.append("changed", "r", UserMessage(content="one")) == 1
            assert storage.ledger.append_message is storage.ledger.backend.counted_append
            await execute(url, "DROP PROCEDURE chatledger_append")
            if change == "more parameters":  # as a later revision's, under this name
                await execute(url, "CREATE PROCEDURE chatledger_append(IN a INTEGER, IN b INTEGER) SELECT a")
            for sequence in (2, 3):
                assert await storage.append("changed", "r", UserMessage(content="more")) == sequence
            assert storage.ledger.append_message is storage.ledger.backend.append_message
            assert storage.ledger.retries == 0
            await gap_free(storage, "changed", 3)


@pytest.mark.requires("append_procedure")
async def test_a_refusal_of_another_routine_is_no_refusal_of_the_procedure(
    database: Database, tmp_path: Path
) -> None:
    """1305 from a routine the procedure calls (here a trigger's, made by an operator)
    is that statement's error: the call fails at once, as any refusal does, and the
    ledger keeps the procedure."""
    async with fresh_database(database, tmp_path) as url:
        assert await upgrade_database(url) == head_revision()
        async with LedgerSessionStorage(url) as storage:
            assert await storage.append("other", "r", UserMessage(content="one")) == 1
            await execute(
                url,
                "CREATE PROCEDURE audit_gone() SELECT 1",
                "CREATE TRIGGER audit AFTER INSERT ON raw_messages FOR EACH ROW CALL audit_gone()",
                "DROP PROCEDURE audit_gone",
            )
            with pytest.raises(DatabaseError, match="audit_gone"):
                await storage.append("other", "r", UserMessage(content="two"))
            assert storage.ledger.retries == 0
            assert storage.ledger.append_message is storage.ledger.backend.counted_append
            await execute(url, "DROP TRIGGER audit")
            assert await storage.append("other", "r", UserMessage(content="two")) == 2
            await gap_free(storage, "other", 2)


#: What fails an append once, after the procedure has sent its row: what Galera reports
#: for a transaction its certification aborted, and the server ending the connection.
AFTER_THE_ROW = {
    "certification": "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'aborted (test)'",
    "killed": "KILL CONNECTION_ID()",
}


async def _without_the_committed_append(url: URL) -> None:
    """Every append through revision 0008's procedure: revision 0010's, which makes the
    append to a session it only moves along, dropped before any ledger checks for it."""
    await execute(url, "DROP PROCEDURE chatledger_append_committed_v2")


async def _after_the_row_once(url: URL, statement: str) -> None:
    """Put the real procedure under another name, behind one that calls it and then,
    on the first append only, runs ``statement``: after the row, before the call's
    closing status. The flag table is MyISAM, so a rollback keeps its row."""
    module = revision_module("0008")
    names = ", ".join(
        [f"s_{name}" for name, _ in module.SESSION_PARAMETERS]
        + [f"m_{name}" for name, _ in module.MESSAGE_PARAMETERS]
    )
    await execute(
        url,
        "CREATE TABLE failed_once (done INTEGER) ENGINE=MyISAM",
        module.APPEND_PROCEDURE.replace("chatledger_append(", "chatledger_append_real(", 1),
        "DROP PROCEDURE chatledger_append",
        f"""CREATE PROCEDURE chatledger_append({module._parameters()})
        BEGIN
          CALL chatledger_append_real({names});
          IF s_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM failed_once) THEN
            INSERT INTO failed_once VALUES (1);
            {statement};
          END IF;
        END""",
    )


@pytest.mark.requires("append_procedure")
@pytest.mark.parametrize("failure", sorted(AFTER_THE_ROW))
async def test_a_failure_after_the_procedure_row_is_retried(
    database: Database, tmp_path: Path, failure: str
) -> None:
    async with fresh_database(database, tmp_path) as url:
        assert await upgrade_database(url) == head_revision()
        await _after_the_row_once(url, AFTER_THE_ROW[failure])
        async with LedgerSessionStorage(url) as storage:
            assert await storage.append("after", "r", UserMessage(content="one")) == 1
            assert storage.ledger.append_message is storage.ledger.backend.counted_append
            assert storage.ledger.retries == 1
            assert await storage.append("after", "r", UserMessage(content="two")) == 2
            await gap_free(storage, "after", 2)


@pytest.mark.requires("append_procedure")
async def test_an_append_cancelled_after_the_procedure_row_is_cancelled(
    database: Database, tmp_path: Path
) -> None:
    """Cancelled while the call's closing status is awaited: the caller gets the
    cancellation (not a database error), the connection is dropped rather than pooled
    with a reply unread, and the server rolls the append back."""
    async with fresh_database(database, tmp_path) as url:
        assert await upgrade_database(url) == head_revision()
        await _without_the_committed_append(url)
        async with LedgerSessionStorage(url) as storage:
            assert await storage.append("cancelled", "r", UserMessage(content="one")) == 1
            await _after_the_row_once(url, "DO SLEEP(3)")
            appending = asyncio.create_task(storage.append("cancelled", "r", UserMessage(content="gone")))
            await asyncio.sleep(1)  # the row came back at once; its closing status in 3 s
            appending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await appending
            assert storage.ledger.engine.pool.checkedout() == 0
            assert await storage.append("cancelled", "r", UserMessage(content="two")) == 2
            await gap_free(storage, "cancelled", 2)
