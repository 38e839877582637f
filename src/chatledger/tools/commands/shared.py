"""What every command group shares: :class:`Command`, the ``--dsn`` option, and the
DSN as the user gave it in the lines a command prints."""

from __future__ import annotations

import argparse
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from rich.console import Console

from ...dsn import DSN_ENV, as_argument, default_sqlite_path, resolve_dsn
from ...kinds import ALL, names


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


def add_kind(parser: argparse.ArgumentParser, default: str) -> None:
    """The ``--kind`` option: a registered kind of session (:mod:`chatledger.kinds`) or
    ``all``, repeatable (``--kind openai --kind adk``); none given: ``default``."""
    parser.add_argument(
        "--kind",
        action="append",
        choices=(*names(), ALL),
        metavar="KIND",
        help=f"only this kind of session: {', '.join(names())}, or {ALL} (repeatable; default: {default})",
    )


def concrete(message: str, dsn: str | None, *, placeholder: bool = True) -> str:
    """``message`` with the ``--dsn`` of the commands it advises naming the database as
    this command was given it (the DSN as typed, password masked; ``"$CHATLEDGER_DSN"``):
    the library names the URL it opened (:func:`chatledger.dsn.as_argument`); with
    ``placeholder``, ``--dsn DSN`` too (this command's own advice, for its one database)."""
    if dsn:
        given = dsn_hint(dsn)
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


def dsn_hint(dsn: str | None) -> str:
    """The DSN as the user gave it, for a follow-up command line, password masked."""
    return mask_password(dsn, dsn) if dsn else "DSN"


def mask_password(message: str, dsn: str | None) -> str:
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


def say(console: Console, line: str) -> None:
    """Print ``line`` as it is: no markup, no highlighting, no wrapping."""
    console.print(line, markup=False, highlight=False, soft_wrap=True)
