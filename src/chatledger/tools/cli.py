"""The ``chatledger`` command: the demo, the schema commands, adopting zett-agent's
database, moving sessions (export, import, copy) and looking at them (sessions).

Every subcommand is one :class:`~chatledger.tools.commands.shared.Command` (name,
help, its arguments, and an async ``run`` returning the exit status), listed by its
group's module in :mod:`chatledger.tools.commands`: ``demo``; ``schema`` (upgrade,
downgrade, current, check); ``load`` (stress, bench); ``adopt``; ``transfer``
(export, import, copy); ``sessions``. :data:`COMMANDS`, the table here, joins the
groups in the order ``--help`` lists them.

A new command group is a new module ``chatledger/tools/commands/<group>.py`` ending
in its own ``COMMANDS: tuple[Command, ...]`` (from :mod:`chatledger.tools.commands.shared`:
``Command``, ``add_dsn``, ``say``...; import what only its commands need inside their
``run``, so that ``--help`` stays quick), and one line in :data:`COMMANDS`:
``*<group>.COMMANDS,``. A new command in an existing group is one function and one
entry in that group's ``COMMANDS``.

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
import sys
from collections.abc import Sequence

from rich.console import Console
from sqlalchemy.exc import SQLAlchemyError

from .. import __version__, dialects, interactive
from ..dsn import display, resolve_dsn
from ..errors import AUTO_UPGRADE_HINT, ChatledgerError, SchemaNotReady
from . import interrupt
from .commands import adopt, demo, load, retention, schema, sessions, stats, transfer
from .commands.schema import CHECK_PAST_COUNTER, CHECK_STATUS
from .commands.shared import Command, add_dsn, concrete, mask_password

__all__ = [
    "CHECK_PAST_COUNTER",
    "CHECK_STATUS",
    "CLOSED_PIPE",
    "COMMANDS",
    "MAX_WIDTH",
    "USAGE_ERROR",
    "Command",
    "add_dsn",
    "build_parser",
    "main",
    "run",
    "user_error",
]

#: Exit status of a usage error (argparse uses the same).
USAGE_ERROR = 2
#: Widest the rich output gets, however wide the terminal.
MAX_WIDTH = 120

#: Every subcommand, in the order ``--help`` lists them: each group's, group by group.
COMMANDS: tuple[Command, ...] = (
    *demo.COMMANDS,
    *schema.COMMANDS,
    *load.COMMANDS,
    *adopt.COMMANDS,
    *transfer.COMMANDS,
    *sessions.COMMANDS,
    *stats.COMMANDS,
    *retention.COMMANDS,
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
            message = mask_password(message, other)
        for dsn in dsns:
            message = concrete(message, dsn, placeholder=len(dsns) == 1)
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

    The DSN's password, when one was given, is masked wherever it appears; a store's
    advice to pass ``auto_upgrade=True`` is left out (no command takes it).
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
        if isinstance(error, SchemaNotReady):  # a store's option, which no command takes
            message = message.replace(AUTO_UPGRADE_HINT, "")
    else:
        return None
    message = " ".join(message.split())
    return mask_password(message, dsn)


def _database_error(error: SQLAlchemyError, dsn: str | None) -> str:
    """The message of :func:`chatledger.dialects.database_error` for ``error`` on the
    database of ``dsn``; the driver's own words when that DSN cannot be read."""
    try:
        url = resolve_dsn(dsn)
        found = dialects.backend(url.get_backend_name(), url.get_driver_name())
    except (ValueError, TypeError):
        return f"database {_where(dsn)}: {getattr(error, 'orig', None) or error}"
    return str(dialects.database_error(found, error, url))


def _where(dsn: str | None) -> str:
    try:
        return display(resolve_dsn(dsn))
    except (ValueError, TypeError):
        return "(invalid DSN)"


if __name__ == "__main__":
    sys.exit(main())
