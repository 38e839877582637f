"""Moving in from Google ADK's own SQL store: ``chatledger import --adk``.

ADK's ``DatabaseSessionService`` (schema v1) keeps ``sessions`` (session-scoped
state), ``events`` (each event as JSON in ``event_data``), ``app_states`` and
``user_states``. Each ADK session becomes the records of an export (an
``adk_session`` block and the ``app:``/``user:`` state rows, exactly the rows
:class:`chatledger.adk.LedgerSessionService` would have written) and goes through
the import of :mod:`chatledger.tools.importer`: one transaction a session, a
session or state row the target has already compared, never overwritten.

Events keep ADK's order: its ``Event.timestamp``, then ``Event.id`` (so events of
one instant are in id order), numbered 1..n. Partial events and ``temp:`` state
keys are dropped, as ADK's and chatledger's services drop them on append. Times are
ADK's (``create_time``, ``update_time``, an event's timestamp), so a re-run
yields the same rows and finds them identical.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Table, inspect, select
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool

from .. import validate
from ..engine import Ledger
from ..errors import ConfigurationError
from ..schema import adk_sessions_table
from ..stray_tables import ADK_TABLES
from .importer import Importer, ImportReport
from .moving_in import endpoints, header, ready_for_dry_run, target_ledger
from .rows import FRAMEWORK_TABLES, Record, RowCodec


@dataclass
class ADKImportReport:
    """What an import of ADK's tables did (or, ``dry_run``, would do)."""

    #: Sessions imported (dry run: absent from the target, to import), their events,
    #: and the ``app:``/``user:`` state rows imported (dry run: in the source).
    sessions: int = 0
    events: int = 0
    states: int = 0
    #: Partial events in the source: never stored, skipped.
    skipped: int = 0
    #: Sessions the target has already, identical: skipped (dry run: the sessions it
    #: has, compared only by the import itself).
    identical: int = 0
    #: State rows the target has already, identical: skipped (dry run: 0, not compared).
    states_identical: int = 0
    #: Sessions and state rows the target has with other content: left alone.
    differing: int = 0
    #: Refused by the target (over its statement limit, failing for the retry budget).
    failed: int = 0
    dry_run: bool = False
    #: The import's own report (``None`` on a dry run).
    report: ImportReport | None = None

    @property
    def clean(self) -> bool:
        return self.differing == 0 and self.failed == 0


def _check_tables(conn: Connection) -> None:
    found = inspect(conn)
    names = set(found.get_table_names())
    if "adk_sessions" in names and "sessions" not in names:
        raise ConfigurationError(
            "the source is a chatledger database (adk_sessions), not ADK's DatabaseSessionService's: "
            "give the DSN of the database ADK wrote (chatledger copy moves chatledger's own)"
        )
    for table, wanted in ADK_TABLES.items():
        if table not in names:
            raise ConfigurationError(
                f"the source has no table {table!r}: it is not a database ADK's DatabaseSessionService wrote"
            )
        columns = {column["name"] for column in found.get_columns(table)}
        if not columns >= wanted:
            raise ConfigurationError(
                f"table {table!r} of the source lacks {sorted(wanted - columns)}: it is not ADK's "
                "DatabaseSessionService schema v1 (migrate an older one with ADK's own migration first)"
            )


def _utc(value: datetime) -> datetime:
    # ADK stores naive UTC times on SQLite and MySQL.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class _Source:
    """ADK's tables at the source, read a session at a time."""

    def __init__(self, conn: AsyncConnection, tables: Mapping[str, Table], report: ADKImportReport) -> None:
        self.conn, self.tables, self.report = conn, tables, report
        self.codecs = {kind: RowCodec(table) for kind, table in FRAMEWORK_TABLES.items()}

    async def records(self) -> AsyncIterator[Record]:
        """The export records of every ADK session and state row, header first."""
        from google.adk.events import Event
        from google.adk.sessions import _session_util

        yield header()
        sessions, events = self.tables["sessions"], self.tables["events"]
        keys = (
            await self.conn.execute(
                select(sessions).order_by(sessions.c.app_name, sessions.c.user_id, sessions.c.id)
            )
        ).all()
        for session in keys:
            rows = await self.conn.execute(
                select(events.c.id, events.c.invocation_id, events.c.event_data).where(
                    events.c.app_name == session.app_name,
                    events.c.user_id == session.user_id,
                    events.c.session_id == session.id,
                )
            )
            kept: list[Any] = []
            for row in rows:
                event = Event.model_validate(
                    {**(row.event_data or {}), "id": row.id, "invocation_id": row.invocation_id}
                )
                if event.partial:
                    self.report.skipped += 1
                    continue
                kept.append(event)
            kept.sort(key=lambda event: (event.timestamp, event.id))
            state_version = 1
            entries: list[Record] = []
            for sequence, event in enumerate(kept, start=1):
                delta = event.actions.state_delta if event.actions else {}
                split = _session_util.extract_json_safe_state_delta(delta or {})
                state_version += 1 if split["session"] else 0
                if delta:  # temp: keys are never stored (LedgerSessionService trims them too)
                    event.actions.state_delta = {k: v for k, v in delta.items() if not k.startswith("temp:")}
                entries.append(
                    self.codecs["adk_event"].encode(
                        {
                            "app_name": session.app_name,
                            "user_id": session.user_id,
                            "session_id": session.id,
                            "sequence": sequence,
                            "event_id": event.id,
                            "timestamp": event.timestamp,
                            "event_json": event.model_dump_json(exclude_none=True),
                            "created_at": datetime.fromtimestamp(event.timestamp, UTC),
                        }
                    )
                )
            key = {"app_name": session.app_name, "user_id": session.user_id, "id": session.id}
            yield {
                "type": "adk_session",
                "row": self.codecs["adk_session"].encode(
                    {
                        **key,
                        "last_sequence": len(entries),
                        "base_sequence": 0,
                        "state_json": validate.json_text(dict(session.state or {}), "state"),
                        "state_version": state_version,
                        "created_at": _utc(session.create_time),
                        "updated_at": _utc(session.update_time),
                        "deleted_at": None,
                    }
                ),
            }
            for entry in entries:
                yield {"type": "adk_event", "row": entry}
            yield {"type": "adk_session_end", **key, "events": len(entries)}
        for kind, name, key_columns in (
            ("adk_app_state", "app_states", ("app_name",)),
            ("adk_user_state", "user_states", ("app_name", "user_id")),
        ):
            table = self.tables[name]
            for row in await self.conn.execute(
                select(table).order_by(*(table.c[column] for column in key_columns))
            ):
                yield {
                    "type": kind,
                    "row": self.codecs[kind].encode(
                        {
                            **{column: row._mapping[column] for column in key_columns},
                            "state_json": validate.json_text(dict(row.state or {}), "state"),
                            "version": 1,
                            "updated_at": _utc(row.update_time),
                        }
                    ),
                }
        yield {"type": "end"}


async def _dry_run(source: _Source, ledger: Ledger, report: ADKImportReport) -> None:
    """Count what the import would write: sessions absent from the target and their events."""
    sessions = adk_sessions_table
    absent = False
    async with ledger.engine.connect() as conn:
        async for record in source.records():
            kind, values = record.get("type"), record.get("row")
            if kind == "adk_session" and isinstance(values, dict):
                found = await conn.scalar(
                    select(sessions.c.id).where(
                        sessions.c.app_name == values["app_name"],
                        sessions.c.user_id == values["user_id"],
                        sessions.c.id == values["id"],
                    )
                )
                absent = found is None
                report.sessions += absent
                report.identical += not absent
            elif kind == "adk_event" and absent:
                report.events += 1
            elif kind in ("adk_app_state", "adk_user_state"):
                report.states += 1


async def import_adk(
    source: str | URL, target: str | URL | None, *, dry_run: bool = False
) -> ADKImportReport:
    """Import every session and ``app:``/``user:`` state row of ADK's
    ``DatabaseSessionService`` tables at ``source`` into ``target``.

    ``dry_run`` writes nothing, and never migrates the target: it counts the sessions
    the target lacks, their events, and the source's state rows.

    The source may be the target itself: ADK's tools given a plain URL of chatledger's
    database create ADK's tables beside chatledger's, and the import reads them there.

    Raises:
        ValueError: the source (or, on
            a dry run, the target) is a SQLite file that does not exist
            (``no such file: PATH``).
        ConfigurationError: the source lacks ADK's tables (schema v1) or is a
            chatledger database; nothing is written.
        SchemaNotReady: the target is not at this chatledger's head revision (a dry
            run's, or one that may not be upgraded).
        ImportError: google-adk (chatledger's ``adk`` extra) is not installed.
    """
    from google.adk.sessions.schemas import v1

    source_url, target_url = endpoints(
        source,
        target,
        dry_run=dry_run,
        same=None,
    )
    tables = {name: v1.Base.metadata.tables[name] for name in ADK_TABLES}
    report = ADKImportReport(dry_run=dry_run)
    reader = create_async_engine(source_url, poolclass=NullPool)
    ledger = target_ledger(target_url, dry_run=dry_run)
    try:
        async with reader.connect() as conn:
            await conn.run_sync(_check_tables)
            source_rows = _Source(conn, tables, report)
            if dry_run:
                await ready_for_dry_run(ledger)
                await _dry_run(source_rows, ledger, report)
                return report
            imported = await Importer(ledger).run(source_rows.records())
    finally:
        await reader.dispose()
        await ledger.close()
    report.report = imported
    counts = imported.frameworks.get("ADK")
    if counts is not None:
        report.sessions, report.events, report.states = counts.imported, counts.entries, counts.states
        report.identical, report.states_identical = counts.identical, counts.states_identical
        report.differing, report.failed = counts.differing, counts.failed
    return report
