"""Retention: delete the sessions idle longer than a duration, and purge the tombstones
of deleted ones after a horizon: zett's, rein's, the OpenAI Agents SDK's (``openai``) and
Google ADK's (``adk``) (``docs/retention.md``).

:func:`apply` runs a :class:`Policy` on a database through the stores' own guarded
operations, never a read-then-act loop of its own:

* idle sessions -- ``LedgerSessionStorage.purge_sessions``,
  ``LedgerSessionStore.apurge`` and the adapters' ``purge_sessions``
  (:mod:`chatledger.openai_agents.items`, :mod:`chatledger.adk.rows`;
  :mod:`chatledger.selection`): each session is deleted
  in a transaction whose tombstone ``UPDATE`` checks the cutoff again, so one written
  to after it was read is kept; every deleted id keeps its tombstone.
* tombstones -- ``purge_tombstones`` / ``apurge_tombstones``, for OpenAI and ADK
  :func:`chatledger.tombstones.purge_tombstones` itself (:mod:`chatledger.tombstones`):
  each tombstone deleted before the horizon is replaced
  by its high-water mark in the deleting transaction; no sequence or version of the id
  is ever valid again.

Both work in batches (``batch_size`` ids read per page) and are counted; a dry run
counts what each would delete now and changes nothing. Each kind is handled only when
its package is installed (``chatledger[zett]``, ``chatledger[rein]``,
``chatledger[openai-agents]``, ``chatledger[adk]``). ADK's ``app:`` and ``user:`` state is
never deleted: the app's and user's other sessions share it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import URL

from . import clock, tombstones, validate
from .dsn import resolve_dsn
from .engine import Ledger
from .errors import WrongType
from .selection import PURGE_BATCH, Progress, Selection, count

#: The kinds of session, in the order :func:`apply` handles them.
KINDS = ("zett", "rein", "openai", "adk")
#: The kinds :func:`apply` handles unless told: the OpenAI Agents and ADK kinds only when
#: named, since their tombstone purge needs every writer of theirs on a chatledger that
#: knows their marks (docs/retention.md lists what a first tombstone purge needs): the
#: adapters' code before it would number a purged id from 1 again.
DEFAULT_KINDS = ("zett", "rein")
#: The kinds whose sessions the adapters' own functions delete, on a ledger of the run's.
_FRAMEWORKS = ("openai", "adk")


@dataclass(frozen=True)
class Policy:
    """What to delete: sessions idle (no append, field change or rein save) longer than
    ``idle``, and tombstones of sessions deleted longer than ``tombstones_after`` ago.
    ``None`` leaves that part out; at least one is given."""

    #: Delete sessions last active longer ago than this.
    idle: timedelta | None = None
    #: Purge tombstones deleted longer ago than this (the horizon, :mod:`chatledger.tombstones`).
    tombstones_after: timedelta | None = None

    def __post_init__(self) -> None:
        for name in ("idle", "tombstones_after"):
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, timedelta):
                raise WrongType(f"{name} must be a timedelta, not {type(value).__name__}")
            if value < timedelta(0):
                raise ValueError(f"{name} must not be negative")
        if self.idle is None and self.tombstones_after is None:
            raise ValueError("say what to delete: idle and/or tombstones_after")


@dataclass
class Report:
    """What :func:`apply` did (or, in a dry run, would do now), per kind."""

    dry_run: bool
    #: The cutoffs, taken once when the run started (UTC); ``None`` for a part left out.
    idle_before: datetime | None
    deleted_before: datetime | None
    #: Idle sessions deleted (a dry run: selected now).
    sessions: dict[str, int] = field(default_factory=dict)
    #: Idle sessions selected but kept: written to (or deleted) after they were read.
    kept: dict[str, int] = field(default_factory=dict)
    #: Tombstones purged (a dry run: older than the horizon now).
    tombstones: dict[str, int] = field(default_factory=dict)


def installed(kind: str) -> bool:
    """Whether the adapter of ``kind`` (``openai``, ``adk``) can be imported (its
    framework's package is installed)."""
    try:
        if kind == "openai":
            from .openai_agents import items  # noqa: F401
        else:
            from .adk import rows  # noqa: F401
    except ImportError:
        return False
    return True


@asynccontextmanager
async def _stores(url: URL, kinds: tuple[str, ...], options: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    """The zett storage and the rein store of the database, and one ledger for the
    OpenAI and ADK kinds (under each of their names), each if its package is installed."""
    opened: dict[str, Any] = {}
    ledger: Ledger | None = None
    try:
        if "zett" in kinds:
            try:
                from .zett import LedgerSessionStorage
            except ImportError:
                pass
            else:
                opened["zett"] = LedgerSessionStorage(url, **options)
        if "rein" in kinds:
            try:
                from .rein import LedgerSessionStore
            except ImportError:
                pass
            else:
                opened["rein"] = LedgerSessionStore(url, **options)
        for kind in _FRAMEWORKS:
            if kind in kinds and installed(kind):
                ledger = ledger or Ledger(url, **options)
                opened[kind] = ledger
        yield opened
    finally:
        if ledger is not None:
            await ledger.close()
        if "zett" in opened:
            await opened["zett"].close()
        if "rein" in opened:
            await opened["rein"].aclose()


async def apply(
    dsn: str | URL | None,
    policy: Policy,
    *,
    dry_run: bool = False,
    kinds: tuple[str, ...] = DEFAULT_KINDS,
    batch_size: int = PURGE_BATCH,
    progress: Progress | None = None,
    **options: Any,
) -> Report:
    """Apply ``policy`` to the database of ``dsn`` (the DSN rule of
    :func:`chatledger.dsn.resolve_dsn`): first the idle sessions, then the tombstones.

    Args:
        dry_run: count what would be deleted now; delete nothing.
        kinds: some of :data:`KINDS` (``"zett"``, ``"rein"``, ``"openai"``, ``"adk"``;
            :data:`DEFAULT_KINDS` unless given); a kind whose package is not installed
            is left out of the report.
        batch_size: ids read per page (at least 1).
        progress: called after each candidate with its id (ADK's: the tuple
            ``(app_name, user_id, id)``) and whether it was deleted (for rein on the
            store's loop thread).
        options: the stores' options (:class:`chatledger.options.LedgerOptions`).

    Raises:
        ValueError: a bad ``kinds``; WrongType: an argument of the wrong type.
        StorageUnavailable, ConfigurationError, SchemaNotReady: as every call; what was
            deleted until then stays deleted.
    """
    if not isinstance(policy, Policy):
        raise WrongType(f"policy must be a chatledger.retention.Policy, not {type(policy).__name__}")
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown or not kinds:
        raise ValueError(f"kinds must name some of {', '.join(KINDS)}, not {list(kinds)!r}")
    batch_size = validate.integer(batch_size, "batch_size", minimum=1)
    now = clock.utc_now()
    idle = None if policy.idle is None else Selection.of(idle_before=now - policy.idle)
    before = (
        None if policy.tombstones_after is None else tombstones.cutoff(None, now - policy.tombstones_after)
    )
    report = Report(dry_run, None if idle is None else idle.idle_before, before)
    url = resolve_dsn(dsn)
    options.setdefault("auto_upgrade", False)
    async with _stores(url, kinds, options) as stores:
        if dry_run:
            # Read through a ledger of its own: the rein store runs on its own loop thread.
            selector = Ledger(url, **options)
            try:
                for kind in stores:
                    store = tombstones.STORES[kind]
                    if idle is not None:
                        report.sessions[kind] = await count(selector, store.table, store.live, idle)
                    if before is not None:
                        report.tombstones[kind] = await tombstones.pending(selector, store, before)
            finally:
                await selector.close()
            return report
        for kind, store in stores.items():
            if idle is None:
                continue
            kept: list[Any] = []

            def seen(session_id: Any, done: bool, kept: list[Any] = kept) -> object:
                if not done:
                    kept.append(session_id)
                return None if progress is None else progress(session_id, done)

            arguments: dict[str, Any] = {
                "idle_before": idle.idle_before,
                "batch_size": batch_size,
                "progress": seen,
            }
            if kind == "zett":
                report.sessions[kind] = await store.purge_sessions(**arguments)
            elif kind == "rein":
                report.sessions[kind] = await store.apurge(**arguments)
            else:
                report.sessions[kind] = await _purge_framework(kind, store, idle, batch_size, seen)
            report.kept[kind] = len(kept)
        for kind, store in stores.items():
            if before is None:
                continue
            arguments = {"deleted_before": before, "batch_size": batch_size, "progress": progress}
            if kind == "zett":
                report.tombstones[kind] = await store.purge_tombstones(**arguments)
            elif kind == "rein":
                report.tombstones[kind] = await store.apurge_tombstones(**arguments)
            else:
                report.tombstones[kind] = await tombstones.purge_tombstones(
                    store, tombstones.STORES[kind], before, size=batch_size, progress=progress
                )
    return report


async def _purge_framework(kind: str, ledger: Ledger, idle: Selection, size: int, progress: Progress) -> int:
    """The idle sessions of ``openai`` or ``adk`` deleted by the adapter's own purge."""
    if kind == "openai":
        from .openai_agents import items

        return await items.purge_sessions(ledger, idle, size=size, progress=progress)
    from .adk import rows

    return await rows.purge_sessions(ledger, idle, size=size, progress=progress)
