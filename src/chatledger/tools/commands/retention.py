"""``chatledger retention``: the retention policy (:mod:`chatledger.retention`) as a command.

Its group joins :data:`chatledger.tools.cli.COMMANDS` by one line.
"""

from __future__ import annotations

import argparse
import json
from datetime import timedelta

from rich.console import Console

from ...kinds import chosen, registered
from ...options import LedgerOptions
from ..words import counted
from .shared import Command, add_dsn, add_kind

#: The retry budget of a retention run, in seconds: the library's, not the interactive
#: commands' (chatledger/interactive.py): a run from cron meeting a failover halfway
#: would otherwise stop after 5 s and leave the rest to the next run.
SERVICE_BUDGET: float = LedgerOptions.model_fields["retry_timeout"].default

HELP = (
    "delete the sessions idle longer than a duration and purge the tombstones of sessions deleted "
    "longer ago than a horizon, of each kind of session (docs/retention.md)"
)


def _defaults() -> str:
    """The kinds a run handles unless told, and the others, in words."""
    handled = [kind.name for kind in registered() if kind.retained_by_default]
    named = [kind.name for kind in registered() if not kind.retained_by_default]
    text = " and ".join(handled)
    if named:
        text += (
            f"; {' and '.join(named)} only when named, once every writer of theirs runs this release: "
            "docs/retention.md"
        )
    return text


def configure(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)
    parser.add_argument(
        "--idle",
        metavar="AGE",
        help="delete sessions last active longer ago than AGE: 90d, 12h, 30m, 2w, 1d12h",
    )
    parser.add_argument(
        "--tombstones-after",
        metavar="AGE",
        help="purge the tombstones of sessions deleted longer ago than AGE (their ids' high-water "
        "marks stay, so no sequence or version is reused)",
    )
    add_kind(parser, _defaults())
    parser.add_argument("--dry-run", action="store_true", help="delete nothing: count what would be deleted")
    parser.add_argument(
        "--batch-size", type=int, default=500, metavar="N", help="ids read per batch (default: 500)"
    )
    parser.add_argument(
        "--retry-timeout",
        type=float,
        default=SERVICE_BUDGET,
        metavar="SECONDS",
        help="how long each call retries a database that does not answer (default: "
        f"{SERVICE_BUDGET:g}, a service's budget, which rides out a failover: a run from cron has "
        "no one waiting, unlike the other commands' 5)",
    )
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")


def _age(value: str | None, option: str) -> timedelta | None:
    from ..sessions import parse_age

    if value is None:
        return None
    try:
        return parse_age(value)
    except ValueError:
        raise ValueError(f"{option} {value!r} is not a duration such as 90d, 12h, 90m, 45s or 2w") from None


async def run(args: argparse.Namespace, console: Console) -> int:
    from ... import retention

    if args.idle is None and args.tombstones_after is None:
        raise ValueError("say what to delete: --idle AGE and/or --tombstones-after AGE")
    policy = retention.Policy(
        idle=_age(args.idle, "--idle"),
        tombstones_after=_age(args.tombstones_after, "--tombstones-after"),
    )
    if args.retry_timeout < 0:
        raise ValueError(f"--retry-timeout must not be negative, not {args.retry_timeout:g}")
    kinds = chosen(args.kind, [kind for kind in registered() if kind.retained_by_default])
    report = await retention.apply(
        args.dsn,
        policy,
        dry_run=args.dry_run,
        kinds=[kind.name for kind in kinds],
        batch_size=args.batch_size,
        retry_timeout=args.retry_timeout,
    )
    if args.json:
        print(
            json.dumps(
                {
                    "dry_run": report.dry_run,
                    "idle_before": report.idle_before and report.idle_before.isoformat(),
                    "deleted_before": report.deleted_before and report.deleted_before.isoformat(),
                    "sessions": report.sessions,
                    "kept": report.kept,
                    "tombstones": report.tombstones,
                },
                sort_keys=True,
            )
        )
        return 0
    verb = "would delete" if report.dry_run else "deleted"
    purged = "would purge" if report.dry_run else "purged"
    for kind in kinds:
        name = kind.name
        if name not in report.sessions and name not in report.tombstones:
            console.print(f"{name}: not installed (pip install 'chatledger[{kind.extra}]')", markup=False)
            continue
        parts = []
        if name in report.sessions:
            parts.append(f"{verb} {counted(report.sessions[name], 'idle session')}")
            if report.kept.get(name):
                parts.append(f"kept {counted(report.kept[name], 'session')} written to meanwhile")
        if name in report.tombstones:
            parts.append(f"{purged} {counted(report.tombstones[name], 'tombstone')}")
        console.print(f"{name}: {', '.join(parts)}", markup=False, highlight=False)
    if report.dry_run:
        console.print("dry run: nothing deleted", markup=False)
    return 0


COMMANDS: tuple[Command, ...] = (Command("retention", HELP, configure, run),)
