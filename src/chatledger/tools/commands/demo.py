"""``chatledger demo``: a zett-agent conversation on the database, and the commands
that look at what it left."""

from __future__ import annotations

import argparse
import shlex

from rich.console import Console

from .shared import Command, add_dsn, dsn_hint, say


def _configure_demo(parser: argparse.ArgumentParser) -> None:
    add_dsn(parser)


async def _demo(args: argparse.Namespace, console: Console) -> int:
    try:
        from ..demo import SESSION_PREFIX, run_demo  # imports zett-agent, which only the demo needs
    except ModuleNotFoundError as error:
        if error.name != "zett_agent" and not (error.name or "").startswith("zett_agent."):
            raise
        raise ImportError("the demo needs zett-agent: pip install 'chatledger[zett]'") from error
    demo = await run_demo(args.dsn, console)
    # Command lines to paste: the DSN as given (password masked), quoted for a shell.
    dsn = f" --dsn {shlex.quote(dsn_hint(args.dsn))}" if args.dsn else ""
    say(console, f"the demo left its session {demo.session_id} in {demo.database}; look at it:")
    say(console, f"  chatledger sessions show {demo.session_id}{dsn}")
    say(console, f"  chatledger sessions list{dsn}")
    say(console, "remove it, or every session the demo left:")
    say(console, f"  chatledger sessions delete {demo.session_id}{dsn}")
    say(console, f"  chatledger sessions purge --prefix {SESSION_PREFIX}{dsn}")
    return 0


#: This group's commands, in the order ``--help`` lists them.
COMMANDS: tuple[Command, ...] = (
    Command(
        "demo",
        "run a zett-agent conversation (tool call, compaction, restart) on the database and show what "
        "was stored",
        _configure_demo,
        _demo,
    ),
)
