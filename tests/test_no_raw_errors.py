"""No public call lets a ``sqlalchemy.exc`` error out (issue 17): a SQLAlchemy event
hook on every real engine (``before_cursor_execute``, on the real database; no mocks)
makes random statements fail with a random error of the driver's own classes, with
random codes, many of which nobody lists, while random calls run over the public API
(zett storage append / load / snapshot / list / delete / create, rein save / load /
delete, the migrate calls) on every backend.

Every error raised must be a ``ChatledgerError``, never a SQLAlchemy error, and after
every call, failed or not, the data is as a plain in-memory model says: an
acknowledged write is there once, a failed one left nothing (the hook fails a
statement before it runs, so a failed call committed nothing)."""

from __future__ import annotations

import os
import random
import string
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from rein.session import Session
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import UserMessage

from chatledger import migrate
from chatledger.errors import ChatledgerError, DatabaseError
from chatledger.rein import LedgerSessionStore
from chatledger.zett import LedgerSessionStorage

from .conftest import Database

#: Calls per backend (``CHATLEDGER_RAW_ERRORS_STEPS`` for a longer soak), and the share
#: of statements the hook fails while one runs.
STEPS = int(os.environ.get("CHATLEDGER_RAW_ERRORS_STEPS", "80"))
FAIL_RATE = 0.2

#: Codes of each backend: every listed class, and codes chatledger lists nowhere.
LISTED: dict[str, list[Any]] = {
    "postgresql": ["40001", "40P01", "55P03", "57014", "08006", "53300", "25006", "53100", "23505", "42P01"],
    "mysql": [1213, 1205, 1969, 2013, 1792, 1290, 1114, 1062, 1146, 1153],
    "sqlite": [5, 6, 8, 13, 14, 18, 19],
}
#: A code of each backend's form, most of them listed nowhere.
ANY_CODE: dict[str, Callable[[random.Random], Any]] = {
    "postgresql": lambda rng: "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(5)),
    "mysql": lambda rng: rng.randint(1000, 4200),
    "sqlite": lambda rng: rng.choice([1, 2, 3, 4, 7, 9, 10, 11, 12, 15, 16, 17, 20, 21, 22, 23, 24, 25, 26]),
}


def _postgresql_error(kind: type[Exception], code: Any, words: str) -> Exception:
    error = kind(words)
    error.sqlstate = code  # type: ignore[attr-defined]
    error.pgcode = code  # type: ignore[attr-defined]
    return error


def _mysql_error(kind: type[Exception], code: Any, words: str) -> Exception:
    return kind(code, words)


def _sqlite_error(kind: type[Exception], code: Any, words: str) -> Exception:
    error = kind(words)
    error.sqlite_errorcode = code  # type: ignore[attr-defined]
    return error


#: A driver's error of a DBAPI class with a code, as each backend's driver carries it.
RAISED: dict[str, Callable[[type[Exception], Any, str], Exception]] = {
    "postgresql": _postgresql_error,
    "mysql": _mysql_error,
    "sqlite": _sqlite_error,
}
DBAPI_CLASSES = (
    "Error",
    "DatabaseError",
    "OperationalError",
    "IntegrityError",
    "ProgrammingError",
    "DataError",
    "InternalError",
    "NotSupportedError",
    "InterfaceError",
)


@dataclass(eq=False)
class Injector:
    """Fails statements of any engine while ``on``; counts what it raised."""

    rng: random.Random
    on: bool = False
    raised: int = 0

    def code(self, backend: str) -> Any:
        if self.rng.random() < 0.5:
            return self.rng.choice(LISTED[backend])
        return ANY_CODE[backend](self.rng)

    def error(self, dialect: Any) -> Exception:
        dbapi = dialect.loaded_dbapi
        kind = getattr(dbapi, self.rng.choice([name for name in DBAPI_CLASSES if hasattr(dbapi, name)]))
        code = self.code(dialect.name)
        return RAISED[dialect.name](kind, code, f"injected failure {code}")

    def __call__(self, conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> Any:
        if self.on and self.rng.random() < FAIL_RATE:
            self.raised += 1
            raise self.error(conn.dialect)
        return statement, parameters


@pytest.fixture
def injector() -> Iterator[Injector]:
    hook = Injector(random.Random(f"no-raw-errors-{uuid.uuid4()}"))
    event.listen(Engine, "before_cursor_execute", hook, retval=True)
    try:
        yield hook
    finally:
        event.remove(Engine, "before_cursor_execute", hook)


@dataclass
class ZettModel:
    """What a session holds: live or not, its (sequence, text) raw messages of this
    generation, its last sequence, its checkpoint version."""

    live: bool = False
    messages: list[tuple[int, str]] = field(default_factory=list)
    last: int = 0
    version: int = 0
    #: The sequence the current checkpoint compacted through (a delete: the last one).
    compacted: int = 0


@dataclass
class Model:
    zett: dict[str, ZettModel] = field(default_factory=dict)
    #: rein id -> (live, version, iteration marker of the stored session)
    rein: dict[str, tuple[bool, int, int]] = field(default_factory=dict)


async def _check(model: Model, storage: LedgerSessionStorage, store: LedgerSessionStore) -> None:
    for session_id, expected in model.zett.items():
        summary = await storage.get_session(session_id)
        assert (summary is not None) == expected.live, session_id
        records = await storage.list_raw_messages(session_id)
        assert [(r.sequence, r.message.content) for r in records] == expected.messages, session_id  # type: ignore[union-attr]
        view = await storage.load(session_id)
        assert (view.snapshot.version if view.snapshot else 0) == expected.version, session_id
    for rein_id, (live, version, marker) in model.rein.items():
        found = await store.aload_versioned(rein_id)
        if not live:
            assert found is None, rein_id
            continue
        assert found is not None and found.version == version and found.session.iteration == marker, rein_id


async def test_no_public_call_lets_a_sqlalchemy_error_out(database: Database, injector: Injector) -> None:
    rng = injector.rng
    url: URL = database.url
    prefix = f"raw-{uuid.uuid4().hex[:8]}"
    zett_ids = [f"{prefix}-z{n}" for n in range(3)]
    rein_ids = [f"{prefix}-r{n}" for n in range(2)]
    model = Model({sid: ZettModel() for sid in zett_ids}, {rid: (False, 0, 0) for rid in rein_ids})
    rein_versions = dict.fromkeys(rein_ids, 0)  # the id's last version, tombstones included
    options: dict[str, Any] = {"retry_timeout": 0.5, "retry_backoff_max": 0.05}
    failures: dict[str, int] = {}
    async with (
        LedgerSessionStorage(url, **options) as storage,
        LedgerSessionStorage(url, load_cache_messages=0) as checker,
    ):
        with LedgerSessionStore(url, **options) as store, LedgerSessionStore(url) as rein_checker:
            for step in range(STEPS):
                name, call, apply = _operation(
                    rng, storage, store, url, model, zett_ids, rein_ids, rein_versions
                )
                injector.on = True
                try:
                    result = await call()
                except Exception as error:
                    injector.on = False
                    if _injected_clash(name, error):
                        continue
                    assert isinstance(error, ChatledgerError), f"step {step} {name}: {error!r}"
                    assert not isinstance(error, SQLAlchemyError)
                    if isinstance(error, DatabaseError):
                        assert isinstance(error.__cause__, SQLAlchemyError)
                    failures[type(error).__name__] = failures.get(type(error).__name__, 0) + 1
                else:
                    injector.on = False
                    apply(result)
                await _check(model, checker, rein_checker)
    assert injector.raised > 0 and failures, "the hook failed nothing"


Call = Callable[[], Awaitable[Any]]


def _injected_clash(name: str, error: Exception) -> bool:
    """``create_session``'s documented ``ValueError`` ("Session already exists") for an
    IntegrityError on its INSERT, which can only be the id's primary key -- here one
    the hook made up: the INSERT never ran, so nothing changed."""
    context = error.__context__
    return (
        name == "create"
        and type(error) is ValueError
        and str(error).startswith("Session already exists")
        and isinstance(context, IntegrityError)
        and "injected failure" in str(context)
    )


def _operation(
    rng: random.Random,
    storage: LedgerSessionStorage,
    store: LedgerSessionStore,
    url: URL,
    model: Model,
    zett_ids: list[str],
    rein_ids: list[str],
    rein_versions: dict[str, int],
) -> tuple[str, Call, Callable[[Any], None]]:
    """A random call, and what its success changes in the model."""
    sid = rng.choice(zett_ids)
    state = model.zett[sid]
    rid = rng.choice(rein_ids)
    kind = rng.choice(
        ["append"] * 4
        + ["load", "list", "snapshot", "delete", "create", "save", "rein-load", "rein-delete", "migrate"]
    )
    nothing: Callable[[Any], None] = lambda _result: None  # noqa: E731

    if kind == "append" and state.live:
        text = f"m{rng.randrange(10**6)}"

        def appended(sequence: int) -> None:
            assert sequence == state.last + 1
            state.last = sequence
            state.messages.append((sequence, text))

        return kind, lambda: storage.append(sid, "r", UserMessage(content=text)), appended
    if kind == "append" or kind == "create":
        if state.live:
            return "list", lambda: storage.list_sessions(limit=5), nothing

        def created(_summary: Any) -> None:
            state.live, state.messages, state.version = True, [], 0

        return "create", lambda: storage.create_session(session_id=sid), created
    if kind == "snapshot" and state.live and state.last > state.compacted:
        through = state.last

        def snapshotted(_snapshot: Any) -> None:
            state.version += 1
            state.compacted = through

        summary = CompactedMessage(content=f"through {through}")
        return kind, lambda: storage.snapshot(sid, summary, through, state.version), snapshotted
    if kind == "delete":

        def deleted(existed: bool) -> None:
            assert existed == state.live
            state.live, state.messages, state.version, state.compacted = False, [], 0, state.last

        return kind, lambda: storage.delete_session(sid), deleted
    if kind == "load":
        return kind, lambda: storage.load(sid), nothing
    if kind == "save":
        marker = rng.randrange(1, 10**6)

        def saved(_none: None) -> None:
            rein_versions[rid] += 1
            model.rein[rid] = (True, rein_versions[rid], marker)

        return kind, lambda: store.asave(rid, Session(iteration=marker)), saved
    if kind == "rein-load":
        return kind, lambda: store.aload(rid), nothing
    if kind == "rein-delete":

        def rein_deleted(existed: bool) -> None:
            live = model.rein[rid][0]
            assert existed == live
            if live:
                rein_versions[rid] += 1
            model.rein[rid] = (False, rein_versions[rid], 0)

        return kind, lambda: store.adelete(rid), rein_deleted
    if kind == "migrate":
        calls: list[Call] = [
            lambda: migrate.database_revision(url),
            lambda: migrate.database_state(url),
            lambda: migrate.upgrade_database(url),
            lambda: migrate.downgrade_database(url, migrate.head_revision()),  # at head: no step
        ]
        return kind, rng.choice(calls), nothing
    return "list", lambda: storage.list_sessions(session_types=[0, 1, 2], limit=10), nothing
