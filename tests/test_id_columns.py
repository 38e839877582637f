"""Every identifier compares byte for byte, on every backend (issue 17, fault 1).

MySQL/MariaDB's ``utf8mb4_bin`` is a PAD SPACE collation (``'m1' = 'm1 '``), and their
default collations fold case too; PostgreSQL's deterministic collations and SQLite's
``BINARY`` compare exactly. Every id column of the schema is :class:`chatledger.types.Id`,
``VARBINARY`` on MySQL, so that ``x``, ``x `` and ``X`` are three different ids.

The walk reads the columns from the metadata, so a new id column is covered by
itself: written through the public API where one writes it, at the column level
otherwise.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rein import Session
from sqlalchemy import Column, Float, Integer, String, Table, Text, func, select
from sqlalchemy.engine import URL, Connection
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import UserMessage

from chatledger import validate
from chatledger.migrate import upgrade_database
from chatledger.rein import LedgerSessionStore
from chatledger.schema import metadata, raw_messages_table
from chatledger.types import Id, LongBlob, UTCDateTime
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.schema_helpers import fresh_database, on_connection

pytestmark = pytest.mark.one_transaction_at_a_time

#: The three ids that must stay three: as given, with a trailing space, in upper case.
VARIANTS = ("x", "x ", "X")

#: String columns that are text for people, not identifiers: compared by no rule of the
#: ledger. Any other string column must be an :class:`Id`.
DISPLAY_TEXT = {("agent_sessions", "title"), ("agent_sessions", "agent_name"), ("raw_messages", "tool_name")}

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def is_id(column: Column[Any]) -> bool:
    """Named like an id, or typed as one."""
    return column.name == "id" or column.name.endswith("_id") or isinstance(column.type, Id)


def id_columns() -> list[Column[Any]]:
    return [column for table in metadata.sorted_tables for column in table.c if is_id(column)]


def test_every_id_column_is_an_id() -> None:
    """Every column named like an id, and every string column that is not display text,
    has the one identifier type; so a new id column cannot be a plain string."""
    for table in metadata.sorted_tables:
        for column in table.c:
            a_string = isinstance(column.type, String | Id) and not isinstance(column.type, Text)
            if is_id(column) or (a_string and (table.name, column.name) not in DISPLAY_TEXT):
                assert isinstance(column.type, Id), (
                    f"{table.name}.{column.name} is {column.type!r}, not an Id"
                )
    found = {f"{column.table.name}.{column.name}" for column in id_columns()}
    assert found >= {*PUBLIC_WRITERS, "session_snapshots.id", "rein_sessions.write_id"}


def test_id_lengths_agree_with_validation() -> None:
    """The caller-given message id is validated to the column's length, and the other
    caller-given ids to theirs."""
    lengths = {f"{column.table.name}.{column.name}": column.type.length for column in id_columns()}
    assert lengths["raw_messages.id"] == validate.MAX_MESSAGE_ID_LENGTH == 36
    for name in ("agent_sessions.id", "agent_sessions.parent_session_id", "raw_messages.request_id"):
        assert lengths[name] == validate.MAX_ID_LENGTH == 255


@pytest.fixture
async def fresh_url(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    """A migrated database of the test's backend of its own: the column-level rows need
    not keep the ledger's invariants, and no other test sees them."""
    async with fresh_database(database, tmp_path) as url:
        await upgrade_database(url)
        yield url


def stem(column: Column[Any]) -> str:
    """A prefix of the column's own, so that the columns' variants do not meet."""
    return f"{column.table.name[:3]}.{column.name}/"


Writer = Callable[[LedgerSessionStorage, LedgerSessionStore, str, int], Awaitable[None]]


async def _session_id(storage: LedgerSessionStorage, store: LedgerSessionStore, value: str, n: int) -> None:
    summary = await storage.create_session(session_id=value, title=f"title {n}")
    assert (summary.session_id, summary.title) == (value, f"title {n}")


async def _parent_session_id(
    storage: LedgerSessionStorage, store: LedgerSessionStore, value: str, n: int
) -> None:
    child = f"child of {value!r}"
    await storage.create_session(session_id=child, parent_session_id=value)
    summary = await storage.get_session(child)
    assert summary is not None and summary.parent_session_id == value


async def _message_id(storage: LedgerSessionStorage, store: LedgerSessionStore, value: str, n: int) -> None:
    session = "messages with ids"
    assert await storage.append(session, "r", UserMessage(content=value), message_id=value) == n + 1
    records = await storage.list_raw_messages(session)
    assert [(record.id, record.message.content) for record in records][-1] == (value, value)


async def _raw_session_id(
    storage: LedgerSessionStorage, store: LedgerSessionStore, value: str, n: int
) -> None:
    assert await storage.append(value, "r", UserMessage(content=value)) == 1
    [record] = await storage.list_raw_messages(value)
    assert (record.session_id, record.message.content) == (value, value)


async def _request_id(storage: LedgerSessionStorage, store: LedgerSessionStore, value: str, n: int) -> None:
    session = "requests"
    assert await storage.append(session, value, UserMessage(content=value)) == n + 1
    records = await storage.list_raw_messages(session)
    assert records[-1].request_id == value


async def _snapshot_session_id(
    storage: LedgerSessionStorage, store: LedgerSessionStore, value: str, n: int
) -> None:
    await storage.append(value, "r", UserMessage(content=value))
    await storage.snapshot(value, CompactedMessage(content=value), 1, 0)
    view = await storage.load(value)
    assert view.snapshot is not None and view.snapshot.compacted_message == CompactedMessage(content=value)


async def _rein_id(storage: LedgerSessionStorage, store: LedgerSessionStore, value: str, n: int) -> None:
    await store.asave(value, Session(iteration=n))
    assert await store.aload_versioned(value) == (Session(iteration=n), 1)


#: The public calls that write a caller-given id; the other id columns (ids chatledger
#: makes itself) are written at the column level.
PUBLIC_WRITERS: dict[str, Writer] = {
    "agent_sessions.id": _session_id,
    "agent_sessions.parent_session_id": _parent_session_id,
    "raw_messages.id": _message_id,
    "raw_messages.session_id": _raw_session_id,
    "raw_messages.request_id": _request_id,
    "session_snapshots.session_id": _snapshot_session_id,
    "rein_sessions.id": _rein_id,
}


def filler(table: Table, column: Column[Any], value: str, n: int) -> dict[str, Any]:
    """A row of ``table`` with ``value`` in ``column`` and every other required column
    filled with values unique to ``n``."""
    row: dict[str, Any] = {}
    for each in table.c:
        if each is column:
            row[each.name] = value
        elif is_id(each):
            row[each.name] = f"fill {column.name} {n}"
        elif each.nullable or each.server_default is not None:
            continue
        elif isinstance(each.type, UTCDateTime):
            row[each.name] = NOW
        elif isinstance(each.type, Integer):
            row[each.name] = n + 1
        elif isinstance(each.type, Float):  # ADK's event timestamps
            row[each.name] = n + 0.5
        elif isinstance(each.type, String):  # LongText among them
            row[each.name] = "{}"
        elif isinstance(each.type, LongBlob):  # LangGraph's serialized values
            row[each.name] = b"{}"
        else:  # pragma: no cover - a new column type: say how to fill it
            raise AssertionError(f"no filler for {table.name}.{each.name} ({each.type!r})")
    return row


def inserting(table: Table, row: dict[str, Any]) -> Callable[[Connection], None]:
    def insert(connection: Connection) -> None:
        connection.execute(table.insert(), row)

    return insert


def stored(column: Column[Any], value: str) -> Callable[[Connection], list[str]]:
    def read(connection: Connection) -> list[str]:
        return list(connection.scalars(select(column).where(column == value)))

    return read


def distinct(column: Column[Any], values: list[str]) -> Callable[[Connection], int]:
    def count(connection: Connection) -> int:
        statement = select(func.count(column.distinct())).where(column.in_(values))
        return int(connection.scalar(statement) or 0)

    return count


async def test_x_x_space_and_capital_x_are_three_ids_in_every_id_column(fresh_url: URL) -> None:
    async with LedgerSessionStorage(fresh_url) as storage, LedgerSessionStore(fresh_url) as store:
        for column in id_columns():
            name = f"{column.table.name}.{column.name}"
            values = [stem(column) + variant for variant in VARIANTS]
            writer = PUBLIC_WRITERS.get(name)
            for n, value in enumerate(values):
                if writer is not None:
                    await writer(storage, store, value, n)
                else:
                    row = filler(column.table, column, value, n)
                    await on_connection(fresh_url, inserting(column.table, row))
            for value in values:
                # Exactly the row written with this id, read back byte for byte.
                assert await on_connection(fresh_url, stored(column, value)) == [value], (name, value)
            assert await on_connection(fresh_url, distinct(column, values)) == 3, name


async def test_message_id_with_a_trailing_space_is_another_message(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    """The issue's reproduction: on MySQL/MariaDB (PAD SPACE) the second append clashed
    with the first, was taken for "already written", returned 1 and stored nothing."""
    assert await storage.append(session_id, "r", UserMessage(content="one"), message_id="m1") == 1
    assert await storage.append(session_id, "r", UserMessage(content="two"), message_id="m1 ") == 2
    assert await storage.count_messages(session_id) == 2
    records = await storage.list_raw_messages(session_id)
    assert [(record.id, record.message.content) for record in records] == [("m1", "one"), ("m1 ", "two")]
    # And a repeat of either is still recognised as that one message.
    assert await storage.append(session_id, "r", UserMessage(content="two"), message_id="m1 ") == 2
    assert await storage.count_messages(session_id) == 2


async def test_message_ids_reach_the_raw_column_as_given(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    for n, message_id in enumerate((f"{session_id[-8:]}X", f"{session_id[-8:]}x", f"{session_id[-8:]}x ")):
        assert (
            await storage.append(session_id, "r", UserMessage(content=str(n)), message_id=message_id) == n + 1
        )

    async def ids(conn: Any) -> list[str]:
        query = select(raw_messages_table.c.id).where(raw_messages_table.c.session_id == session_id)
        return list(await conn.scalars(query.order_by(raw_messages_table.c.sequence)))

    assert await storage.ledger.read(ids) == [
        f"{session_id[-8:]}X",
        f"{session_id[-8:]}x",
        f"{session_id[-8:]}x ",
    ]
