"""``chatledger export``, ``import`` and ``copy``: sessions out of one database, into another.

The format is JSON lines, versioned and documented in ``docs/export-format.md``
(its rows: :mod:`.rows`); :mod:`.export` writes it, :mod:`.importer` reads it, and
:func:`copy` feeds the one into the other without a file.

* **Exact.** Every column travels as stored: ids, sequences, versions, checkpoint
  boundaries, the JSON texts (byte for byte), token counts, and timestamps as
  RFC 3339 UTC with microseconds. Deleted sessions' tombstones (rows a later
  revision keeps so that no late writer revives an id) travel as rows too, and the
  high-water marks of purged ones as ``mark`` records, so a copy keeps stale writers
  out of the copy as well.
* **Constant memory.** The export reads one consistent snapshot (one read
  transaction) with server-side cursors, a page of sessions at a time; the import
  reads a line at a time and inserts in batches (``executemany``).
* **Idempotent.** Each zett session is imported in a transaction of its own, and
  each rein session too. A session the target has already is compared, not
  written: identical ones are skipped, differing ones reported and left alone. An
  interrupted import, run again, imports what it had not committed, and nothing
  twice; so do imports and copies of overlapping sessions at once (a session the
  other committed first is compared), their transient failures retried.
* **Within the target's limits.** Rows are checked against its statement limit
  before they are sent; a session with a row over it is named and not imported.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

from rich.console import Console
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from ..engine import Ledger
from . import interrupt
from .export import export, export_records, open_output, open_source
from .importer import Importer, ImportReport, database_error, import_file, interrupted, prefetched
from .progress import progress
from .rows import FormatError, Record, Say

__all__ = ["FormatError", "ImportReport", "copy", "export", "import_file", "open_output"]


async def copy(
    source: str | URL | None,
    target: str | URL | None,
    *,
    ids: Sequence[str] | None = None,
    console: Console | None = None,
    say: Say | None = None,
) -> ImportReport:
    """Copy the sessions of one database into another, directly: the export's records
    feed the import, one consistent snapshot of the source, constant memory.

    Raises:
        ValueError: both name the same database, or a SQLite source file is missing.
        SchemaNotReady, StorageUnavailable, ChatledgerError: as an import raises them
            (:meth:`.importer.Importer.run`); a database error met reading the source
            names the source, one met writing names the target.
    """
    reader = open_source(source)
    writer = Ledger(target)
    if reader.url == writer.url:
        raise ValueError("--from and --to name the same database")
    bars = progress(console) if console is not None else None
    try:
        await reader.ensure_ready()
        try:
            async with reader.engine.connect() as conn:
                conn = await conn.execution_options(**reader.backend.snapshot_read)
                async with conn.begin():
                    with bars or contextlib.nullcontext():
                        records = prefetched(_read(reader, export_records(conn, ids)))
                        importer = Importer(writer, say=say, bars=bars)
                        with interrupt.noting(lambda: interrupted(importer.report, "copy")):
                            return await importer.run(records)
        except (DBAPIError, OSError) as error:  # the import raises chatledger errors only
            raise database_error(reader, error) from error
    finally:
        await reader.close()
        await writer.close()


async def _read(reader: Ledger, records: AsyncIterator[Record]) -> AsyncIterator[Record]:
    """``records``, a database error met reading them named against the source."""
    try:
        async for record in records:
            yield record
    except (DBAPIError, OSError) as error:
        raise database_error(reader, error) from error
