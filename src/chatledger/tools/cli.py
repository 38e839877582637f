"""The ``chatledger`` command: the demo, the schema commands, adopting zett-agent's
database, moving sessions (export, import, copy) and looking at them (sessions).

Every subcommand is one :class:`Command` in :data:`COMMANDS` (name, help, its
arguments, and an async ``run`` returning the exit status), so a new one is one
small function and one entry.

DSN rule, for every subcommand (see
:func:`chatledger.dsn.resolve_dsn`): ``--dsn``, else ``CHATLEDGER_DSN``, else the
embedded SQLite default; the schema commands say on stderr when they fall back on
the embedded file, and where it is. Output shows a DSN only through
:func:`chatledger.dsn.display`, so a password is never printed; advice naming a
command (``chatledger adopt --dsn DSN``) names the DSN the command was given.

Exit status: 0 success; 1 ``check`` found the database behind, ``import`` or
``copy`` found sessions differing from the target's (or refused, or a cut-off
input), ``sessions show`` / ``delete`` found no such session, ``sessions delete`` /
``purge`` was not confirmed, ``downgrade`` would drop tables holding rows without
``--yes``; 3 ``check`` found it at a newer revision this chatledger cannot run on;
4 ``check`` found sessions with raw messages past their counter row (written
outside chatledger); 5 ``check`` found the database at head but its tables differing
from what the head revision creates (schema drift; the fix is printed on stdout); 141
standard output was closed (``| head``), quietly; 2 a usage error (bad arguments or
DSN, no such SQLite file, unreachable server, database not migrated, zett-agent's
tables not adopted, unknown revision, a schema ``adopt`` does not recognise, a
malformed export, schema lock not granted in time): one line on stderr, no traceback;
130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import shlex
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from rich.console import Console
from sqlalchemy.exc import SQLAlchemyError

from .. import __version__, dialects, interactive, migrate
from ..drift import fix_script
from ..dsn import DSN_ENV, as_argument, default_sqlite_path, display, resolve_dsn
from ..errors import ChatledgerError, DowngradeRefused
from . import interrupt, retention_cli
from .words import counted

#: Exit status of a usage error (argparse uses the same).
USAGE_ERROR = 2
#: Widest the rich output gets, however wide the terminal.
MAX_WIDTH = 120


@dataclass(frozen=True)
class Command:
    """One subcommand: ``configure`` adds its arguments, ``run`` does the work and
    returns the exit status."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Console], Awaitable[int]]


def add_dsn(parser: argparse.ArgumentParser) -> None:
    """The ``--dsn`` option every subcommand shares."""
    parser.add_argument(
        "--dsn",
        help="database URL (postgresql://, postgresql+psycopg://, mysql://, mariadb://, "
        f"sqlite:///PATH); default: ${DSN_ENV}, else the embedded SQLite database",
    )


# -- demo ---------------------------------------------------------------------------


def _configure_demo(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)


async def _demo(args: argparse.Namespace, console: Console) -> int:
    try:
        from .demo import SESSION_PREFIX, run_demo  # imports zett-agent, which only the demo needs
    except ModuleNotFoundError as error:
        if error.name != "zett_agent" and not (error.name or "").startswith("zett_agent."):
            raise
        raise ImportError("the demo needs zett-agent: pip install 'chatledger[zett]'") from error
    demo = await run_demo(args.dsn, console)
    # Command lines to paste: the DSN as given (password masked), quoted for a shell.
    dsn = f" --dsn {shlex.quote(_dsn_hint(args.dsn))}" if args.dsn else ""
    _say(console, f"the demo left its session {demo.session_id} in {demo.database}; look at it:")
    _say(console, f"  chatledger sessions show {demo.session_id}{dsn}")
    _say(console, f"  chatledger sessions list{dsn}")
    _say(console, "remove it, or every session the demo left:")
    _say(console, f"  chatledger sessions delete {demo.session_id}{dsn}")
    _say(console, f"  chatledger sessions purge --prefix {SESSION_PREFIX}{dsn}")
    return 0


# -- schema commands ----------------------------------------------------------------


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
    _say(console, done.summary)
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
        print(f"chatledger downgrade: {_concrete(str(refused), args.dsn)}", file=sys.stderr)
        return 1
    _say(console, f"{display(resolve_dsn(args.dsn))} is at revision {_revision(reached)}")
    return 0


async def _current(args: argparse.Namespace, console: Console) -> int:
    _note_default(args)
    found = await migrate.current(args.dsn)
    for line in found.lines:
        _say(console, _concrete(line, args.dsn))
    return 0


#: ``chatledger check`` exit status per standing: 0 this chatledger can use the database.
CHECK_STATUS = migrate.CHECK_STATUS
#: ``chatledger check`` exit status of a usable schema whose sessions hold raw messages
#: past their counter row (written outside chatledger): appends to them fail.
CHECK_PAST_COUNTER = migrate.CHECK_PAST_COUNTER


async def _check(args: argparse.Namespace, console: Console) -> int:
    _note_default(args)
    checked = await migrate.check(args.dsn)
    if checked.drift:  # the SQL that fixes it, a script for the database's own client
        console.file.write(fix_script(checked.drift, checked.url.get_backend_name()))
        console.file.flush()
    message = _concrete(checked.message, args.dsn)
    if checked.status:
        print(f"chatledger check: {message}", file=sys.stderr)
    else:
        _say(console, message)
    return checked.status


def _note_default(args: argparse.Namespace) -> None:
    """Say on stderr when a schema command falls back on the embedded database."""
    notice = migrate.default_notice(args.dsn)
    if notice is not None:
        print(f"chatledger {args.command}: {notice}", file=sys.stderr)


def _concrete(message: str, dsn: str | None, *, placeholder: bool = True) -> str:
    """``message`` with the ``--dsn`` of the commands it advises naming the database as
    this command was given it (the DSN as typed, password masked; ``"$CHATLEDGER_DSN"``):
    the library names the URL it opened (:func:`chatledger.dsn.as_argument`); with
    ``placeholder``, ``--dsn DSN`` too (this command's own advice, for its one database)."""
    if dsn:
        given = _dsn_hint(dsn)
    elif os.environ.get(DSN_ENV):
        given = f'"${DSN_ENV}"'
    else:
        given = f"sqlite:///{default_sqlite_path()}"
    try:
        opened = as_argument(resolve_dsn(dsn))
    except (ValueError, TypeError):
        opened = None
    for named in (opened, "DSN" if placeholder else None):
        if named is not None:
            message = message.replace(f"--dsn {named}", f"--dsn {given}")
    return message


# -- stress -------------------------------------------------------------------------


def _configure_stress(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dsn",
        action="append",
        help=f"database URL, repeatable: one report per database; default: ${DSN_ENV}, else the embedded one",
    )
    parser.add_argument("--processes", type=int, default=8, metavar="N", help="worker processes (default: 8)")
    parser.add_argument(
        "--appends", type=int, default=200, metavar="N", help="appends per worker and session (default: 200)"
    )
    parser.add_argument("--shared-only", action="store_true", help="skip each worker's own session")
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="the --dsn values are the nodes of one cluster (Galera): spread the workers over them, "
        "read each append back through another node, compare the nodes; one report",
    )


async def _stress(args: argparse.Namespace, console: Console) -> int:
    from rich.table import Table

    from .stress import run_stress

    if args.processes < 1 or args.appends < 1:
        raise ValueError("--processes and --appends must be at least 1")
    if args.cluster and len(args.dsn or []) < 2:
        raise ValueError("--cluster needs the DSN of every node: --dsn NODE1 --dsn NODE2 ...")
    table = Table(title=f"stress: {args.processes} processes x {args.appends} appends")
    for column in ("backend", "appends/s", "acknowledged", "errors", "retries", "gaps", "duplicates", "lost"):
        table.add_column(column, justify="right", min_width=len(column), no_wrap=True)
    cluster = Table(title="the cluster's nodes: causal reads (through the next node) and agreement")
    for column in ("nodes", "causal reads", "causal misses", "errors per node", "disagreeing", "unreachable"):
        cluster.add_column(column, justify="right", min_width=len(column), no_wrap=True)
    clean = True
    left: list[str] = []
    targets: list[Any] = [args.dsn] if args.cluster else (args.dsn or [None])
    for dsn in targets:
        nodes = [resolve_dsn(node) for node in dsn] if args.cluster else [resolve_dsn(dsn)]
        _say(console, f"stressing {', '.join(display(url) for url in nodes)} ...")
        report = await run_stress(
            nodes if args.cluster else nodes[0],
            processes=args.processes,
            appends=args.appends,
            own_sessions=not args.shared_only,
        )
        clean = clean and report.clean
        counts = (
            report.acknowledged,
            report.errors,
            report.retries,
            report.gaps,
            report.duplicates,
            report.lost,
        )
        table.add_row(report.backend, f"{report.appends_per_second:.0f}", *(str(count) for count in counts))
        cluster.add_row(
            str(report.nodes),
            str(report.causal_reads),
            str(report.causal_misses),
            "/".join(str(count) for count in report.node_errors),
            str(report.disagreeing_nodes),
            str(report.unreachable_nodes),
        )
        for sample in report.error_samples:
            for node in dsn if args.cluster else [dsn]:
                sample = _mask_password(sample, node)
            _say(console, f"error: {sample}")
        sessions = report.processes + 1 if not args.shared_only else 1
        first = dsn[0] if args.cluster else dsn
        target = f" --dsn {_dsn_hint(first)}" if first else ""
        left.append(
            f"{sessions} sessions {report.session_prefix}* left in {display(nodes[0])}; remove them with: "
            f"chatledger sessions purge --prefix {report.session_prefix}{target}"
        )
    console.print(table)
    if args.cluster:
        console.print(cluster)
    for line in left:
        _say(console, line)
    return 0 if clean else 1


# -- bench --------------------------------------------------------------------------


def _configure_bench(parser: argparse.ArgumentParser) -> None:
    from .bench import configure

    configure(parser)


async def _bench(args: argparse.Namespace, console: Console) -> int:
    from .bench import run_command

    return await run_command(args, console)


# -- adopt, export, import, copy, sessions ----------------------------------------------


def _configure_adopt(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)
    parser.add_argument("--dry-run", action="store_true", help="check and print the steps; change nothing")


async def _adopt(args: argparse.Namespace, console: Console) -> int:
    from .adopt import adopt

    report = await adopt(args.dsn, dry_run=args.dry_run, say=lambda line: _say(console, f"- {line}"))
    if report.already:  # as `upgrade` of a database at head: nothing to do, and no error
        head = migrate.head_revision()
        line = f"{report.database} is chatledger's already (revision {report.revision}): nothing to adopt"
        if report.revision != head:
            line += f"; upgrade it to {head} {migrate.upgrade_advice(resolve_dsn(args.dsn))}"
        _say(console, _concrete(line, args.dsn))
        return 0
    what = ", ".join(
        (
            counted(report.sessions, "session"),
            counted(report.messages, "raw message"),
            counted(report.checkpoints, "checkpoint"),
        )
    )
    if report.dry_run:
        _say(console, f"{report.database} holds zett-agent's tables ({what}); adopt would:")
        for step in report.steps:
            _say(console, f"- {step}")
        _say(console, "dry run: nothing was changed")
        return 0
    resumed = ", continuing an adoption that had stopped" if report.resumed else ""
    _say(console, f"adopted {report.database}{resumed}: {what}; now at revision {report.revision}")
    _say(console, f"see them with: chatledger sessions list --dsn {_dsn_hint(args.dsn)}")
    return 0


def _dsn_hint(dsn: str | None) -> str:
    """The DSN as the user gave it, for a follow-up command line, password masked."""
    return _mask_password(dsn, dsn) if dsn else "DSN"


def _configure_export(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)
    parser.add_argument(
        "--session", action="append", metavar="ID", help="export only this session (repeatable)"
    )
    parser.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write here (gzip-compressed when it ends in .gz); default: stdout",
    )


async def _export(args: argparse.Namespace, console: Console) -> int:
    from .transfer import export, open_output

    # The data may go to stdout: progress and messages go to stderr then.
    messages = console if args.output not in (None, "-") else Console(stderr=True, highlight=False)
    output = open_output(args.output)
    try:
        counts = await export(args.dsn, output, ids=args.session, console=messages)
    finally:
        if output is not sys.stdout:
            output.close()
    _say(
        messages,
        f"exported {counted(counts.sessions, 'zett session')} ({counted(counts.messages, 'message')}, "
        f"{counted(counts.snapshots, 'checkpoint')}) and {counted(counts.rein_sessions, 'rein session')} "
        f"to {args.output or 'stdout'}",
    )
    return 0


def _configure_import(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)
    parser.add_argument(
        "file", metavar="FILE", help="an export of chatledger export (.gz too); - reads stdin"
    )


def _import_summary(console: Console, report: Any, verb: str = "imported") -> int:
    tombstones = "a tombstone" if report.tombstones == 1 else "tombstones"
    deleted = f"{report.tombstones:,} of them deleted, {verb} as {tombstones}; " if report.tombstones else ""
    _say(
        console,
        f"{verb} {counted(report.imported, 'session')} ({deleted}{counted(report.messages, 'message')}, "
        f"{counted(report.snapshots, 'checkpoint')}) into {report.target}; {report.identical:,} already "
        "there and identical, skipped",
    )
    if report.differing or report.failed:
        differ = "differs" if report.differing == 1 else "differ"
        were = "was" if report.failed == 1 else "were"
        _say(
            console,
            f"{report.differing:,} {differ} from the database's and {report.failed:,} {were} refused; "
            "see above",
        )
    if not report.complete:
        _say(console, "the input ended before its end record (truncated?); what it held was imported")
    return 0 if report.clean else 1


async def _import(args: argparse.Namespace, console: Console) -> int:
    from .transfer import import_file

    report = await import_file(args.dsn, args.file, console=console, say=lambda line: _say(console, line))
    return _import_summary(console, report)


def _configure_copy(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from", dest="source", required=True, metavar="DSN", help="the database to copy from"
    )
    parser.add_argument("--to", dest="target", required=True, metavar="DSN", help="the database to copy into")
    parser.add_argument(
        "--session", action="append", metavar="ID", help="copy only this session (repeatable)"
    )


async def _copy(args: argparse.Namespace, console: Console) -> int:
    from .transfer import copy

    # Both DSNs, for run() to mask their passwords in an error message.
    args.dsn = [args.source, args.target]
    report = await copy(
        args.source, args.target, ids=args.session, console=console, say=lambda line: _say(console, line)
    )
    return _import_summary(console, report, "copied")


#: What deleting a session leaves of its id, as ``sessions delete`` and ``purge`` say it.
_RESERVED = (
    "each deleted id keeps a tombstone, so a zett append to it raises SessionDeleted (a late "
    "writer never revives it) until create_session(session_id=...) starts it anew; a rein save "
    "starts it anew"
)


def _configure_sessions(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help, description=description or help)
        add_dsn(sub)
        sub.add_argument("--kind", choices=("zett", "rein"), help="only this kind of session (default: both)")
        return sub

    listing = action("list", "the newest sessions, zett's and rein's")
    listing.add_argument("--limit", type=int, default=20, metavar="N", help="sessions per kind (default: 20)")
    listing.add_argument("--json", action="store_true", help="print JSON instead of tables")
    show = action("show", "one session: its fields, checkpoint and raw-log tail (rein: its messages)")
    show.add_argument("id", metavar="ID")
    show.add_argument(
        "--messages", type=int, default=50, metavar="N", help="show at most the last N messages (default: 50)"
    )
    delete = action(
        "delete",
        "delete one session with its whole history (asks first)",
        f"delete one session with its whole history (asks first; exit 1 if not confirmed). {_RESERVED}",
    )
    delete.add_argument("id", metavar="ID")
    delete.add_argument("--yes", action="store_true", help="do not ask")
    purge = action(
        "purge",
        "delete old sessions in batches (asks first)",
        "delete the sessions last active before a time and/or whose id starts with a prefix, in "
        f"batches (asks first; exit 1 if not confirmed). Purged ids stay reserved: {_RESERVED}",
    )
    purge.add_argument(
        "--older-than",
        metavar="AGE",
        help="last active longer ago than AGE: 45s, 90m, 12h, 30d, 2w (or 1d12h)",
    )
    purge.add_argument("--prefix", help="only sessions whose id starts with PREFIX (e.g. stress-)")
    purge.add_argument(
        "--dry-run",
        action="store_true",
        help="delete nothing: count what would be deleted and list the first ids of each kind",
    )
    purge.add_argument("--yes", action="store_true", help="do not ask")


async def _sessions(args: argparse.Namespace, console: Console) -> int:
    from . import sessions

    kinds = (args.kind,) if args.kind else sessions.KINDS
    if args.action == "list":
        listing = await sessions.list_sessions(args.dsn, limit=args.limit, kinds=kinds)
        sessions.print_list(listing, console, as_json=args.json)
        return 0
    if args.action == "show":
        found = await sessions.show(args.dsn, args.id, console, messages=args.messages, kinds=kinds)
        return 0 if found else 1
    if args.action == "delete":
        return await sessions.delete(args.dsn, args.id, console, yes=args.yes, kinds=kinds)
    age = sessions.parse_age(args.older_than) if args.older_than is not None else None
    return await sessions.purge(
        args.dsn, console, older_than=age, prefix=args.prefix, dry_run=args.dry_run, yes=args.yes, kinds=kinds
    )


#: Every subcommand, in the order ``--help`` lists them.
COMMANDS: tuple[Command, ...] = (
    Command(
        "demo",
        "run a zett-agent conversation (tool call, compaction, restart) on the database and show what "
        "was stored",
        _configure_demo,
        _demo,
    ),
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
        add_dsn,
        _check,
    ),
    Command(
        "stress",
        "append from many processes at once; report throughput, errors, retries, gaps and duplicates "
        "(exit 1 unless all are clean)",
        _configure_stress,
        _stress,
    ),
    Command(
        "bench",
        "benchmark chatledger against zett-agent's SQL store and a bare INSERT (needs the dev extra)",
        _configure_bench,
        _bench,
    ),
    Command(
        "adopt",
        "convert zett-agent's own tables in the database to chatledger's schema, in place",
        _configure_adopt,
        _adopt,
    ),
    Command("export", "write sessions as JSON lines (docs/export-format.md)", _configure_export, _export),
    Command(
        "import",
        "read an export into the database; sessions it has already are compared, never overwritten "
        "(exit 1 if any differ)",
        _configure_import,
        _import,
    ),
    Command("copy", "copy sessions from one database into another, directly", _configure_copy, _copy),
    Command("sessions", "list, show, delete and purge stored sessions", _configure_sessions, _sessions),
    retention_cli.register(Command),  # retention: tools/retention_cli.py
)


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    """The ``chatledger`` argument parser, one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="chatledger", description="AI-agent conversation sessions in one SQL schema."
    )
    parser.add_argument("--version", action="version", version=f"chatledger {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in commands:
        sub = subparsers.add_parser(command.name, help=command.help, description=command.help)
        command.configure(sub)
        sub.set_defaults(run=command.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``chatledger`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    A user mistake (bad DSN, unreachable server, database not migrated, bad
    revision) prints one line to stderr and returns 2, without a traceback.
    """
    try:
        return asyncio.run(run(argv))
    except KeyboardInterrupt:
        print(interrupt.message(), file=sys.stderr)  # what was committed: tools/interrupt.py
        return 130
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        return _quiet_closed_stdout()


async def run(argv: Sequence[str] | None = None, console: Console | None = None) -> int:
    """:func:`main` inside a running event loop (for tests and embedding): parse
    ``argv``, run the command, turn a user mistake into one stderr line and status 2.

    Raises:
        SystemExit: from argparse, for bad arguments, ``--help`` and ``--version``.
    """
    args = build_parser().parse_args(argv)
    if console is None:
        console = _Console(highlight=False)
        # A terminal's own width, up to MAX_WIDTH; piped output gets MAX_WIDTH, not rich's 80.
        console.width = min(console.width, MAX_WIDTH) if console.is_terminal else MAX_WIDTH
    try:
        with interactive.command():  # a shorter retry budget, said once: chatledger/interactive.py
            status: int = await args.run(args, console)
    except Exception as error:
        if isinstance(error, BrokenPipeError) and _stdout_closed():
            return _quiet_closed_stdout()
        given = getattr(args, "dsn", None)
        dsns: list[str | None] = list(given) if isinstance(given, list) else [given]
        message = user_error(error, dsns[0])
        if message is None:
            raise
        for other in dsns[1:]:
            message = _mask_password(message, other)
        for dsn in dsns:
            message = _concrete(message, dsn, placeholder=len(dsns) == 1)
        command = " ".join(filter(None, (args.command, getattr(args, "action", None))))
        print(f"chatledger {command}: {message}", file=sys.stderr)
        return USAGE_ERROR
    return status


#: Exit status when standard output was closed under the command (``| head``): that of a
#: process killed by SIGPIPE, as git's.
CLOSED_PIPE = 128 + 13


class _Console(Console):
    """rich's console, which exits as the rest of the command does when standard
    output's reader has gone: quietly, with :data:`CLOSED_PIPE` (rich's own: status 1)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise SystemExit(_quiet_closed_stdout())


def _stdout_closed() -> bool:
    """Whether standard output is a pipe (or socket) whose reader has gone."""
    try:
        descriptor = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    if not hasattr(select, "poll"):  # Windows: a broken pipe there is stdout's
        return True
    poller = select.poll()
    poller.register(descriptor, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _quiet_closed_stdout() -> int:
    """Exit as a command piped into ``head`` does: no message, and :data:`CLOSED_PIPE`.
    Standard output goes to the null device first, so that the interpreter's own flush
    at exit finds nothing broken to complain about."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    return CLOSED_PIPE


def user_error(error: Exception, dsn: str | None) -> str | None:
    """One line explaining a user's mistake, or ``None`` for a bug (which keeps its traceback).

    The DSN's password, when one was given, is masked wherever it appears.
    """
    from alembic.util import CommandError

    if isinstance(error, SQLAlchemyError):
        # A tool's own connection (export, import, copy): mapped as the library maps it
        # (chatledger.dialects.database_error), naming the class of failure and the code.
        message = _database_error(error, dsn)
    elif isinstance(error, OSError):
        # Socket errors: their own message, after the database they came from.
        message = f"database {_where(dsn)}: {error}"
    elif isinstance(error, ChatledgerError | ValueError | ImportError | CommandError):
        message = str(error) or type(error).__name__
    else:
        return None
    message = " ".join(message.split())
    return _mask_password(message, dsn)


def _database_error(error: SQLAlchemyError, dsn: str | None) -> str:
    """The message of :func:`chatledger.dialects.database_error` for ``error`` on the
    database of ``dsn``; the driver's own words when that DSN cannot be read."""
    try:
        url = resolve_dsn(dsn)
        found = dialects.rules(url.get_backend_name(), url.get_driver_name())
    except (ValueError, TypeError):
        return f"database {_where(dsn)}: {getattr(error, 'orig', None) or error}"
    return str(dialects.database_error(found, error, url))


def _mask_password(message: str, dsn: str | None) -> str:
    """``message`` with the password of ``dsn`` (or of ``CHATLEDGER_DSN``), as given and
    URL-decoded, replaced by ``***``."""
    for candidate in (dsn, os.environ.get(DSN_ENV)):
        if not candidate:
            continue
        passwords: set[str] = set()
        try:
            # A DSN refused here never reached a driver, and the refusal names no part
            # of it; urlsplit's reading of it might be a mere fragment of the password.
            passwords.add(str(resolve_dsn(candidate).password or ""))
            passwords.add(urlsplit(candidate).password or "")
        except (ValueError, TypeError):
            pass
        for password in sorted(passwords - {""}, key=len, reverse=True):
            message = message.replace(password, "***")
    return message


def _where(dsn: str | None) -> str:
    try:
        return display(resolve_dsn(dsn))
    except (ValueError, TypeError):
        return "(invalid DSN)"


def _revision(revision: str | None) -> str:
    return revision or "<none>"


def _say(console: Console, line: str) -> None:
    console.print(line, markup=False, highlight=False, soft_wrap=True)


if __name__ == "__main__":
    sys.exit(main())
