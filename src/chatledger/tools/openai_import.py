"""Moving in from the OpenAI Agents SDK's own SQL store: ``chatledger import --openai-sdk``.

The SDK's ``SQLAlchemySession`` and ``SQLiteSession`` keep a session table
(``session_id``) and a message table (``id``, ``session_id``, ``message_data`` as
JSON text, ``created_at``), named ``agent_sessions`` and ``agent_messages`` by
default. ``agent_sessions`` is also chatledger's own table (zett's sessions), so the
SDK's tables are read from a database of their own (the source DSN), never from the
target, and their columns are checked first: a source whose ``agent_sessions`` has
chatledger's counter columns is refused, whatever it is called.

Each session goes into ``openai_sessions`` / ``openai_items`` as one ``add_items``:
one transaction, its items in the SDK's own order (``created_at``, then ``id``). A
session the target already has is compared, not written: identical ones are skipped,
differing ones counted and left alone, so a re-run imports only what is missing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Column, Integer, MetaData, Table, Text, inspect, select
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from ..dsn import display, resolve_dsn
from ..engine import Ledger
from ..errors import ConfigurationError

#: The SDK's message columns this import reads.
MESSAGE_COLUMNS = frozenset({"id", "session_id", "message_data", "created_at"})
#: Columns of chatledger's own ``agent_sessions``: a source with them is not the SDK's.
LEDGER_COLUMNS = frozenset({"last_sequence", "base_sequence", "snapshot_version"})


@dataclass
class OpenAIImportReport:
    """What an import of the SDK's tables did (or, ``dry_run``, would do)."""

    #: Sessions imported (or to import).
    imported: int = 0
    #: Their items.
    items: int = 0
    #: Sessions the target has already, identical: skipped.
    identical: int = 0
    #: Sessions the target has already with other items: left alone.
    differing: int = 0
    #: Source rows whose ``message_data`` is not JSON (the SDK skips them too).
    corrupt: int = 0
    dry_run: bool = False

    @property
    def clean(self) -> bool:
        return self.differing == 0


def _check_tables(conn: Connection, sessions: str, messages: str) -> None:
    found = inspect(conn)
    names = set(found.get_table_names())
    if messages not in names:
        raise ConfigurationError(
            f"the source has no table {messages!r}: name the OpenAI SDK's message table "
            "(SQLAlchemySession's messages_table, SQLiteSession's messages_table)"
        )
    columns = {column["name"] for column in found.get_columns(messages)}
    if not columns >= MESSAGE_COLUMNS:
        raise ConfigurationError(
            f"table {messages!r} of the source lacks {sorted(MESSAGE_COLUMNS - columns)}: it is not "
            "the OpenAI SDK's message table"
        )
    if sessions in names:
        session_columns = {column["name"] for column in found.get_columns(sessions)}
        if session_columns & LEDGER_COLUMNS or "session_id" not in session_columns:
            raise ConfigurationError(
                f"table {sessions!r} of the source is chatledger's own {sessions} (zett's sessions), not "
                "the OpenAI SDK's: give the DSN of the database the SDK wrote"
            )


async def import_openai_sdk(
    source: str | URL,
    target: str | URL | None,
    *,
    sessions_table: str = "agent_sessions",
    messages_table: str = "agent_messages",
    dry_run: bool = False,
) -> OpenAIImportReport:
    """Import every session of the OpenAI SDK's tables at ``source`` into ``target``.

    Raises:
        ValueError: ``source`` and ``target`` are the same database.
        ConfigurationError: the source's tables are not the SDK's (missing, lacking
            columns, or chatledger's own ``agent_sessions``); nothing is written.
    """
    from ..openai_agents import LedgerSession

    source_url, target_url = resolve_dsn(source), resolve_dsn(target)
    if source_url.render_as_string(hide_password=False) == target_url.render_as_string(hide_password=False):
        raise ValueError(
            f"the source {display(source_url)} is the target: read the SDK's tables from the database "
            "it wrote, and import into chatledger's (agent_sessions is a table of both)"
        )
    report = OpenAIImportReport(dry_run=dry_run)
    messages = Table(
        messages_table,
        MetaData(),
        Column("id", Integer),
        Column("session_id", Text),
        Column("message_data", Text),
        Column("created_at", Text),
    )
    reader = create_async_engine(source_url, poolclass=NullPool)
    ledger = Ledger(target_url)
    try:
        async with reader.connect() as conn:
            await conn.run_sync(_check_tables, sessions_table, messages_table)
            ids = list(
                await conn.scalars(select(messages.c.session_id).distinct().order_by(messages.c.session_id))
            )
        for session_id in ids:
            async with reader.connect() as conn:
                rows = await conn.execute(
                    select(messages.c.message_data)
                    .where(messages.c.session_id == session_id)
                    .order_by(messages.c.created_at, messages.c.id)
                )
                items: list[Any] = []
                for (data,) in rows:
                    try:
                        items.append(json.loads(data))
                    except (TypeError, ValueError):
                        report.corrupt += 1
            session = LedgerSession(str(session_id), ledger=ledger)
            existing = await session.get_items()
            if existing:
                if existing == items:
                    report.identical += 1
                else:
                    report.differing += 1
                continue
            if not dry_run:
                await session.add_items(items)
            report.imported += 1
            report.items += len(items)
    finally:
        await reader.dispose()
        await ledger.close()
    return report
