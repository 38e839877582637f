"""``chatledger adopt``: zett-agent's own tables converted to chatledger's schema, in place
(:mod:`chatledger.tools.adopt`)."""

from __future__ import annotations

import argparse

from rich.console import Console

from ... import migrate
from ...dsn import resolve_dsn
from ..words import counted
from .shared import Command, add_dsn, concrete, dsn_hint, say


def _configure_adopt(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)
    parser.add_argument("--dry-run", action="store_true", help="check and print the steps; change nothing")


async def _adopt(args: argparse.Namespace, console: Console) -> int:
    from ..adopt import adopt

    report = await adopt(args.dsn, dry_run=args.dry_run, say=lambda line: say(console, f"- {line}"))
    if report.already:  # as `upgrade` of a database at head: nothing to do, and no error
        head = migrate.head_revision()
        line = f"{report.database} is chatledger's already (revision {report.revision}): nothing to adopt"
        if report.revision != head:
            line += f"; upgrade it to {head} {migrate.upgrade_advice(resolve_dsn(args.dsn))}"
        say(console, concrete(line, args.dsn))
        return 0
    what = ", ".join(
        (
            counted(report.sessions, "session"),
            counted(report.messages, "raw message"),
            counted(report.checkpoints, "checkpoint"),
        )
    )
    if report.dry_run:
        say(console, f"{report.database} holds zett-agent's tables ({what}); adopt would:")
        for step in report.steps:
            say(console, f"- {step}")
        say(console, "dry run: nothing was changed")
        return 0
    resumed = ", continuing an adoption that had stopped" if report.resumed else ""
    say(console, f"adopted {report.database}{resumed}: {what}; now at revision {report.revision}")
    say(console, f"see them with: chatledger sessions list --dsn {dsn_hint(args.dsn)}")
    return 0


#: This group's commands, in the order ``--help`` lists them.
COMMANDS: tuple[Command, ...] = (
    Command(
        "adopt",
        "convert zett-agent's own tables in the database to chatledger's schema, in place",
        _configure_adopt,
        _adopt,
    ),
)
