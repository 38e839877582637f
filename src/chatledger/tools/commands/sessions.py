"""``chatledger sessions``: list, show, delete and purge stored sessions
(:mod:`chatledger.tools.sessions`)."""

from __future__ import annotations

import argparse

from rich.console import Console

from ... import validate
from ...kinds import SessionKind, chosen, names, registered
from ...types import MAX_ADK_SCOPE_LENGTH
from .shared import Command, add_dsn, add_kind

#: What deleting a session leaves of its id, as ``sessions delete`` and ``purge`` say it.
_RESERVED = (
    "each deleted id keeps a tombstone, so a zett append to it raises SessionDeleted (a late "
    "writer never revives it) until create_session(session_id=...) starts it anew; a rein save "
    "starts it anew; an openai id's next add_items and an adk key's next create_session start it "
    "anew, numbered on after it (app: and user: state stays)"
)


def _configure_sessions(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, help: str, description: str | None = None) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help, description=description or help)
        add_dsn(sub)
        add_kind(sub, "all")
        return sub

    def scoped(sub: argparse.ArgumentParser, prefix: str = "with --kind") -> None:
        for flag, column in _SCOPES.items():
            sub.add_argument(
                flag,
                metavar=flag.removeprefix("--").upper(),
                help=f"{prefix} {_scoped_kinds(column)}: only sessions of this {column}",
            )

    listing = action(
        "list",
        f"the newest sessions of each kind ({', '.join(names())})",
        f"the newest sessions of each kind ({', '.join(names())}): newest activity first, or in key "
        "order where a kind keeps no index by activity (adk: by app, user and id)",
    )
    listing.add_argument("--limit", type=int, default=20, metavar="N", help="sessions per kind (default: 20)")
    listing.add_argument("--json", action="store_true", help="print JSON instead of tables")
    show = action(
        "show",
        "every session with this id, of each kind: fields, checkpoint and raw-log tail (rein: "
        "messages; openai: items; adk: state and events)",
    )
    show.add_argument("id", metavar="ID")
    show.add_argument(
        "--messages",
        type=int,
        default=50,
        metavar="N",
        help="show at most the last N messages, items or events (default: 50)",
    )
    scoped(show, "of")
    delete = action(
        "delete",
        "delete one session with its whole history (asks first)",
        f"delete one session with its whole history (asks first; exit 1 if not confirmed); adk: every "
        f"app's and user's session with this id, or --app's / --user's. {_RESERVED}",
    )
    delete.add_argument("id", metavar="ID")
    scoped(delete)
    delete.add_argument("--yes", action="store_true", help="do not ask")
    purge = action(
        "purge",
        "delete old sessions in batches (asks first)",
        "delete the sessions last active before a time and/or whose id starts with a prefix, in "
        f"batches (asks first; exit 1 if not confirmed). Purged ids stay reserved: {_RESERVED}",
    )
    scoped(purge)
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


#: The options that narrow a kind's sessions beyond their id, and the key column each
#: names (:attr:`chatledger.kinds.SessionKind.scopes`).
_SCOPES = {"--app": "app_name", "--user": "user_id"}


def _scoped_kinds(column: str) -> str:
    """The kinds a scope column narrows, as ``--kind`` names them (``adk``)."""
    return " or ".join(kind.name for kind in registered() if column in kind.scopes) or "(none)"


def _scope(args: argparse.Namespace, kinds: tuple[SessionKind, ...]) -> dict[str, str]:
    """The ``--app``/``--user`` values given, checked as the ADK service checks
    ``app_name`` and ``user_id`` (not blank, no NUL, at most ``MAX_ADK_SCOPE_LENGTH``
    characters). ``show`` narrows the kinds that have the scope and shows the others
    whole; ``delete`` and ``purge`` take it only when every kind named has it.

    Raises:
        ValueError: a scope given for kinds without it, or a bad value.
    """
    given = {
        column: validate.identifier(value, flag, limit=MAX_ADK_SCOPE_LENGTH)
        for flag, column in _SCOPES.items()
        if (value := getattr(args, flag.removeprefix("--"))) is not None
    }
    if given:
        having = [kind for kind in kinds if set(given) <= set(kind.scopes)]
        if not having if args.action == "show" else len(having) != len(kinds):
            names = " or ".join(kind.name for kind in registered() if set(given) <= set(kind.scopes))
            raise ValueError(f"--app and --user are for --kind {names}")
    return given


async def _sessions(args: argparse.Namespace, console: Console) -> int:
    from .. import sessions

    kinds = args.kind
    scope: dict[str, str] = {}
    if args.action in ("show", "delete", "purge"):
        scope = _scope(args, chosen(kinds))
    if args.action == "list":
        listing = await sessions.list_sessions(args.dsn, limit=args.limit, kinds=kinds)
        sessions.print_list(listing, console, as_json=args.json)
        return 0
    if args.action == "show":
        found = await sessions.show(
            args.dsn,
            args.id,
            console,
            messages=args.messages,
            kinds=kinds,
            scope=scope,
        )
        return 0 if found else 1
    if args.action == "delete":
        return await sessions.delete(args.dsn, args.id, console, yes=args.yes, kinds=kinds, scope=scope)
    age = sessions.parse_age(args.older_than) if args.older_than is not None else None
    return await sessions.purge(
        args.dsn,
        console,
        older_than=age,
        prefix=args.prefix,
        dry_run=args.dry_run,
        yes=args.yes,
        kinds=kinds,
        scope=scope,
    )


#: This group's commands, in the order ``--help`` lists them.
COMMANDS: tuple[Command, ...] = (
    Command("sessions", "list, show, delete and purge stored sessions", _configure_sessions, _sessions),
)
