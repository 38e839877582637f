"""``chatledger sessions``: list, show, delete and purge stored sessions
(:mod:`chatledger.tools.sessions`)."""

from __future__ import annotations

import argparse

from rich.console import Console

from ... import validate
from ...types import MAX_ADK_SCOPE_LENGTH
from ..kinds import KINDS
from .shared import Command, add_dsn

#: What deleting a session leaves of its id, as ``sessions delete`` and ``purge`` say it.
_RESERVED = (
    "each deleted id keeps a tombstone, so a zett append to it raises SessionDeleted (a late "
    "writer never revives it) until create_session(session_id=...) starts it anew; a rein save "
    "starts it anew; an openai id's next add_items and an adk key's next create_session start it "
    "anew, numbered on after it (app: and user: state stays)"
)


def _configure_sessions(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(
        name: str, help: str, description: str | None = None, kinds: tuple[str, ...] = KINDS
    ) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help, description=description or help)
        add_dsn(sub)
        default = "both" if len(kinds) == 2 else "all"
        sub.add_argument("--kind", choices=kinds, help=f"only this kind of session (default: {default})")
        return sub

    def scoped(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--app", metavar="APP", help="with --kind adk: only sessions of this app_name")
        sub.add_argument("--user", metavar="USER", help="with --kind adk: only sessions of this user_id")

    listing = action(
        "list",
        "the newest sessions of each kind: zett, rein, openai (OpenAI Agents SDK), adk (Google ADK)",
        "the newest sessions of each kind: zett, rein, openai (OpenAI Agents SDK) newest activity "
        "first; adk (Google ADK) by app, user and id, with the app and user of each",
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
    show.add_argument("--app", metavar="APP", help="adk: only the session of this app_name")
    show.add_argument("--user", metavar="USER", help="adk: only the session of this user_id")
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


def _scope(value: str | None, flag: str) -> str | None:
    """An ``--app``/``--user`` value, checked as the ADK service checks ``app_name`` and
    ``user_id`` (not blank, no NUL, at most ``MAX_ADK_SCOPE_LENGTH`` characters)."""
    return None if value is None else validate.identifier(value, flag, limit=MAX_ADK_SCOPE_LENGTH)


async def _sessions(args: argparse.Namespace, console: Console) -> int:
    from .. import sessions

    kinds = (args.kind,) if args.kind else sessions.KINDS
    scope: dict[str, str | None] = {}
    if args.action in ("show", "delete", "purge"):
        scope = {"app_name": _scope(args.app, "--app"), "user_id": _scope(args.user, "--user")}
        # show without --kind shows every kind, and only ADK's by the two
        scoped = args.kind not in (None, "adk") if args.action == "show" else args.kind != "adk"
        if (args.app is not None or args.user is not None) and scoped:
            raise ValueError("--app and --user are for --kind adk")
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
            **scope,
        )
        return 0 if found else 1
    if args.action == "delete":
        return await sessions.delete(args.dsn, args.id, console, yes=args.yes, kinds=kinds, **scope)
    age = sessions.parse_age(args.older_than) if args.older_than is not None else None
    return await sessions.purge(
        args.dsn,
        console,
        older_than=age,
        prefix=args.prefix,
        dry_run=args.dry_run,
        yes=args.yes,
        kinds=kinds,
        **scope,
    )


#: This group's commands, in the order ``--help`` lists them.
COMMANDS: tuple[Command, ...] = (
    Command("sessions", "list, show, delete and purge stored sessions", _configure_sessions, _sessions),
)
