"""Retention: delete the sessions idle longer than a duration, and purge the tombstones
of deleted ones after a horizon, of every kind of session asked for
(:mod:`chatledger.kinds`; ``docs/retention.md``).

:func:`apply` runs a :class:`Policy` on a database through guarded operations,
never a read-then-act loop of its own:

* idle sessions -- each kind's own purge (:meth:`chatledger.kinds.Operations.purge`,
  the adapter's, through :mod:`chatledger.selection`): each session is deleted in a
  transaction whose tombstone ``UPDATE`` checks the cutoff again, so one written to
  after it was read is kept; every deleted id keeps its tombstone.
* tombstones -- :func:`chatledger.tombstones.purge_tombstones` of the kind's
  tombstones (:attr:`chatledger.kinds.SessionKind.tombstones`): each tombstone deleted
  before the horizon is replaced by its high-water mark in the deleting transaction;
  no sequence or version of the id is ever valid again.

Both work in batches (``batch_size`` ids read per page) and are counted; a dry run
counts what each would delete now and changes nothing. Each kind is handled only when
its adapter's framework is installed (its extra: ``chatledger[zett]``...); the others
are left out of the report. The kinds retained unless named are those
:attr:`~chatledger.kinds.SessionKind.retained_by_default` (zett's and rein's): the
others' tombstone purge needs every writer of theirs on a chatledger that knows their
marks (docs/retention.md). ADK's ``app:`` and ``user:`` state is never deleted: the
app's and user's other sessions share it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.engine import URL

from . import clock, tombstones, validate
from .dsn import resolve_dsn
from .engine import Ledger
from .errors import WrongType
from .kinds import Operations, SessionKind, chosen, names, operations, registered
from .selection import PURGE_BATCH, Progress, Selection, count


def default_kinds() -> tuple[str, ...]:
    """The kinds :func:`apply` handles unless told (see the module docstring)."""
    return tuple(kind.name for kind in registered() if kind.retained_by_default)


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


@asynccontextmanager
async def _opened(
    url: URL, handled: Sequence[SessionKind], options: dict[str, Any]
) -> AsyncIterator[dict[str, Operations]]:
    """Each kind's operations on the database, by name, for the kinds whose framework is installed."""
    async with AsyncExitStack() as stack:
        opened: dict[str, Operations] = {}
        for kind in handled:
            try:
                made = operations(kind)
            except ImportError:
                continue
            opened[kind.name] = await stack.enter_async_context(made(url, options))
        yield opened


async def apply(
    dsn: str | URL | None,
    policy: Policy,
    *,
    dry_run: bool = False,
    kinds: Sequence[str] | None = None,
    batch_size: int = PURGE_BATCH,
    progress: Progress | None = None,
    **options: Any,
) -> Report:
    """Apply ``policy`` to the database of ``dsn`` (the DSN rule of
    :func:`chatledger.dsn.resolve_dsn`): first the idle sessions, then the tombstones.

    Args:
        dry_run: count what would be deleted now; delete nothing.
        kinds: the kinds to handle, by name (:func:`chatledger.kinds.names`; ``all``:
            every one; :func:`default_kinds` unless given); a kind whose framework is
            not installed is left out of the report.
        batch_size: ids read per page (at least 1).
        progress: called after each candidate with its id (a key of several columns:
            the tuple, ADK's ``(app_name, user_id, id)``) and whether it was deleted
            (for rein's idle sessions on the store's loop thread).
        options: the stores' options (:class:`chatledger.options.LedgerOptions`).

    Raises:
        ValueError: a bad ``kinds``; WrongType: an argument of the wrong type.
        StorageUnavailable, ConfigurationError, SchemaNotReady: as every call; what was
            deleted until then stays deleted.
    """
    if not isinstance(policy, Policy):
        raise WrongType(f"policy must be a chatledger.retention.Policy, not {type(policy).__name__}")
    if kinds is not None and (isinstance(kinds, str) or not list(kinds)):
        raise ValueError(f"kinds must name some of {', '.join(names())}, not {kinds!r}")
    handled = chosen(kinds, [kind for kind in registered() if kind.retained_by_default])
    batch_size = validate.integer(batch_size, "batch_size", minimum=1)
    now = clock.utc_now()
    idle = None if policy.idle is None else Selection.of(idle_before=now - policy.idle)
    before = (
        None if policy.tombstones_after is None else tombstones.cutoff(None, now - policy.tombstones_after)
    )
    report = Report(dry_run, None if idle is None else idle.idle_before, before)
    url = resolve_dsn(dsn)
    options.setdefault("auto_upgrade", False)
    by_name = {kind.name: kind for kind in handled}
    async with _opened(url, handled, options) as opened:
        # The counts and the tombstones go through a ledger of the run's own: rein's
        # store runs on a loop thread of its own, and a pool serves one event loop only.
        ledger = Ledger(url, **options)
        try:
            if dry_run:
                for name in opened:
                    store = by_name[name].tombstone_rows()
                    if idle is not None:
                        report.sessions[name] = await count(ledger, store.table, store.live, idle)
                    if before is not None:
                        report.tombstones[name] = await tombstones.pending(ledger, store, before)
                return report
            for name, handler in opened.items():
                if idle is None:
                    continue
                kept: list[Any] = []

                def seen(session_id: Any, done: bool, kept: list[Any] = kept) -> object:
                    if not done:
                        kept.append(session_id)
                    return None if progress is None else progress(session_id, done)

                report.sessions[name] = await handler.purge(idle, {}, size=batch_size, progress=seen)
                report.kept[name] = len(kept)
            for name in opened:
                store = by_name[name].tombstone_rows()
                if before is not None:
                    report.tombstones[name] = await tombstones.purge_tombstones(
                        ledger, store, before, size=batch_size, progress=progress
                    )
        finally:
            await ledger.close()
    return report
