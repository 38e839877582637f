"""Revision 0002 (tombstones and generations) on every backend: it upgrades a
database holding data, its downgrade leaves what revision 0001's code expects, and
the revision file is frozen.
"""

from __future__ import annotations

import ast
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from rein import Session
from sqlalchemy import inspect, select
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import AsyncConnection
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import UserMessage

from chatledger.migrate import (
    alembic_config,
    downgrade_database,
    head_revision,
    run_on_connection,
    upgrade_database,
)
from chatledger.rein import LedgerSessionStore
from chatledger.schema import raw_messages_table, rein_sessions_table, sessions_table, snapshots_table
from chatledger.zett import LedgerSessionStorage, codec

from .conftest import Database
from .support.schema_helpers import drift, fresh_database, on_connection

pytestmark = pytest.mark.one_transaction_at_a_time

REVISION = "0002"
NEW_COLUMNS = {"agent_sessions": {"deleted_at", "base_sequence"}, "rein_sessions": {"write_id"}}


@pytest.fixture
async def fresh_url(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    """An empty, unmigrated database of the test's backend, dropped afterwards."""
    async with fresh_database(database, tmp_path) as url:
        yield url


def columns(connection: Connection) -> dict[str, set[str]]:
    inspector = inspect(connection)
    return {table: {column["name"] for column in inspector.get_columns(table)} for table in NEW_COLUMNS}


def check_constraints(connection: Connection) -> set[str | None]:
    return {check["name"] for check in inspect(connection).get_check_constraints("agent_sessions")}


async def rows(url: URL, table: Any, *order: Any) -> list[Any]:
    """Every row of ``table`` as stored, with only the columns revision 0001 has."""
    names = set(columns_of_0001[table.name])
    statement = select(*(column for column in table.c if column.name in names)).order_by(*order)
    return await on_connection(url, lambda conn: list(conn.execute(statement)))


columns_of_0001 = {
    table.name: [column.name for column in table.c if column.name not in NEW_COLUMNS.get(table.name, set())]
    for table in (sessions_table, raw_messages_table, snapshots_table, rein_sessions_table)
}


async def test_upgrade_keeps_live_data_as_it_was(fresh_url: URL, session_id: str) -> None:
    """Rows written at revision 0001 are live sessions of generation 0 after 0002."""
    assert await upgrade_database(fresh_url, "0001") == "0001"
    now = datetime.now(UTC)
    messages = [
        {
            **codec.raw_row(
                session_id=session_id,
                request_id="r",
                message=UserMessage(content=f"m{sequence}"),
                timing=None,
                metadata=None,
                tags=None,
                usage=None,
                now=now,
            ),
            "sequence": sequence,
        }
        for sequence in (1, 2, 3)
    ]
    session_json = Session(iteration=7).model_dump_json()

    def seed(connection: Connection) -> None:
        connection.execute(
            sessions_table.insert(),
            {
                "id": session_id,
                "title": "kept",
                "last_sequence": 3,
                "snapshot_version": 1,
                "compacted_through_sequence": 1,
                "fields_version": 2,
                "created_at": now,
                "updated_at": now,
            },
        )
        connection.execute(raw_messages_table.insert(), messages)
        connection.execute(
            snapshots_table.insert(),
            {
                "id": "checkpoint-1",
                "session_id": session_id,
                "version": 1,
                "compacted_through_sequence": 1,
                "message_json": codec.snapshot_json(CompactedMessage(content="m1")),
                "created_at": now,
                "updated_at": now,
            },
        )
        connection.execute(
            rein_sessions_table.insert(),
            {
                "id": session_id,
                "version": 4,
                "session_json": session_json,
                "created_at": now,
                "updated_at": now,
            },
        )

    await run_on_connection(fresh_url, seed)
    assert await upgrade_database(fresh_url) == head_revision()  # through 0002
    assert await on_connection(fresh_url, drift) == []

    async with LedgerSessionStorage(fresh_url) as storage:
        summary = await storage.get_session(session_id)
        assert summary is not None and (summary.title, summary.message_count) == ("kept", 3)
        view = await storage.load(session_id)
        assert view.snapshot is not None and view.snapshot.compacted_message == CompactedMessage(content="m1")
        assert [record.sequence for record in view.raw_tail] == [2, 3]
        assert await storage.get_fields_version(session_id) == 2

        async def stored(conn: AsyncConnection) -> Any:
            return (
                await conn.execute(
                    select(
                        sessions_table.c.deleted_at,
                        sessions_table.c.base_sequence,
                        rein_sessions_table.c.write_id,
                    )
                    .join(rein_sessions_table, rein_sessions_table.c.id == sessions_table.c.id)
                    .where(sessions_table.c.id == session_id)
                )
            ).one()

        assert tuple(await storage.ledger.read(stored)) == (None, 0, None)
        assert await storage.append(session_id, "r", UserMessage(content="m4")) == 4
    async with LedgerSessionStore(fresh_url) as store:
        assert await store.aload_versioned(session_id) == (Session(iteration=7), 4)
        await store.asave(session_id, Session(iteration=8), expected_version=4)
        assert await store.aload_versioned(session_id) == (Session(iteration=8), 5)


async def test_downgrade_drops_tombstones_and_renumbers_recreated_sessions(
    fresh_url: URL, session_id: str
) -> None:
    """After the downgrade the data is what revision 0001's code makes: a deleted
    session is no row, and every session's messages run 1..last_sequence."""
    await upgrade_database(fresh_url)
    deleted, recreated, plain = (f"{session_id}-{name}" for name in ("deleted", "recreated", "plain"))
    async with LedgerSessionStorage(fresh_url) as storage:
        for each in (deleted, recreated, plain):
            for number in (1, 2, 3):
                await storage.append(each, "r", UserMessage(content=f"{each} old {number}"))
        await storage.delete_session(deleted)
        await storage.delete_session(recreated)
        await storage.create_session(session_id=recreated, title="again")
        for number in (1, 2, 3):
            await storage.append(recreated, "r", UserMessage(content=f"new {number}"))
        await storage.snapshot(recreated, CompactedMessage(content="new 1"), 4, 0)
        before_plain = await storage.load(plain)
    async with LedgerSessionStore(fresh_url) as store:
        await store.asave(deleted, Session(iteration=1))
        await store.adelete(deleted)
        await store.asave(recreated, Session(iteration=1))
        await store.adelete(recreated)
        await store.asave(recreated, Session(iteration=2))

    # Revision 0004's rein write log holds the saves' entries: settle bookkeeping, dropped.
    assert await downgrade_database(fresh_url, "0003", drop_rows=True) == "0003"
    assert await downgrade_database(fresh_url, "0001") == "0001"
    assert await on_connection(fresh_url, columns) == {
        table: set(names) for table, names in columns_of_0001.items() if table in NEW_COLUMNS
    }
    assert "ck_agent_sessions_boundary_within_log" in await on_connection(fresh_url, check_constraints)

    sessions = {row.id: row for row in await rows(fresh_url, sessions_table, sessions_table.c.id)}
    assert deleted not in sessions
    assert (sessions[recreated].last_sequence, sessions[recreated].compacted_through_sequence) == (3, 1)
    assert (sessions[plain].last_sequence, sessions[plain].compacted_through_sequence) == (3, 0)
    messages = await rows(
        fresh_url, raw_messages_table, raw_messages_table.c.session_id, raw_messages_table.c.sequence
    )
    by_session: dict[str, list[tuple[int, str]]] = {}
    for message in messages:
        by_session.setdefault(message.session_id, []).append((message.sequence, message.content))
    assert by_session == {
        recreated: [(1, "new 1"), (2, "new 2"), (3, "new 3")],
        plain: [(number, f"{plain} old {number}") for number in (1, 2, 3)],
    }
    checkpoints = await rows(fresh_url, snapshots_table, snapshots_table.c.session_id)
    assert [(row.session_id, row.version, row.compacted_through_sequence) for row in checkpoints] == [
        (recreated, 1, 1)
    ]
    rein_rows = await rows(fresh_url, rein_sessions_table, rein_sessions_table.c.id)
    assert [(row.id, row.version) for row in rein_rows] == [(recreated, 3)]

    # And up again: the same data, now as generation 0 of each session.
    assert await upgrade_database(fresh_url) == head_revision()  # through 0002
    assert await on_connection(fresh_url, drift) == []
    assert "ck_agent_sessions_boundary_within_log" in await on_connection(fresh_url, check_constraints)
    async with LedgerSessionStorage(fresh_url) as storage:
        view = await storage.load(recreated)
        assert view.snapshot is not None and view.snapshot.compacted_through_sequence == 1
        assert [(record.sequence, record.message) for record in view.raw_tail] == [
            (2, UserMessage(content="new 2")),
            (3, UserMessage(content="new 3")),
        ]
        assert await storage.count_messages(recreated) == 3
        assert await storage.load(plain) == before_plain
        assert await storage.get_session(deleted) is None
        assert await storage.append(deleted, "r", UserMessage(content="a new session")) == 1


def test_revision_is_frozen_and_declares_its_compatibility() -> None:
    script = ScriptDirectory.from_config(alembic_config()).get_revision(REVISION)
    assert script is not None and script.module.compatible_from == REVISION
    source = Path(script.path).read_text(encoding="utf-8")
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    assert not {name for name in imported if name.split(".")[0] == "chatledger"}, imported
