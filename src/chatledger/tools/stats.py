"""``chatledger stats``: what the database holds, per framework, as tables or JSON.

The figures come from :func:`chatledger.stats.read_stats` (one read transaction,
counts from the counter rows, sizes from the backend); this module only prints them.
Registered in :mod:`chatledger.tools.cli` by :func:`command`. It never migrates: a
database behind this chatledger's schema is refused with the command that upgrades
it, and a SQLite file that does not exist is not created.
"""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table as RichTable

from ..dsn import resolve_dsn, sqlite_file
from ..stats import LARGEST, Stats, read_stats
from .commands.shared import add_dsn

HELP = (
    "what the database holds, per kind of session: sessions live and deleted, their entries "
    "(raw messages, items, events), checkpoints, bytes per table of chatledger's, the largest "
    "sessions (--json for machines)"
)


def configure(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    parser.add_argument(
        "--largest",
        type=int,
        default=LARGEST,
        metavar="N",
        help=f"list the N largest sessions per kind (default: {LARGEST}; 0: none)",
    )


async def run(args: argparse.Namespace, console: Console) -> int:
    url = resolve_dsn(args.dsn)
    path = sqlite_file(url)
    if path is not None and not path.is_file():
        raise ValueError(f"no such file: {path}")
    if args.largest < 0:
        raise ValueError("--largest must not be negative")
    stats = await read_stats(url, largest=args.largest)
    if args.json:
        document = json.dumps(stats.as_json(), ensure_ascii=False)
        console.print(document, markup=False, highlight=False, soft_wrap=True)
    else:
        print_tables(stats, console)
    return 0


def _say(console: Console, line: str) -> None:
    console.print(line, markup=False, highlight=False, soft_wrap=True)


def _bytes(value: int | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{value} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def print_tables(stats: Stats, console: Console) -> None:
    """The figures as rich tables: counts per kind, bytes per table (chatledger's own,
    the total saying what it covers), largest sessions."""
    _say(console, f"{stats.database} ({stats.system}), read in {stats.seconds:.3f} s")
    # Headings as lines of their own: a table's title wraps at the table's width.
    _say(console, "sessions and rows")
    counts = RichTable()
    for name in ("kind", "what", "count"):
        counts.add_column(name, justify="right" if name == "count" else "left")
    for framework in stats.frameworks:
        for what, count in framework.counts.items():
            counts.add_row(framework.name, what.replace("_", " "), str(count))
    console.print(counts)
    _say(console, f"bytes per table, from {stats.size.source}")
    sizes = RichTable()
    for name in ("kind", "table", "bytes", "size"):
        sizes.add_column(name, justify="right" if name in ("bytes", "size") else "left")
    listed = set()
    for framework in stats.frameworks:
        for table in framework.tables:
            listed.add(table)
            value = stats.size.tables.get(table)
            sizes.add_row(framework.name, table, "-" if value is None else str(value), _bytes(value))
    # chatledger's own bookkeeping: the high-water marks, the revision it is at.
    for table, value in sorted(stats.size.tables.items()):
        if table not in listed:
            sizes.add_row("", table, str(value), _bytes(value))
    total = stats.size.total
    sizes.add_row("", "total", "-" if total is None else str(total), _bytes(total))
    console.print(sizes)
    _say(console, f"the total: {stats.total_covers}")
    for framework in stats.frameworks:
        if not framework.largest:
            continue
        _say(console, f"largest {framework.name} sessions, by {framework.largest_by}")
        largest = RichTable()
        largest.add_column("id")
        largest.add_column(framework.largest_by.split(" (")[0], justify="right")
        for session in framework.largest:
            largest.add_row(session.id, str(session.messages))
        console.print(largest)
