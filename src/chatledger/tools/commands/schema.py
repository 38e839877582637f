"""The schema commands: ``upgrade``, ``downgrade``, ``current`` and ``check``.

Each says on stderr when it falls back on the embedded SQLite database, and where it is."""

from __future__ import annotations

import argparse
import asyncio
import sys

from rich.console import Console

from ... import migrate
from ...drift import fix_script
from ...dsn import display, resolve_dsn
from ...errors import DowngradeRefused
from .shared import Command, add_dsn, concrete, say


def add_lock_timeout(parser: argparse.ArgumentParser) -> None:
    """The ``--lock-timeout`` option of the commands that migrate."""
    parser.add_argument(
        "--lock-timeout",
        type=float,
        default=migrate.LOCK_TIMEOUT,
        metavar="SECONDS",
        help="how long to wait for another process's migration to finish "
        f"(default: {migrate.LOCK_TIMEOUT:g})",
    )


def _configure_upgrade(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)
    parser.add_argument(
        "--revision",
        default="head",
        metavar="REV",
        help="revision to upgrade to (default: head); with --sql also FROM:TO, for a database at FROM",
    )
    parser.add_argument(
        "--sql",
        action="store_true",
        help="print the upgrade as SQL for the DSN's dialect, to review and run with the database's own "
        "client, instead of running it (connects to nothing; from an empty database unless FROM:TO)",
    )
    add_lock_timeout(parser)


async def _upgrade(args: argparse.Namespace, console: Console) -> int:
    url = resolve_dsn(args.dsn)
    _note_default(args)
    if args.sql:
        await asyncio.to_thread(migrate.write_upgrade_sql, url, args.revision, lock_timeout=args.lock_timeout)
        return 0
    done = await migrate.upgrade(url, args.revision, lock_timeout=args.lock_timeout)
    say(console, done.summary)
    return 0


def _configure_downgrade(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)
    parser.add_argument("revision", help="revision to downgrade to; 'base' drops every chatledger table")
    parser.add_argument(
        "--yes",
        action="store_true",
        help="drop tables that hold rows (without it such a downgrade is refused, and changes nothing "
        "unless rows come in while it runs on MySQL/MariaDB)",
    )
    add_lock_timeout(parser)


async def _downgrade(args: argparse.Namespace, console: Console) -> int:
    _note_default(args)
    try:
        reached = await migrate.downgrade(
            args.dsn, args.revision, lock_timeout=args.lock_timeout, drop_rows=args.yes
        )
    except DowngradeRefused as refused:
        print(f"chatledger downgrade: {concrete(str(refused), args.dsn)}", file=sys.stderr)
        return 1
    say(console, f"{display(resolve_dsn(args.dsn))} is at revision {_revision(reached)}")
    return 0


async def _current(args: argparse.Namespace, console: Console) -> int:
    _note_default(args)
    found = await migrate.current(args.dsn)
    for line in found.lines:
        say(console, concrete(line, args.dsn))
    return 0


#: ``chatledger check`` exit status per standing: 0 this chatledger can use the database.
CHECK_STATUS = migrate.CHECK_STATUS
#: ``chatledger check`` exit status of a usable schema whose sessions hold raw messages
#: past their counter row (written outside chatledger): appends to them fail.
CHECK_PAST_COUNTER = migrate.CHECK_PAST_COUNTER


def _configure_check(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)
    parser.add_argument(
        "--app-alembic",
        metavar="PATH",
        help="an application's own Alembic in the same database: its alembic.ini, migration directory "
        "or env.py, read for chatledger's hooks (default: ./alembic.ini if there is one); the hooks are "
        "named only when it lacks them",
    )


async def _check(args: argparse.Namespace, console: Console) -> int:
    _note_default(args)
    checked = await migrate.check(args.dsn, app_alembic=args.app_alembic)
    if checked.drift:  # the SQL that fixes it, a script for the database's own client
        console.file.write(fix_script(checked.drift, checked.url.get_backend_name()))
        console.file.flush()
    message = concrete(checked.message, args.dsn)
    if checked.status:
        print(f"chatledger check: {message}", file=sys.stderr)
    else:
        say(console, message)
    return checked.status


def _note_default(args: argparse.Namespace) -> None:
    """Say on stderr when a schema command falls back on the embedded database."""
    notice = migrate.default_notice(args.dsn)
    if notice is not None:
        print(f"chatledger {args.command}: {notice}", file=sys.stderr)


def _revision(revision: str | None) -> str:
    return revision or "<none>"


#: This group's commands, in the order ``--help`` lists them.
COMMANDS: tuple[Command, ...] = (
    Command(
        "upgrade",
        "migrate the database to the newest schema revision, as the owner, and say what was applied",
        _configure_upgrade,
        _upgrade,
    ),
    Command(
        "downgrade",
        "migrate the database down to REVISION ('base' drops every chatledger table); refuses to drop "
        "tables holding rows (exit 1) unless --yes",
        _configure_downgrade,
        _downgrade,
    ),
    Command(
        "current",
        "show the database's schema revision, which chatledger code can use it, the head revision and "
        "the standing",
        add_dsn,
        _current,
    ),
    Command(
        "check",
        "exit 0 if this chatledger can use the database (at its head, or at a newer revision "
        "compatible with it), 1 if the database is behind (upgrade it), 3 if it is too new "
        "(upgrade chatledger), 4 if sessions hold raw messages written outside chatledger past "
        "their counter row (zett-agent's own store after adopt; appends to them fail), 5 if it is at "
        "head but its tables differ from what the head revision creates (an index, constraint, column, "
        "type or collation changed by hand; the SQL that fixes it goes to stdout)",
        _configure_check,
        _check,
    ),
)
