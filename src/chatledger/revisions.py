"""The revisions chatledger ships, and the conventions every revision file follows.

The repository's ``migrations/`` folder is the Alembic script directory; the wheel
carries the same files as ``chatledger/migrations``. How to write one:
``migrations/README``.

Conventions every revision file in ``migrations/versions/`` follows (checked by
:func:`revisions` when it loads them, and by ``tests/test_revisions.py``):

* **Frozen.** It imports nothing from ``chatledger``: its column types are plain
  SQLAlchemy types, with ``with_variant`` for what :mod:`chatledger.types` renders per
  dialect, defined in the file itself, so a later change of the live types cannot
  change what an old revision creates.
* **Linear.** ``down_revision`` is the previous head (a string), no branches, no merges.
* **``compatible_from``** (a string): the oldest revision whose code runs correctly on
  the schema this revision leaves. An *expand* revision (old code keeps reading and
  writing correctly: a new nullable column, a new index, a new table) keeps its
  predecessor's value; a *contract* revision (anything older code would get wrong)
  names itself, or the head of an earlier release whose code already copes with the
  change. The template's default is the revision itself, the safe choice. It never
  goes backwards: no revision names an older one than its predecessor's.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from alembic.config import Config
from alembic.script import Script, ScriptDirectory
from sqlalchemy.engine import URL, Connection


@cache
def script_location() -> Path:
    """The Alembic script directory: inside the installed package, or the source
    checkout's ``migrations/`` for an editable install."""
    packaged = Path(__file__).with_name("migrations")
    if (packaged / "env.py").is_file():
        return packaged
    checkout = Path(__file__).resolve().parents[2] / "migrations"
    if (checkout / "env.py").is_file():
        return checkout
    raise RuntimeError("chatledger's migrations are missing from this installation")


def alembic_config(
    connection: Connection | None = None,
    location: str | Path | None = None,
    *,
    url: URL | None = None,
    lock_timeout: float | None = None,
    adopting: bool = False,
) -> Config:
    """An Alembic ``Config`` for the revisions in ``location`` (default: the shipped ones).

    With ``connection``, ``env.py`` runs the migrations on that (synchronous facade
    of an async) connection, inside the caller's transaction, which holds the schema
    lock; without, it opens the database named by ``url``, else ``-x dsn=...``,
    ``CHATLEDGER_DSN`` or the embedded default, and takes the lock itself, waiting
    ``lock_timeout`` seconds (offline, ``--sql``: the script takes it). ``adopting``:
    the run is ``chatledger adopt`` stamping zett-agent's converted tables, which
    ``env.py`` otherwise refuses to migrate.
    """
    config = Config()
    config.set_main_option("script_location", str(location or script_location()))
    if connection is not None:
        config.attributes["connection"] = connection
    if url is not None:
        config.attributes["url"] = url
    if lock_timeout is not None:
        config.attributes["lock_timeout"] = lock_timeout
    if adopting:
        config.attributes["adopting"] = True
    return config


@dataclass(frozen=True)
class Revisions:
    """A linear revision history and each revision's ``compatible_from``."""

    #: The script directory's path.
    location: str
    #: Revision ids, oldest first; the last is the head.
    order: tuple[str, ...]
    #: Revision id -> its ``compatible_from``.
    compatible_from: Mapping[str, str]

    @property
    def head(self) -> str:
        return self.order[-1]

    def knows(self, revision: str | None) -> bool:
        """Whether ``revision`` is one of these (exactly; no partial ids)."""
        return revision in self.compatible_from


def revisions(location: str | Path | None = None) -> Revisions:
    """The revisions in ``location`` (default: the ones this chatledger ships), checked
    against the conventions of this module's docstring.

    Raises:
        RuntimeError: no revision, a branch or merge, or a revision without a valid
            ``compatible_from`` (a string naming itself or an earlier revision, and not
            older than its predecessor's).
    """
    return _revisions(str(location or script_location()))


@cache
def _revisions(location: str) -> Revisions:
    script = ScriptDirectory.from_config(alembic_config(location=location))
    heads = script.get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"{location}: the revision history must have exactly one head, not {heads}")
    chain: list[str] = []
    compatible: dict[str, str] = {}
    current: str | None = heads[0]
    while current is not None:
        found = script.get_revision(current)
        assert found is not None
        down = found.down_revision
        if not (down is None or isinstance(down, str)) or found.is_merge_point or found.is_branch_point:
            raise RuntimeError(
                f"{found.path}: chatledger's revision history is linear (no branches or merges)"
            )
        value = getattr(found.module, "compatible_from", None)
        if not isinstance(value, str):
            raise RuntimeError(f"{found.path}: declares no compatible_from (a revision id string)")
        chain.append(current)
        compatible[current] = value
        current = down
    if len(chain) != len(list(script.walk_revisions())):
        raise RuntimeError(f"{location}: revisions outside the one line from base to head")
    chain.reverse()
    for position, revision in enumerate(chain):
        if compatible[revision] not in chain[: position + 1]:
            raise RuntimeError(
                f"revision {revision}: compatible_from {compatible[revision]!r} is neither itself nor "
                "an earlier revision"
            )
        # Code that could not run on the predecessor's schema cannot run on a schema
        # built on it either: a revision never serves older code than its predecessor.
        if position and chain.index(compatible[revision]) < chain.index(compatible[chain[position - 1]]):
            raise RuntimeError(
                f"revision {revision}: compatible_from {compatible[revision]!r} is older than its "
                f"predecessor {chain[position - 1]}'s {compatible[chain[position - 1]]!r}; "
                "compatible_from never goes backwards (an expand revision keeps its predecessor's)"
            )
    return Revisions(location, tuple(chain), compatible)


def head_revision(location: str | Path | None = None) -> str:
    """The newest revision this chatledger ships (or ``location`` holds)."""
    return revisions(location).head


def is_known(revision: str, location: str | Path | None = None) -> bool:
    """Whether this chatledger ships ``revision`` (a newer one may have migrated the database)."""
    return revisions(location).knows(revision)


def imports_chatledger(path: Path) -> list[str]:
    """The ``chatledger`` modules a revision file imports (it must import none)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == "chatledger"]
        elif isinstance(node, ast.ImportFrom) and (
            node.level or (node.module or "").split(".")[0] == "chatledger"
        ):
            found.append("." * node.level + (node.module or ""))
    return found


def tables_dropped(upper: str, lower: str, location: str | Path | None = None) -> list[str]:
    """The tables a downgrade from revision ``upper`` to ``lower`` (a revision, ``base``
    or relative, as Alembic takes it) drops, in the order it drops them; see
    :func:`downgrade_steps`."""
    dropped: list[str] = []
    for _revision, tables in downgrade_steps(upper, lower, location):
        dropped += [name for name in tables if name not in dropped]
    return dropped


def downgrade_steps(
    upper: str, lower: str, location: str | Path | None = None
) -> list[tuple[str, list[str]]]:
    """The revisions a downgrade from ``upper`` to ``lower`` undoes, newest first, each
    with the tables its ``downgrade()`` drops: its ``op.drop_table`` calls, recorded,
    not run. Recorded for PostgreSQL, where no operation needs the live table (SQLite's
    batch mode would); the revisions take no dialect-specific path. An unknown revision
    yields none (the downgrade itself then says what is wrong).

    Alembic's ``op`` is process-wide: call it where no other Alembic run is under way.
    """
    import io

    from alembic.operations import Operations, ops
    from alembic.runtime.migration import MigrationContext
    from alembic.script.revision import RevisionError
    from alembic.util import CommandError

    script = ScriptDirectory.from_config(alembic_config(location=location))
    try:
        # As Alembic's own downgrade selects them (relative targets such as -2 included).
        path = list(script.revision_map.iterate_revisions(upper, lower, select_for_downgrade=True))
    except (CommandError, RevisionError):
        return []
    context = MigrationContext.configure(
        dialect_name="postgresql", opts={"as_sql": True, "output_buffer": io.StringIO()}
    )
    steps: list[tuple[str, list[str]]] = []
    with Operations.context(context) as operations:
        for found in path:
            assert isinstance(found, Script)
            recorded: list[ops.MigrateOperation] = []
            operations.invoke = recorded.append  # type: ignore[method-assign,assignment]
            found.module.downgrade()
            dropped = [op.table_name for op in recorded if isinstance(op, ops.DropTableOp)]
            steps.append((found.revision, list(dict.fromkeys(dropped))))
    return steps
