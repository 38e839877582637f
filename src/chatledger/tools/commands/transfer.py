"""Moving sessions: ``export``, ``import`` and ``copy`` (:mod:`chatledger.tools.transfer`)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from ...kinds import Checkpointed, Grouped, Log, Rows, SessionKind, registered
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
    exported = " and ".join(_exported(kind, counts) for kind in registered())
    say(messages, f"exported {exported} to {args.output or 'stdout'}")
    return 0


def _exported(kind: SessionKind, counts: dict[str, int]) -> str:
    """``3 zett sessions (5 messages, 1 checkpoint)``: one kind's part of an export."""
    sessions, details = 0, []
    for layout in kind.records:
        if isinstance(layout, Checkpointed):
            sessions += counts.get(layout.count, 0)
            details += [
                counted(counts.get(layout.entries_count, 0), "message"),
                counted(counts.get(layout.checkpoints_count, 0), "checkpoint"),
            ]
        elif isinstance(layout, Log):
            sessions += counts.get(layout.count, 0)
            details.append(counted(counts.get(layout.entries_count, 0), layout.entries_name[:-1]))
        elif isinstance(layout, Grouped):
            sessions += counts.get(layout.count, 0)
            details.append(counted(counts.get(layout.parts[0].count, 0), kind.entry or "entry"))
        elif layout.sessions:
            sessions += counts.get(layout.count, 0)
    states = _state_rows(kind)
    if states:
        details.append(counted(counts.get(states[0].count, 0), _state_noun(kind)))
    text = counted(sessions, f"{kind.label} session")
    return f"{text} ({', '.join(details)})" if details else text


def _state_rows(kind: SessionKind) -> list[Rows]:
    """The rows of state the kind's sessions share (ADK's ``app:``/``user:`` state)."""
    return [layout for layout in kind.records if isinstance(layout, Rows) and not layout.sessions]


def _state_noun(kind: SessionKind | None) -> str:
    """What the summaries count the kind's state rows as ("app:/user: state row")."""
    states = [] if kind is None else _state_rows(kind)
    return (states[0].counted_as or states[0].noun) if states else "state row"


def _labelled(label: str) -> SessionKind | None:
    """The kind the reports name ``label``."""
    return next((kind for kind in registered() if kind.label == label), None)


def _moving_in() -> list[SessionKind]:
    """The kinds with an import from their framework's own tables."""
    return [kind for kind in registered() if kind.moves_in is not None]


def _configure_import(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)
    parser.add_argument(
        "file", metavar="FILE", nargs="?", help="an export of chatledger export (.gz too); - reads stdin"
    )
    for kind in _moving_in():
        assert kind.moves_in is not None
        parser.add_argument(kind.moves_in.flag, metavar="DSN", help=kind.moves_in.help)
    for kind in _moving_in():
        assert kind.moves_in is not None
        for option in kind.moves_in.options:
            parser.add_argument(option.flag, default=option.default, help=option.help)
    flags = " or ".join(kind.moves_in.flag for kind in _moving_in() if kind.moves_in is not None)
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help=f"with {flags}: count what would be imported; write nothing",
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


def _by_framework(report: Any, verb: str) -> list[str]:
    """One line per kind the input held: its sessions imported (with their entries and
    tombstones), identical, differing and refused; the state rows they share."""
    lines = []
    for framework, counts in report.frameworks.items():
        kind = _labelled(framework)
        entries = kind.entry or "" if kind is not None else ""
        details = [counted(counts.entries, entries)] if entries else []
        if counts.tombstones:
            details.append(f"{counts.tombstones:,} deleted or cleared, as tombstones")
        if counts.states or counts.states_identical:
            details.append(
                f"{counted(counts.states, _state_noun(kind))}, {counts.states_identical:,} of them "
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
    sources = [kind for kind in _moving_in() if getattr(args, _dest(kind)) is not None]
    if (args.file is not None) + len(sources) != 1:
        choices = ", ".join(f"{kind.moves_in.flag} DSN" for kind in _moving_in() if kind.moves_in is not None)
        raise ValueError(f"give FILE or {choices} (one of them)")
    if sources:
        return await _move_in(sources[0], args, console)
    from ..transfer import import_file

    report = await import_file(args.dsn, args.file, console=console, say=lambda line: say(console, line))
    return _import_summary(console, report)


def _dest(kind: SessionKind) -> str:
    assert kind.moves_in is not None
    return kind.moves_in.name


async def _move_in(kind: SessionKind, args: argparse.Namespace, console: Console) -> int:
    """An import from the framework's own tables (``--openai-sdk``, ``--adk``)."""
    from ..moving_in import move_in

    moves_in = kind.moves_in
    assert moves_in is not None
    source = getattr(args, moves_in.name)
    args.dsn = [source, args.dsn]  # both, for run() to mask their passwords
    options = {option.name: getattr(args, option.name) for option in moves_in.options}
    report = await move_in(kind.name, source, args.dsn[1], dry_run=args.dry_run, **options)
    if report.report is not None:
        for line in report.report.problems:
            say(console, line)
    verb = "would import" if report.dry_run else "imported"
    details = [counted(report.entries, kind.entry or "entry")]
    states = bool(_state_rows(kind))
    if states:
        details.append(counted(report.states, _state_noun(kind)))
    if report.dry_run:
        there = f"{report.identical:,} already there, compared on import"
    elif states:
        there = (
            f"{counted(report.identical, 'session')} and {counted(report.states_identical, 'state row')} "
            "already there and identical, skipped"
        )
    else:
        there = f"{report.identical:,} already there and identical, skipped"
    noun, after = moves_in.skipped
    say(
        console,
        f"{verb} {counted(report.sessions, f'{kind.label} session')} ({', '.join(details)}); {there}; "
        f"{report.differing:,} differing, left alone; {report.failed:,} refused; "
        f"{counted(report.skipped, noun)} {after}",
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
