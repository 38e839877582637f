"""Moving sessions: ``export``, ``import`` and ``copy`` (:mod:`chatledger.tools.transfer`)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from ..words import counted
from .shared import Command, add_dsn, say


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
    from ..transfer import export, open_output

    # The data may go to stdout: progress and messages go to stderr then.
    messages = console if args.output not in (None, "-") else Console(stderr=True, highlight=False)
    with open_output(args.output) as output:
        counts = await export(args.dsn, output, ids=args.session, console=messages)
    say(
        messages,
        f"exported {counted(counts.sessions, 'zett session')} ({counted(counts.messages, 'message')}, "
        f"{counted(counts.snapshots, 'checkpoint')}) and {counted(counts.rein_sessions, 'rein session')}; "
        f"{counted(counts.openai_sessions, 'OpenAI Agents session')} "
        f"({counted(counts.openai_items, 'item')}) "
        f"and {counted(counts.adk_sessions, 'ADK session')} ({counted(counts.adk_events, 'event')}, "
        f"{counted(counts.adk_states, 'app:/user: state row')}) to {args.output or 'stdout'}",
    )
    return 0


def _configure_import(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)
    parser.add_argument(
        "file", metavar="FILE", nargs="?", help="an export of chatledger export (.gz too); - reads stdin"
    )
    parser.add_argument(
        "--openai-sdk",
        metavar="DSN",
        help="instead of FILE: the database the OpenAI Agents SDK's SQLAlchemySession or SQLiteSession "
        "wrote (its agent_sessions/agent_messages tables), never chatledger's own",
    )
    parser.add_argument(
        "--adk",
        metavar="DSN",
        help="instead of FILE: the database Google ADK's DatabaseSessionService wrote (its sessions, "
        "events, app_states and user_states tables)",
    )
    parser.add_argument(
        "--messages-table", default="agent_messages", help="with --openai-sdk: its message table"
    )
    parser.add_argument(
        "--sessions-table", default="agent_sessions", help="with --openai-sdk: its session table"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="with --openai-sdk or --adk: count what would be imported; write nothing",
    )


def _import_summary(console: Console, report: Any, verb: str = "imported") -> int:
    tombstones = "a tombstone" if report.tombstones == 1 else "tombstones"
    deleted = f"{report.tombstones:,} of them deleted, {verb} as {tombstones}; " if report.tombstones else ""
    say(
        console,
        f"{verb} {counted(report.imported, 'session')} ({deleted}{counted(report.messages, 'message')}, "
        f"{counted(report.snapshots, 'checkpoint')}) into {report.target}; {report.identical:,} already "
        "there and identical, skipped",
    )
    for line in _by_framework(report, verb):
        say(console, line)
    if report.marks:
        say(
            console,
            f"{verb} {counted(report.marks, 'high-water mark')} of purged tombstones: those ids number on "
            "in the target as in the source",
        )
    if report.differing or report.failed:
        differ = "differs" if report.differing == 1 else "differ"
        were = "was" if report.failed == 1 else "were"
        say(
            console,
            f"{report.differing:,} {differ} from the database's and {report.failed:,} {were} refused; "
            "see above",
        )
    if not report.complete:
        say(console, "the input ended before its end record (truncated?); what it held was imported")
    return 0 if report.clean else 1


#: What each framework's entries are called.
_ENTRIES = {"zett": "message", "rein": "", "OpenAI Agents": "item", "ADK": "event"}


def _by_framework(report: Any, verb: str) -> list[str]:
    """One line per framework the input held: its sessions imported (with their
    entries and tombstones), identical, differing and refused; ADK's state rows."""
    lines = []
    for framework, counts in report.frameworks.items():
        entries = _ENTRIES.get(framework, "")
        details = [counted(counts.entries, entries)] if entries else []
        if counts.tombstones:
            details.append(f"{counts.tombstones:,} deleted or cleared, as tombstones")
        if counts.states or counts.states_identical:
            details.append(
                f"{counted(counts.states, 'app:/user: state row')}, {counts.states_identical:,} of them "
                "already there and identical"
            )
        line = f"  {framework}: {verb} {counted(counts.imported, 'session')}"
        line += f" ({'; '.join(details)})" if details else ""
        line += f", {counts.identical:,} identical"
        if counts.differing or counts.failed:
            line += f", {counts.differing:,} differing, {counts.failed:,} refused"
        lines.append(line)
    return lines


async def _import(args: argparse.Namespace, console: Console) -> int:
    if [args.file, args.openai_sdk, args.adk].count(None) != 2:
        raise ValueError("give FILE, --openai-sdk DSN or --adk DSN (one of them)")
    if args.openai_sdk is not None:
        return await _import_openai(args, console)
    if args.adk is not None:
        return await _import_adk(args, console)
    from ..transfer import import_file

    report = await import_file(args.dsn, args.file, console=console, say=lambda line: say(console, line))
    return _import_summary(console, report)


async def _import_openai(args: argparse.Namespace, console: Console) -> int:
    from ..openai_import import import_openai_sdk

    args.dsn = [args.openai_sdk, args.dsn]  # both, for run() to mask their passwords
    report = await import_openai_sdk(
        args.openai_sdk,
        args.dsn[1],
        sessions_table=args.sessions_table,
        messages_table=args.messages_table,
        dry_run=args.dry_run,
    )
    if report.report is not None:
        for line in report.report.problems:
            say(console, line)
    verb = "would import" if report.dry_run else "imported"
    there = "already there, compared on import" if report.dry_run else "already there and identical, skipped"
    say(
        console,
        f"{verb} {counted(report.imported, 'OpenAI Agents session')} ({counted(report.items, 'item')}); "
        f"{report.identical:,} {there}; {report.differing:,} differing, left alone; "
        f"{report.failed:,} refused; {counted(report.corrupt, 'source row')} not JSON (or not an item), "
        "skipped",
    )
    return 0 if report.clean else 1


async def _import_adk(args: argparse.Namespace, console: Console) -> int:
    from ..adk_import import import_adk

    args.dsn = [args.adk, args.dsn]  # both, for run() to mask their passwords
    report = await import_adk(args.adk, args.dsn[1], dry_run=args.dry_run)
    if report.report is not None:
        for line in report.report.problems:
            say(console, line)
    verb = "would import" if report.dry_run else "imported"
    if report.dry_run:
        there = f"{counted(report.identical, 'session')} already there, compared on import"
    else:
        there = (
            f"{counted(report.identical, 'session')} and {counted(report.states_identical, 'state row')} "
            "already there and identical, skipped"
        )
    say(
        console,
        f"{verb} {counted(report.sessions, 'ADK session')} ({counted(report.events, 'event')}, "
        f"{counted(report.states, 'app:/user: state row')}); {there}; "
        f"{report.differing:,} differing (sessions or state rows), left alone; {report.failed:,} refused; "
        f"{counted(report.skipped, 'partial event')} skipped",
    )
    return 0 if report.clean else 1


def _configure_copy(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from", dest="source", required=True, metavar="DSN", help="the database to copy from"
    )
    parser.add_argument("--to", dest="target", required=True, metavar="DSN", help="the database to copy into")
    parser.add_argument(
        "--session", action="append", metavar="ID", help="copy only this session (repeatable)"
    )


async def _copy(args: argparse.Namespace, console: Console) -> int:
    from ..transfer import copy

    # Both DSNs, for run() to mask their passwords in an error message.
    args.dsn = [args.source, args.target]
    report = await copy(
        args.source, args.target, ids=args.session, console=console, say=lambda line: say(console, line)
    )
    return _import_summary(console, report, "copied")


#: This group's commands, in the order ``--help`` lists them.
COMMANDS: tuple[Command, ...] = (
    Command("export", "write sessions as JSON lines (docs/export-format.md)", _configure_export, _export),
    Command(
        "import",
        "read an export into the database; sessions it has already are compared, never overwritten "
        "(exit 1 if any differ)",
        _configure_import,
        _import,
    ),
    Command("copy", "copy sessions from one database into another, directly", _configure_copy, _copy),
)
