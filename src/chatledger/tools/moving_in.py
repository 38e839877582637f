"""The two ends of an import from a framework's own tables (``chatledger import
--openai-sdk`` and ``--adk``): the source and target checked before anything is
opened, the target's ledger (never migrated by a dry run), and the header of the
export records those imports feed to :class:`chatledger.tools.importer.Importer`.
"""

from __future__ import annotations

from sqlalchemy.engine import URL

from ..dsn import resolve_dsn
from ..engine import Ledger
from ..errors import SchemaNotReady
from ..migrate import existing_database
from .rows import FORMAT, FORMAT_VERSION, FRAMEWORK_TABLES, TABLES, Record, RowCodec


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
        "tables": {
            table.name: list(RowCodec(table).columns) for table in {**TABLES, **FRAMEWORK_TABLES}.values()
        },
    }
