"""``LedgerSession``: the OpenAI Agents SDK's ``Session`` on the shared ledger.

Built as the SDK's ``SQLAlchemySession`` is, so that swapping one line moves a service
onto chatledger::

    # session = SQLAlchemySession.from_url("user-123", url=DSN, create_tables=True)
    session = LedgerSession.from_url("user-123", url=DSN, create_tables=True)
    await Runner.run(agent, "Hello", session=session)

Its items live in ``openai_sessions`` / ``openai_items`` of chatledger's schema, beside
zett's and rein's sessions (:mod:`chatledger.schema`). Needs the ``openai-agents``
extra (``pip install 'chatledger[openai-agents]'``).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from agents.items import TResponseInputItem
from agents.memory.session import SessionABC
from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from .. import validate
from ..dsn import display
from ..engine import Ledger
from ..ids import new_uuid7
from . import items as _items

__all__ = ["LedgerSession"]


class _Shared:
    """The ledgers that sessions share, and what they were made from (held, so that an
    id in the key stays unique while the entry lives).

    ``per_loop`` (``from_url``): a ledger per event loop running at once, so that a pool
    never serves two loops (asyncpg's and aiomysql's connections, and the pool's wait
    queue, belong to the loop that made them): a session used on a loop whose ledger
    another running loop holds gets a ledger of its own; one whose loop has ended is
    taken over by the next loop (:meth:`chatledger.connections.Connections.bind_loop`
    replaces its pool). Otherwise (``engine=``, the caller's engine, which serves one
    loop) one ledger."""

    def __init__(self, make: Callable[[], Ledger], source: object, *, per_loop: bool) -> None:
        self.make, self.source, self.per_loop = make, source, per_loop
        #: Set once a session closed one of the ledgers: new sessions get a new entry.
        self.retired = False
        self._lock = threading.Lock()
        #: Each ledger and the loop it serves (``None``: none yet). The first is made
        #: now, so that a bad DSN or option is refused before anything connects.
        self._ledgers: list[tuple[Ledger, weakref.ref[asyncio.AbstractEventLoop] | None]] = [(make(), None)]

    def ledger(self) -> Ledger:
        """The ledger of the running event loop (outside one: the first ledger)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            ledgers = self._ledgers
            if loop is None or not self.per_loop:
                return ledgers[0][0]
            for ledger, owner in ledgers:
                if owner is not None and owner() is loop:
                    return ledger
            for index, (ledger, owner) in enumerate(ledgers):
                served = None if owner is None else owner()
                if served is None or served.is_closed():
                    ledgers[index] = (ledger, weakref.ref(loop))
                    return ledger
            made = self.make()
            ledgers.append((made, weakref.ref(loop)))
            return made


#: The ledgers sessions share: one entry per engine (``engine=``) or per URL and options
#: (``from_url``), alive while a session uses it; so many sessions share one pool.
_shared: weakref.WeakValueDictionary[tuple[Any, ...], _Shared] = weakref.WeakValueDictionary()


def _shared_ledgers(
    key: tuple[Any, ...], source: object, make: Callable[[], Ledger], *, per_loop: bool
) -> _Shared:
    found = _shared.get(key)
    if found is None or found.source is not source or found.retired:
        found = _shared[key] = _Shared(make, source, per_loop=per_loop)
    return found


class LedgerSession(SessionABC):
    """An OpenAI Agents SDK session (``agents.memory.Session``) in SQLite, PostgreSQL or
    MySQL/MariaDB, safe to share between tasks and processes.

    Args:
        session_id: The conversation's id: 1-255 characters, not blank, no NUL;
            compared byte for byte on every backend.
        engine: An ``AsyncEngine`` the application made and owns (as for
            ``SQLAlchemySession``); the sessions of one engine share one
            :class:`chatledger.engine.Ledger` and its pool. Or ``ledger=``: a ledger of
            your own.
        create_tables: Upgrade the database to chatledger's schema on first use (the
            ``auto_upgrade`` option; by default only a SQLite file upgrades itself, a
            server database is migrated as a deploy step: ``chatledger upgrade``).
        session_settings: The SDK's ``SessionSettings`` (or its dict): ``limit`` is
            what :meth:`get_items` returns when called without one.
        ensure_ascii: Whether to escape non-ASCII characters when serializing items to
            JSON, as the SDK's ``SQLAlchemySession`` documents it (``True``: ``"café"``
            is stored as ``"caf\\u00e9"``). Unlike the SDK's, the default is
            ``False``: chatledger has always stored the characters themselves, which SQL
            readers see as text. Items read back are the same either way.
        **options: :class:`chatledger.options.LedgerOptions` for the ledger, with
            ``engine=`` only those that do not set up an engine (``retry_timeout``...).

    Raises:
        ValueError / TypeError: a bad ``session_id``, settings or option, or neither or
            both of ``engine`` and ``ledger``; before anything connects.

    **What it guarantees**, on every backend and under any number of writers:
    :meth:`add_items` is one transaction and one gap-free range of sequences, exactly
    once across a lost COMMIT (each item's id is fixed before the first attempt);
    :meth:`get_items` returns the newest ``limit`` items in order at O(limit) cost;
    :meth:`pop_item` retracts exactly the newest item (two pops never return the same
    one, and its sequence is never reused); :meth:`clear_session` erases the items and
    the next :meth:`add_items` starts the session again, with sequences going on after
    the old ones. The SDK's retry rewind (pop, then add back) leaves the items as they
    were. Errors are chatledger's (:mod:`chatledger.errors`): ``StorageUnavailable``,
    ``OutcomeUnknown``, ``SchemaNotReady``...
    """

    session_settings: SessionSettings | None = None
    _shared: _Shared | None = None
    _ledger: Ledger | None = None
    _closed: bool = False

    def __init__(
        self,
        session_id: str,
        *,
        engine: AsyncEngine | None = None,
        ledger: Ledger | None = None,
        create_tables: bool = False,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        ensure_ascii: bool = False,
        **options: Any,
    ) -> None:
        self.session_id = validate.identifier(session_id, "session_id")
        self.session_settings = _settings(session_settings)
        if not isinstance(ensure_ascii, bool):
            raise TypeError(f"ensure_ascii must be a bool, not {type(ensure_ascii).__name__}")
        self._ensure_ascii = ensure_ascii
        if "engine" in options:
            raise TypeError(f'from_url takes url=, not engine=: LedgerSession("{session_id}", engine=engine)')
        if create_tables:
            options["auto_upgrade"] = True
        _no_replicas(options)
        if (engine is None) == (ledger is None):
            raise ValueError("give LedgerSession exactly one of engine= and ledger= (or use from_url)")
        if ledger is not None:
            if not isinstance(ledger, Ledger):
                raise TypeError(f"ledger must be a chatledger Ledger, not {type(ledger).__name__}")
            if options:
                raise ValueError(f"options {sorted(options)} apply to a new ledger, not to ledger=")
            self._ledger = ledger
        else:
            if not isinstance(engine, AsyncEngine):
                raise TypeError(f"engine must be an AsyncEngine, not {type(engine).__name__}")
            key = ("engine", id(engine), _frozen(options))
            self._shared = _shared_ledgers(
                key, engine, lambda: Ledger(engine=engine, **options), per_loop=False
            )

    @classmethod
    def from_url(
        cls,
        session_id: str,
        *,
        url: str | URL,
        create_tables: bool = False,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
        ensure_ascii: bool = False,
        **options: Any,
    ) -> LedgerSession:
        """A session on the database of ``url`` (any DSN chatledger takes:
        ``postgresql://``, ``postgresql+asyncpg://``, ``mysql://``, ``sqlite:///path``...).

        The sessions of one URL and options share one ledger and pool in the process,
        while any of them is in use, on each event loop: sessions used on loops that
        run at once (threads with loops of their own) get a ledger and pool per loop,
        as the SDK's sessions each have an engine of their own. ``options`` are
        :class:`chatledger.options.LedgerOptions` (pool sizes, ``retry_timeout``...);
        ``ensure_ascii`` as for the constructor.
        """
        if "engine" in options:
            raise TypeError(f'from_url takes url=, not engine=: LedgerSession("{session_id}", engine=engine)')
        if create_tables:
            options["auto_upgrade"] = True
        _no_replicas(options)
        rendered = url.render_as_string(hide_password=False) if isinstance(url, URL) else url
        if not isinstance(rendered, str):
            raise TypeError(f"url must be a str or URL, not {type(url).__name__}")
        key = ("url", rendered, _frozen(options))
        shared = _shared_ledgers(key, rendered, lambda: Ledger(rendered, **options), per_loop=True)
        session = cls(
            session_id, ledger=shared.ledger(), session_settings=session_settings, ensure_ascii=ensure_ascii
        )
        session._ledger, session._shared = None, shared
        return session

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.session_id!r}, {display(self.ledger.url)!r})"

    @property
    def ledger(self) -> Ledger:
        """The :class:`chatledger.engine.Ledger` this session runs on: the one given as
        ``ledger=``, else the shared one of the running event loop (see
        :meth:`from_url`)."""
        if self._shared is not None:
            return self._shared.ledger()
        assert self._ledger is not None
        return self._ledger

    def _open(self) -> Ledger:
        """The ledger of this call; ``RuntimeError`` once the session (or the ledger it
        shares) was closed, before anything is read or written."""
        ledger = self.ledger
        if self._closed or ledger.connections.closed:
            raise RuntimeError(f"{self!r} is closed")
        return ledger

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy engine (as ``SQLAlchemySession.engine``): the one given as
        ``engine=``, else the ledger's."""
        source = None if self._shared is None else self._shared.source
        return source if isinstance(source, AsyncEngine) else self.ledger.engine

    # -- the SDK's Session protocol ---------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items in the order they were added: all of them, or the newest
        ``limit`` (``limit`` ``None``: ``session_settings.limit``; 0 or less: none).

        Raises:
            TypeError: ``limit`` is not an ``int``.
            ValueError: a stored item is not a JSON object: invalid JSON, or JSON
                that is no item (a ``null`` written by SQL); the message names it.
            RuntimeError: the session was closed.
        """
        ledger = self._open()
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise TypeError(f"limit must be an int or None, not {type(limit).__name__}")
        found: list[TResponseInputItem] = await _items.read(
            ledger, self.session_id, resolve_session_limit(limit, self.session_settings)
        )
        return found

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` (the SDK's input items: JSON objects) after the session's
        newest, in one transaction; an empty list writes nothing.

        Raises:
            TypeError: ``items`` is not a list of dicts (names the index).
            ValueError: an item is not JSON serializable, or the items exceed the
                database's statement limit; nothing is written.
            OutcomeUnknown: the COMMIT was lost and the database stayed unreachable
                for the rest of the retry budget (carries the first item's id).
            RuntimeError: the session was closed (also for an empty list).
        """
        ledger = self._open()
        texts = _encode(items, self._ensure_ascii)
        if not texts:
            return
        for index, text in enumerate(texts):  # one row each (executemany)
            await ledger.check_statement_size(f"items[{index}]", text)
        # Fixed before the first attempt: a retry after a lost COMMIT looks them up.
        item_ids = [new_uuid7() for _ in texts]
        await _items.add(ledger, self.session_id, item_ids, texts)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item, or ``None`` when the session has none.

        The item is retracted (its row and sequence stay, never reused), atomically:
        of concurrent pops each gets another item.

        Raises:
            ValueError: the newest item is not a JSON object (as :meth:`get_items`
                says); it stays in place.
            RuntimeError: the session was closed.
        """
        popped: TResponseInputItem | None = await _items.pop(self._open(), self.session_id)
        return popped

    async def clear_session(self) -> None:
        """Erase every item; the next :meth:`add_items` starts the session again.

        Sequences go on after the erased ones, and an add whose COMMIT was lost before
        the clear is not made again after it. With other writers active, a clear erases
        what they added before it and keeps what they add after it; for the
        compaction wrapper see README "Using it with the OpenAI Agents SDK".

        Raises:
            RuntimeError: the session was closed.
        """
        await _items.clear(self._open(), self.session_id)

    # -- lifecycle --------------------------------------------------------------------

    async def close(self) -> None:
        """Dispose of the pool of the ledger this session uses on the running event
        loop (an ``engine=`` given is left open); every later call of this session
        raises ``RuntimeError``, and so do the calls of the other sessions sharing
        that ledger. Sessions made after it get a ledger of their own."""
        ledger = self.ledger
        self._closed = True
        if self._shared is not None:
            self._shared.retired = True
        await ledger.close()


def _settings(value: SessionSettings | Mapping[str, Any] | None) -> SessionSettings:
    if value is None:
        return SessionSettings()
    if not isinstance(value, SessionSettings | Mapping):
        raise TypeError(f"session_settings must be SessionSettings or a dict, not {type(value).__name__}")
    settings = coerce_session_settings(value if isinstance(value, SessionSettings) else dict(value))
    if settings.limit is not None:
        validate.integer(settings.limit, "session_settings.limit")
    return settings


def _encode(items: object, ensure_ascii: bool) -> list[str]:
    """Each item's JSON text, validated before anything is written (key order kept: the
    SDK's rewind compares items by their serialization)."""
    if not isinstance(items, list):
        raise TypeError(f"items must be a list, not {type(items).__name__}")
    return [
        _items.encode(item, f"items[{index}]", ensure_ascii=ensure_ascii) for index, item in enumerate(items)
    ]


def _no_replicas(options: Mapping[str, Any]) -> None:
    """``ValueError`` for ``read_dsn``: this session reads on the primary only (replica
    reads serve the zett and rein stores, docs/scaling.md)."""
    if options.get("read_dsn") is not None:
        raise ValueError("read_dsn: LedgerSession reads on the primary only; leave read_dsn unset")


def _frozen(options: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """A hashable key of the options (their reprs: connect_args may hold dicts)."""
    return tuple(sorted((name, repr(value)) for name, value in options.items()))
