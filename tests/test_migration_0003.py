"""Revision 0003 (byte-exact ids) on every backend: a database at 0002 holding rows
upgrades with every row intact and byte-exact, ids that differ only by a trailing
space are two ids afterwards, and the downgrade gives back 0002's schema (refusing,
on MySQL/MariaDB, ids that 0002's PAD SPACE column would hold equal).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from rein import Session
from sqlalchemy import Table, select, text
from sqlalchemy.engine import URL, Connection
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import UserMessage

from chatledger.migrate import (
    alembic_config,
    database_revision,
    downgrade_database,
    head_revision,
    run_on_connection,
    upgrade_database,
)
from chatledger.rein import LedgerSessionStore
from chatledger.schema import raw_messages_table, rein_sessions_table, sessions_table, snapshots_table
from chatledger.zett import LedgerSessionStorage, codec

from .conftest import Database
from .support.facts import facts_of
from .support.schema_helpers import catalog, drift, execute, fresh_database, on_connection

pytestmark = pytest.mark.one_transaction_at_a_time

REVISION = "0003"
TABLES = (sessions_table, raw_messages_table, snapshots_table, rein_sessions_table)
NOW = datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=UTC)
#: Session ids 0002's columns keep apart on every backend (utf8mb4_bin is case-sensitive),
#: with trailing spaces, multi-byte and astral characters.
SESSIONS = ("Ab", "aB", "ü😀 ", "界 x")
#: The ids of the converted columns: raw message ids, checkpoint ids, rein write ids.
MESSAGE_IDS = {"Ab": ("m-Ab", "M-aB "), "aB": ("m-aB",), "ü😀 ": ("😀 ", "é"), "界 x": ("界", "0" * 36)}
WRITE_IDS = {"Ab": "w ", "aB": "W", "ü😀 ": None, "界 x": "ß" * 36}


@pytest.fixture
async def fresh_url(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    async with fresh_database(database, tmp_path) as url:
        yield url


def seed(connection: Connection) -> None:
    """Consistent rows, as chatledger at revision 0002 writes them."""
    for session_id in SESSIONS:
        ids = MESSAGE_IDS[session_id]
        connection.execute(
            sessions_table.insert(),
            {
                "id": session_id,
                "title": f"title of {session_id}",
                "last_sequence": len(ids),
                "snapshot_version": 1,
                "compacted_through_sequence": 1,
                "created_at": NOW,
                "updated_at": NOW,
            },
        )
        connection.execute(
            raw_messages_table.insert(),
            [
                {
                    **codec.raw_row(
                        session_id=session_id,
                        request_id=f"r {message_id}",
                        message=UserMessage(content=message_id),
                        timing=None,
                        metadata=None,
                        tags=None,
                        usage=None,
                        now=NOW,
                    ),
                    "id": message_id,
                    "sequence": sequence,
                }
                for sequence, message_id in enumerate(ids, start=1)
            ],
        )
        connection.execute(
            snapshots_table.insert(),
            {
                "id": f"cp {session_id}",
                "session_id": session_id,
                "version": 1,
                "compacted_through_sequence": 1,
                "message_json": codec.snapshot_json(CompactedMessage(content=session_id)),
                "created_at": NOW,
                "updated_at": NOW,
            },
        )
        connection.execute(
            rein_sessions_table.insert(),
            {
                "id": session_id,
                "version": 3,
                "session_json": Session(iteration=3).model_dump_json(),
                "write_id": WRITE_IDS[session_id],
                "created_at": NOW,
                "updated_at": NOW,
            },
        )


def every_row(connection: Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, every column (sorted here: the collation of the
    database's ORDER BY is one of the things the revision changes)."""
    return {
        table.name: sorted((tuple(row) for row in connection.execute(select(table))), key=repr)
        for table in TABLES
    }


def ids_of(rows: dict[str, list[tuple[Any, ...]]], table: Table, column: str) -> list[Any]:
    position = list(table.c.keys()).index(column)
    return sorted((row[position] for row in rows[table.name]), key=repr)


async def test_upgrade_keeps_every_row_byte_exact(database: Database, fresh_url: URL) -> None:
    assert await upgrade_database(fresh_url, "0002") == "0002"
    await run_on_connection(fresh_url, seed)
    before = await on_connection(fresh_url, every_row)

    assert await upgrade_database(fresh_url) == head_revision()
    assert await on_connection(fresh_url, drift) == []
    after = await on_connection(fresh_url, every_row)
    assert after == before
    # The same str values, as seeded: so the same UTF-8 bytes, trailing spaces included.
    assert ids_of(after, raw_messages_table, "id") == sorted(
        (message_id for ids in MESSAGE_IDS.values() for message_id in ids), key=repr
    )
    assert ids_of(after, rein_sessions_table, "write_id") == sorted(WRITE_IDS.values(), key=repr)
    assert ids_of(after, snapshots_table, "id") == sorted((f"cp {s}" for s in SESSIONS), key=repr)

    if facts_of(database.backend).pad_space_ids_at_0002:  # MySQL/MariaDB: VARBINARY now

        def types(connection: Connection) -> set[tuple[Any, ...]]:
            query = text(
                "SELECT TABLE_NAME, COLUMN_NAME, DATA_TYPE, CHARACTER_OCTET_LENGTH FROM "
                "information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND "
                "(COLUMN_NAME = 'id' OR COLUMN_NAME LIKE '%\\_id')"
            )
            return {tuple(row) for row in connection.execute(query)}

        found = await on_connection(fresh_url, types)
        assert {row[2] for row in found} == {"varbinary"}, found
        assert {(row[0], row[1], row[3]) for row in found if row[3] == 144} == {
            ("raw_messages", "id", 144),
            ("session_snapshots", "id", 144),
            ("rein_sessions", "write_id", 144),
            ("rein_writes", "write_id", 144),  # revision 0004's, created so
            ("openai_items", "item_id", 144),  # revision 0006's, created so
            ("langgraph_checkpoints", "write_id", 144),  # revision 0011's, created so
            ("langgraph_writes", "write_id", 144),
        }

    async with LedgerSessionStorage(fresh_url) as storage:
        for session_id in SESSIONS:
            records = await storage.list_raw_messages(session_id)
            assert [record.id for record in records] == list(MESSAGE_IDS[session_id])
            view = await storage.load(session_id)
            assert view.snapshot is not None and view.snapshot.compacted_message == CompactedMessage(
                content=session_id
            )
        # What 0002's PAD SPACE column on MySQL/MariaDB took for "m-Ab" is another message now.
        assert await storage.append("Ab", "r", UserMessage(content="new"), message_id="m-Ab ") == 3
        assert [record.id for record in await storage.list_raw_messages("Ab")] == ["m-Ab", "M-aB ", "m-Ab "]
    async with LedgerSessionStore(fresh_url) as store:
        for session_id in SESSIONS:
            assert await store.aload_versioned(session_id) == (Session(iteration=3), 3)
        await store.asave("Ab", Session(iteration=4), expected_version=3)
        assert await store.aload_versioned("Ab") == (Session(iteration=4), 4)


@pytest.mark.requires("ddl_commits_each_statement")
async def test_an_upgrade_stopped_halfway_on_mysql_continues(database: Database, fresh_url: URL) -> None:
    """MySQL/MariaDB commit each ALTER on its own: after the first one, with the
    revision still 0002, running the upgrade again finishes it, rows intact."""
    assert await upgrade_database(fresh_url, "0002") == "0002"
    await run_on_connection(fresh_url, seed)
    before = await on_connection(fresh_url, every_row)
    await execute(fresh_url, "ALTER TABLE raw_messages MODIFY id VARBINARY(144) NOT NULL")
    assert await database_revision(fresh_url) == "0002"
    assert await upgrade_database(fresh_url) == head_revision()
    assert await on_connection(fresh_url, drift) == []
    assert await on_connection(fresh_url, every_row) == before


async def test_downgrade_gives_back_the_schema_of_0002(database: Database, tmp_path: Path) -> None:
    async with fresh_database(database, tmp_path, "reference") as reference:
        assert await upgrade_database(reference, "0002") == "0002"
        expected = await on_connection(reference, catalog)
    async with fresh_database(database, tmp_path, "downgraded") as url:
        assert await upgrade_database(url) == head_revision()
        await run_on_connection(url, seed)
        before = await on_connection(url, every_row)
        assert await downgrade_database(url, "0002") == "0002"
        assert await on_connection(url, catalog) == expected
        assert await on_connection(url, every_row) == before
        assert await upgrade_database(url) == head_revision()
        assert await on_connection(url, every_row) == before


async def test_downgrade_refuses_ids_that_0002_holds_equal(database: Database, fresh_url: URL) -> None:
    """On MySQL/MariaDB, 0002's column would hold "m1" and "m1 " equal: the downgrade
    refuses and changes nothing. Elsewhere 0002's columns are byte-exact already.
    From 0003 itself: on MySQL/MariaDB a later revision's downgrade step would commit on
    its own before 0003's refusal."""
    assert await upgrade_database(fresh_url) == head_revision()
    async with LedgerSessionStorage(fresh_url) as storage:
        await storage.append("s", "r", UserMessage(content="one"), message_id="m1")
        await storage.append("s", "r", UserMessage(content="two"), message_id="m1 ")
    assert await downgrade_database(fresh_url, REVISION) == REVISION
    before = await on_connection(fresh_url, every_row)
    if facts_of(database.backend).pad_space_ids_at_0002:
        with pytest.raises(
            CommandError, match=r"raw_messages\.id holds ids that differ only by trailing spaces"
        ):
            await downgrade_database(fresh_url, "0002")
        assert await database_revision(fresh_url) == REVISION
    else:
        assert await downgrade_database(fresh_url, "0002") == "0002"
    assert await on_connection(fresh_url, every_row) == before


def test_revision_is_frozen_and_a_contract() -> None:
    script = ScriptDirectory.from_config(alembic_config()).get_revision(REVISION)
    assert script is not None and script.down_revision == "0002"
    # Code of 0002 would read these columns as bytes on MySQL/MariaDB.
    assert script.module.compatible_from == REVISION
