"""Moving in from a framework's own tables: ``chatledger import --openai-sdk DSN``,
``--adk DSN``, one import for every kind that has one
(:attr:`chatledger.kinds.SessionKind.moves_in`).

The kind's adapter reads its framework's tables (:meth:`chatledger.kinds.MovingIn.source`:
checked first, then a session at a time, as the rows the adapter would have written);
here they become the records of an export and go through the import of
:mod:`chatledger.tools.importer`: one transaction a session, a session (or state row)
the target has already compared, never overwritten (identical: skipped; differing, or
added to by a live writer first: left alone), a purged id's high-water mark
respected. The source and target are checked before either is opened, and a dry run
never migrates (or creates) the target: it counts the sessions the target lacks,
their entries, and the source's state rows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, create_async_engine
from sqlalchemy.pool import NullPool

from ..dsn import display, resolve_dsn
from ..engine import Ledger
from ..errors import SchemaNotReady
from ..kinds import (
    Checkpointed,
    Grouped,
    Log,
    MovingIn,
    Rows,
    SessionKind,
    Source,
    lookup,
    operations,
    record_tables,
)
from ..migrate import existing_database
from .importer import Importer, ImportReport
from .rows import FORMAT, FORMAT_VERSION, Record, RowCodec, tables


def endpoints(
    source: str | URL, target: str | URL | None, *, dry_run: bool, same: str | None
) -> tuple[URL, URL]:
    """The source's and the target's URLs, checked before either is opened (opening a
    SQLite file that does not exist would create it).

    Raises:
        ValueError: a DSN is invalid; the source is a SQLite file that does not exist,
            or (``dry_run``) the target is (``no such file: PATH``); or the two are
            the same database (``same`` is the message; ``None`` allows it).
    """
    source_url = existing_database(source)
    target_url = existing_database(target) if dry_run else resolve_dsn(target)
    if same is not None and source_url.render_as_string(hide_password=False) == target_url.render_as_string(
        hide_password=False
    ):
        raise ValueError(same)
    return source_url, target_url


def target_ledger(url: URL, *, dry_run: bool) -> Ledger:
    """The target's ledger: a dry run's never migrates it (it writes nothing), an
    import's upgrades an embedded SQLite file as every store does."""
    return Ledger(url, auto_upgrade=False) if dry_run else Ledger(url)


async def ready_for_dry_run(ledger: Ledger) -> None:
    """Check a dry run's target is at this chatledger's head revision.

    Raises:
        SchemaNotReady: it is not; the message says a dry run never migrates it.
    """
    try:
        await ledger.ensure_ready()
    except SchemaNotReady as error:
        raise SchemaNotReady(f"a dry run writes nothing, so it never migrates the target: {error}") from error


def header() -> Record:
    """The header of the records an import from a framework's tables yields: every
    table of the format with all its columns."""
    return {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "tables": {table.name: list(RowCodec(table).columns) for table in tables().values()},
    }


@dataclass
class MoveInReport:
    """What an import from a framework's own tables did (or, ``dry_run``, would do)."""

    #: Sessions imported (dry run: absent from the target, to import), and their entries
    #: (items, events).
    sessions: int = 0
    entries: int = 0
    #: Rows of state the sessions share imported (ADK's ``app:``/``user:`` state; dry
    #: run: in the source).
    states: int = 0
    #: Sessions the target has already, identical: skipped (dry run: the sessions it
    #: has, compared only by the import itself); and state rows (dry run: 0).
    identical: int = 0
    states_identical: int = 0
    #: Sessions and state rows the target has with other content (or a live writer added
    #: to first): left alone.
    differing: int = 0
    #: Refused by the target (over its statement limit, a purged id's mark, failing for
    #: the retry budget): not imported.
    failed: int = 0
    #: Source rows skipped: unreadable, or never stored by the adapter (the kind's
    #: :attr:`~chatledger.kinds.MoveIn.skipped` says which).
    skipped: int = 0
    dry_run: bool = False
    #: The import's own report (``None`` on a dry run).
    report: ImportReport | None = None

    @property
    def clean(self) -> bool:
        return self.differing == 0 and self.failed == 0


class SourceRecords:
    """A framework's own tables as the records of an export, header first: each
    session's rows (from the kind's :class:`~chatledger.kinds.Source`) and its end
    record."""

    def __init__(self, kind: SessionKind, source: Source) -> None:
        self.kind, self.source = kind, source
        self.codecs = {record: RowCodec(table) for record, table in tables().items()}

    @property
    def skipped(self) -> int:
        return self.source.skipped

    async def records(self) -> AsyncIterator[Record]:
        yield header()
        layouts = {record: layout for layout in self.kind.records for record in record_tables(layout)}
        open_end: Record | None = None
        async for record_type, row in self.source.rows():
            layout = layouts[record_type]
            if open_end is not None and not _continues(layout, record_type):
                yield open_end
                open_end = None
            encoded = self.codecs[record_type].encode(row)
            yield {"type": record_type, "row": encoded}
            if isinstance(layout, Log):
                if record_type == layout.head:
                    open_end = layout.end_record(layout.key_of(row), 0)
                elif open_end is not None:
                    open_end[layout.entries_name] += 1
            elif isinstance(layout, Checkpointed):
                if record_type == layout.head:
                    open_end = {"type": layout.end, "id": row["id"], "snapshots": 0, "messages": 0}
                elif open_end is not None:
                    open_end["snapshots" if record_type == layout.checkpoint else "messages"] += 1
            elif isinstance(layout, Grouped):
                if record_type == layout.head:
                    open_end = layout.end_record(layout.key_of(row), {part.count: 0 for part in layout.parts})
                elif open_end is not None:
                    open_end[next(part.count for part in layout.parts if part.record == record_type)] += 1
        if open_end is not None:
            yield open_end
        yield {"type": "end"}


def _continues(layout: Any, record_type: str) -> bool:
    """Whether a record of ``record_type`` belongs to the session opened before it."""
    if isinstance(layout, Log):
        return record_type == layout.entry
    if isinstance(layout, Checkpointed):
        return record_type in (layout.checkpoint, layout.entry)
    if isinstance(layout, Grouped):
        return record_type in {part.record for part in layout.parts}
    return False


async def source_records(
    kind: SessionKind, conn: AsyncConnection, options: Mapping[str, str]
) -> SourceRecords:
    """The framework's own tables on ``conn`` as export records, checked first.

    Raises:
        ImportError: the kind's framework is not installed.
        ConfigurationError, ValueError: the tables are not the framework's, or hold a
            session chatledger does not store (:meth:`chatledger.kinds.MovingIn.source`).
    """
    moving: type[MovingIn] = operations(kind)  # type: ignore[assignment]
    return SourceRecords(kind, await moving.source(conn, options))


async def _dry_run(kind: SessionKind, source: SourceRecords, ledger: Ledger, report: MoveInReport) -> None:
    """Count what the import would write: sessions absent from the target, their entries,
    and the source's state rows."""
    roles: dict[str, tuple[Any, str]] = {}
    for layout in kind.records:
        if isinstance(layout, Log | Checkpointed):
            roles[layout.head] = (layout, "head")
            roles[layout.entry] = (layout, "entry")
        elif isinstance(layout, Grouped):
            # Its first part's rows are what reports count as its entries.
            roles[layout.head] = (layout, "head")
            roles[layout.parts[0].record] = (layout, "entry")
        elif layout.sessions:
            roles[layout.record] = (layout, "head")
        else:
            roles[layout.record] = (layout, "state")
    absent = False
    async with ledger.engine.connect() as conn:
        async for record in source.records():
            layout, role = roles.get(str(record.get("type")), (None, ""))
            values = record.get("row")
            if role == "head" and isinstance(values, dict):
                if isinstance(layout, Rows):
                    table, key = layout.table, layout.key
                else:
                    table, key = layout.sessions, layout.key if isinstance(layout, Log | Grouped) else ("id",)
                found = await conn.scalar(
                    select(table.c[key[-1]]).where(*(table.c[name] == values[name] for name in key))
                )
                absent = found is None
                report.sessions += absent
                report.identical += not absent
            elif role == "entry" and absent:
                report.entries += 1
            elif role == "state":
                report.states += 1


async def move_in(
    name: str,
    source: str | URL,
    target: str | URL | None,
    *,
    dry_run: bool = False,
    **options: str,
) -> MoveInReport:
    """Import every session of the framework's own tables at ``source`` (of the kind
    ``name``, one with :attr:`~chatledger.kinds.SessionKind.moves_in`) into ``target``.

    ``dry_run`` writes nothing, and never migrates the target: it counts the sessions
    the target lacks, their entries, and the source's state rows. ``options`` are the
    kind's source options (:attr:`chatledger.kinds.MoveIn.options`: the OpenAI SDK's
    ``sessions_table``, ``messages_table``).

    Raises:
        ValueError: a kind without such an import; ``source`` and ``target`` are the same
            database (unless the framework's tables stand beside chatledger's:
            :attr:`chatledger.kinds.MoveIn.beside`); the source (or, on a dry run, the
            target) is a SQLite file that does not exist (``no such file: PATH``); a
            session id is not one chatledger stores (nothing is written).
        ConfigurationError: the source's tables are not the framework's (missing,
            lacking columns, or chatledger's own); nothing is written.
        SchemaNotReady: the target is not at this chatledger's head revision (a dry
            run's, or one that may not be upgraded).
        ImportError: the framework (the kind's extra) is not installed.
        StorageUnavailable, ChatledgerError: see :meth:`.importer.Importer.run`.
    """
    kind = lookup(name)
    if kind.moves_in is None:
        raise ValueError(f"the {kind.name} kind has no import from its framework's own tables")
    operations(kind)  # the framework's ImportError, before anything is opened
    source_url, target_url = endpoints(
        source,
        target,
        dry_run=dry_run,
        # A framework whose tables stand beside chatledger's is read in the same database.
        same=None
        if kind.moves_in.beside is not None
        else f"the source {display(resolve_dsn(source))} is the target: read the {kind.label} tables "
        "from the database it wrote, and import into chatledger's",
    )
    report = MoveInReport(dry_run=dry_run)
    reader = create_async_engine(source_url, poolclass=NullPool)
    ledger = target_ledger(target_url, dry_run=dry_run)
    try:
        async with reader.connect() as conn:
            rows = await source_records(kind, conn, options)
            if dry_run:
                await ready_for_dry_run(ledger)
                await _dry_run(kind, rows, ledger, report)
                report.skipped = rows.skipped
                return report
            imported = await Importer(ledger).run(rows.records())
            report.skipped = rows.skipped
    finally:
        await reader.dispose()
        await ledger.close()
    report.report = imported
    counts = imported.frameworks.get(kind.label)
    if counts is not None:
        report.sessions, report.entries, report.states = counts.imported, counts.entries, counts.states
        report.identical, report.states_identical = counts.identical, counts.states_identical
        report.differing, report.failed = counts.differing, counts.failed
    return report
