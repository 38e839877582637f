"""Moving in from the OpenAI Agents SDK's own SQL store: ``chatledger import --openai-sdk``.

The SDK's ``SQLAlchemySession`` and ``SQLiteSession`` keep a session table
(``session_id``) and a message table (``id``, ``session_id``, ``message_data`` as
JSON text, ``created_at``), named ``agent_sessions`` and ``agent_messages`` by
default. ``agent_sessions`` is also chatledger's own table (zett's sessions), so the
SDK's tables are read from a database of their own (the source DSN), never from the
target, and their columns are checked first: a source whose ``agent_sessions`` has
chatledger's counter columns is refused, whatever it is called.

Each session becomes the records of an export (an ``openai_session`` block: the
counter row and its items, exactly the rows ``LedgerSession.add_items`` would have
written) and goes through the import of :mod:`chatledger.tools.importer`: one
transaction a session, a session the target has already compared, never
overwritten (identical: skipped; differing, or added to by a live writer first:
left alone), a purged id's high-water mark respected. Items keep the SDK's order
(``created_at``, then ``id``), numbered 1..n. Times are the SDK's (an item's
``created_at``; the session's are its session row's ``created_at`` and ``updated_at``,
the last activity a user sees, or without that row its first and last item's) and each item's id is
derived from the SDK's row id, so a re-run yields the same rows and finds them
identical.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Column, Integer, MetaData, Table, Text, inspect, select
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool

from .. import validate
from ..dsn import display, resolve_dsn
from ..engine import Ledger
from ..errors import ConfigurationError
from .importer import Importer, ImportReport
from .logs import OPENAI
from .moving_in import endpoints, header, ready_for_dry_run, target_ledger
from .rows import FRAMEWORK_TABLES, Record, RowCodec

#: The SDK's message columns this import reads.
MESSAGE_COLUMNS = frozenset({"id", "session_id", "message_data", "created_at"})
#: Columns of chatledger's own ``agent_sessions``: a source with them is not the SDK's.
LEDGER_COLUMNS = frozenset({"last_sequence", "base_sequence", "snapshot_version"})
#: An item's time when the SDK's ``created_at`` is unreadable and none came before it.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class OpenAIImportReport:
    """What an import of the SDK's tables did (or, ``dry_run``, would do)."""

    #: Sessions imported (dry run: absent from the target, to import).
    imported: int = 0
    #: Their items.
    items: int = 0
    #: Sessions the target has already, identical: skipped (dry run: the sessions it
    #: has, compared only by the import itself).
    identical: int = 0
    #: Sessions the target has already with other rows: left alone.
    differing: int = 0
    #: Source rows whose ``message_data`` is not JSON (the SDK skips them too), or not
    #: an item chatledger stores (a JSON object): skipped.
    corrupt: int = 0
    #: Sessions refused by the target (over its statement limit, a purged id's mark,
    #: failing for the retry budget): not imported.
    failed: int = 0
    dry_run: bool = False
    #: The import's own report (``None`` on a dry run).
    report: ImportReport | None = None

    @property
    def clean(self) -> bool:
        return self.differing == 0 and self.failed == 0


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


def _instant(value: object, fallback: datetime) -> datetime:
    """A ``created_at`` of the SDK's as UTC: a ``datetime`` (naive ones are UTC, as
    ``CURRENT_TIMESTAMP`` writes them), or SQLite's text; else ``fallback``."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return fallback
    if not isinstance(value, datetime):
        return fallback
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


#: The namespace of the items' ids: each is a UUIDv5 of its session and the SDK's row id.
_ITEM_IDS = uuid.uuid5(uuid.NAMESPACE_URL, "chatledger:import:openai-sdk")


class _Source:
    """The SDK's message table at the source, read a session at a time."""

    def __init__(
        self,
        conn: AsyncConnection,
        messages: Table,
        ids: list[str],
        report: OpenAIImportReport,
        encode: Callable[[object, str], str],
    ) -> None:
        self.conn, self.messages, self.ids, self.report = conn, messages, ids, report
        #: An item's JSON text as ``add_items`` stores it (:func:`.openai_agents.items.encode`).
        self.encode = encode
        self.codecs = {kind: RowCodec(FRAMEWORK_TABLES[kind]) for kind in (OPENAI.head, OPENAI.entry)}
        #: The SDK's own ``created_at`` and ``updated_at`` of each session (its session
        #: table's), where it has them: the times a user sees, kept as they are.
        self.session_times: dict[str, tuple[object, object]] = {}

    async def records(self) -> AsyncIterator[Record]:
        """The export records of every session with an item to import, header first."""
        yield header()
        messages = self.messages
        for session_id in self.ids:
            rows = await self.conn.execute(
                select(messages.c.id, messages.c.message_data, messages.c.created_at)
                .where(messages.c.session_id == session_id)
                .order_by(messages.c.created_at, messages.c.id)
            )
            entries: list[Record] = []
            at = first = latest = _EPOCH
            for row in rows:
                try:
                    text = self.encode(json.loads(row.message_data), "message_data")
                except (TypeError, ValueError):
                    self.report.corrupt += 1
                    continue
                at = _instant(row.created_at, at)
                first, latest = (at, at) if not entries else (first, max(latest, at))
                entries.append(
                    self.codecs[OPENAI.entry].encode(
                        {
                            "session_id": session_id,
                            "sequence": len(entries) + 1,
                            "item_id": str(uuid.uuid5(_ITEM_IDS, f"{session_id}\x00{row.id}")),
                            "item_json": text,
                            "created_at": at,
                            "retracted_at": None,
                        }
                    )
                )
            if not entries:
                continue  # nothing chatledger would store (add_items of no items writes nothing)
            # The SDK touches its session's updated_at on every add, also one whose item was
            # popped later: its last activity, and the order of a list of sessions.
            created, updated = self.session_times.get(session_id, (None, None))
            first, latest = _instant(created, first), _instant(updated, latest)
            yield {
                "type": OPENAI.head,
                "row": self.codecs[OPENAI.head].encode(
                    {
                        "id": session_id,
                        "last_sequence": len(entries),
                        "generation": 1,
                        "base_sequence": 0,
                        "created_at": first,
                        "updated_at": latest,
                        "deleted_at": None,
                    }
                ),
            }
            for entry in entries:
                yield {"type": OPENAI.entry, "row": entry}
            yield OPENAI.end_record((session_id,), len(entries))
        yield {"type": "end"}


async def _read_source(
    conn: AsyncConnection,
    sessions_table: str,
    messages_table: str,
    report: OpenAIImportReport,
    encode: Callable[[object, str], str],
) -> _Source:
    """The SDK's tables on ``conn``, checked, and their session ids (each checked as
    ``LedgerSession`` checks one, before anything is written)."""
    await conn.run_sync(_check_tables, sessions_table, messages_table)
    messages = Table(
        messages_table,
        MetaData(),
        Column("id", Integer),
        Column("session_id", Text),
        Column("message_data", Text),
        Column("created_at", Text),
    )
    ids = [
        validate.identifier(str(session_id), "session_id")
        for session_id in await conn.scalars(
            select(messages.c.session_id).distinct().order_by(messages.c.session_id)
        )
    ]
    source = _Source(conn, messages, ids, report, encode)
    columns = await conn.run_sync(_session_columns, sessions_table)
    if columns >= {"session_id", "created_at", "updated_at"}:
        sessions = Table(
            sessions_table,
            MetaData(),
            Column("session_id", Text),
            Column("created_at", Text),
            Column("updated_at", Text),
        )
        for row in await conn.execute(
            select(sessions.c.session_id, sessions.c.created_at, sessions.c.updated_at)
        ):
            source.session_times[str(row.session_id)] = (row.created_at, row.updated_at)
    return source


def _session_columns(conn: Connection, sessions: str) -> set[str]:
    """The columns of the SDK's session table; none when the source has no such table."""
    found = inspect(conn)
    if sessions not in found.get_table_names():
        return set()
    return {column["name"] for column in found.get_columns(sessions)}


async def _dry_run(source: _Source, ledger: Ledger, report: OpenAIImportReport) -> None:
    """Count what the import would write: sessions absent from the target and their items."""
    sessions = OPENAI.sessions
    absent = False
    async with ledger.engine.connect() as conn:
        async for record in source.records():
            kind, values = record.get("type"), record.get("row")
            if kind == OPENAI.head and isinstance(values, dict):
                found = await conn.scalar(select(sessions.c.id).where(sessions.c.id == values["id"]))
                absent = found is None
                report.imported += absent
                report.identical += not absent
            elif kind == OPENAI.entry and absent:
                report.items += 1


async def import_openai_sdk(
    source: str | URL,
    target: str | URL | None,
    *,
    sessions_table: str = "agent_sessions",
    messages_table: str = "agent_messages",
    dry_run: bool = False,
) -> OpenAIImportReport:
    """Import every session of the OpenAI SDK's tables at ``source`` into ``target``.

    ``dry_run`` writes nothing, and never migrates the target: it counts the sessions
    the target lacks and their items.

    Raises:
        ValueError: ``source`` and ``target`` are the same database; the source (or, on
            a dry run, the target) is a SQLite file that does not exist
            (``no such file: PATH``); a session id is not one chatledger stores
            (nothing is written).
        ConfigurationError: the source's tables are not the SDK's (missing, lacking
            columns, or chatledger's own ``agent_sessions``); nothing is written.
        SchemaNotReady: the target is not at this chatledger's head revision (a dry
            run's, or one that may not be upgraded).
        ImportError: openai-agents (chatledger's ``openai-agents`` extra) is not installed.
        StorageUnavailable, ChatledgerError: see :meth:`.importer.Importer.run`.
    """
    # Needs the extra (its ImportError comes before anything is opened).
    from ..openai_agents.items import encode

    source_url, target_url = endpoints(
        source,
        target,
        dry_run=dry_run,
        same=f"the source {display(resolve_dsn(source))} is the target: read the SDK's tables from the "
        "database it wrote, and import into chatledger's (agent_sessions is a table of both)",
    )
    report = OpenAIImportReport(dry_run=dry_run)
    reader = create_async_engine(source_url, poolclass=NullPool)
    ledger = target_ledger(target_url, dry_run=dry_run)
    try:
        async with reader.connect() as conn:
            source_rows = await _read_source(conn, sessions_table, messages_table, report, encode)
            if dry_run:
                await ready_for_dry_run(ledger)
                await _dry_run(source_rows, ledger, report)
                return report
            imported = await Importer(ledger).run(source_rows.records())
    finally:
        await reader.dispose()
        await ledger.close()
    report.report = imported
    counts = imported.frameworks.get(OPENAI.framework)
    if counts is not None:
        report.imported, report.items, report.identical = counts.imported, counts.entries, counts.identical
        report.differing, report.failed = counts.differing, counts.failed
    return report
