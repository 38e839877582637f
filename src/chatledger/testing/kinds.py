"""The promises every kind of session keeps through the core, checked once for all kinds.

Each registered kind (:mod:`chatledger.kinds`) is run through the same scenarios, on
every backend:

* **identity**: a write repeated with its id and its content is stored once and
  succeeds; with its id and other content it is refused with
  :class:`chatledger.IdentityConflict` (a ``ValueError``), and nothing changes;
* **exactly once**: a write whose COMMIT reached the server but whose reply was lost
  (or whose COMMIT arrived late, after the retry had looked it up) is stored once and
  reported as a success;
* **overtaken by a delete**: a write whose reply was lost, then the session deleted by
  another writer (through the kind's :class:`chatledger.kinds.Operations`) before the
  settle, is reported as written (then deleted): never refused, never brought back;
* **delete and purge** through the kind's operations: the sessions are gone for the
  kind's ``find`` and the framework's reads, and a write made from what was read
  before is refused (the kind's error), or starts the id again where the framework
  does so (an OpenAI Agents session), never with what was deleted;
* **move**: an export then an import, and a copy, carry the kind's rows exactly.

The scenarios speak to a kind through its :class:`Driver`, made by the function
``driver()`` of the kind's module in ``chatledger.testing`` (the module named after
its adapter package: ``chatledger.testing.zett`` for ``chatledger.zett``). A driver
tells how to open a writer of the kind on a database and, through it, how to create
a session, write one item with the framework's own API (with a given write id where
the framework lets the caller give one), read the items back, and make the write a
writer holding what it read before a delete would make; a scenario that does not
apply to the kind as written is skipped with the reason its driver gives
(:attr:`Driver.skipped`). Adding a kind to the contract is that one function and the
:class:`Writer` class it names.

:class:`KindContract` holds the scenarios as tests; a test module subclasses it and
gives the fixtures:

* ``driver``: the kind's :class:`Driver` (``params=`` over :func:`drivers`);
* ``url``: a migrated database the tests may share;
* ``faults``: a :class:`Faults` in front of that database's server (a TCP proxy),
  or ``None`` where there is none (SQLite): the fault scenarios then lose the reply
  in process (:func:`lost_reply`), and a COMMIT that arrives late is not tried;
* ``spare_url``: a second migrated database on the same backend, for the moves.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import io
import re
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest
from sqlalchemy import select
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection

from .. import kinds
from ..engine import Ledger
from ..errors import IdentityConflict
from ..kinds import Scope, SessionKind
from ..selection import Selection
from ..tools.transfer import copy, export, import_file
from ..transactions import _Retry

__all__ = [
    "COMMIT",
    "TESTS",
    "Driver",
    "Faults",
    "KindContract",
    "Writer",
    "driver_module",
    "driver_of",
    "drivers",
    "kind_rows",
    "lost_reply",
]

#: The marker of a COMMIT in a client's byte stream (not the ``READ COMMITTED`` of a BEGIN).
COMMIT = re.compile(rb"COMMIT(?![A-Z])")
#: Seconds any single wait of a scenario may take before it fails.
TIMEOUT = 60.0


class Writer(Protocol):
    """One writer of a kind's sessions on one database, with a pool of its own."""

    #: The ledger its writes go through (:func:`lost_reply` loses a reply of it).
    ledger: Ledger

    async def ready(self) -> None:
        """Its first call's own reads (the schema check), done: a fault armed after it
        meets the scenario's write, not them."""
        ...

    async def create(self, session_id: str) -> Any:
        """A new session of the id, as the framework holds it (ADK's ``Session``); for a
        framework whose sessions begin with their first write, a handle of the id."""
        ...

    async def write(
        self, handle: Any, text: str, *, write_id: str | None = None, in_transaction: bool = False
    ) -> Any:
        """Write one item holding ``text`` with the framework's own call; return what
        the call returned, comparable with ``==``.

        ``write_id``: the write's id, where :attr:`Driver.caller_ids`. ``in_transaction``:
        as a transaction that tells its generation before its COMMIT (a zett append that
        changes the title), so that a settle can tell it was overtaken by a delete.
        """
        ...

    async def texts(self, session_id: str) -> list[str]:
        """The texts of the session's live items, in order, as the framework reads them;
        empty for none (or no session)."""
        ...

    async def stale_write(self, handle: Any, text: str) -> Any:
        """The write a writer holding what it read before a delete makes after it (ADK's
        append to the ``Session`` object, rein's save at the version it read)."""
        ...

    def commit_point(self, text: str, *, in_transaction: bool) -> bytes | None:
        """The bytes of the client message that commits a :meth:`write` of ``text``
        when it is not a ``COMMIT`` (a statement that commits itself); else ``None``."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class Driver:
    """How the kind contract speaks to one kind (see the module)."""

    kind: SessionKind
    #: ``open(url, **ledger_options)``: a :class:`Writer` on the database.
    open: Callable[..., Writer]
    #: What a write's identity is, in words (``"message_id"``, ``"ADK Event.id"``).
    identity: str
    #: Whether the caller can give a write its id (else each call mints its own, and the
    #: identity scenarios do not apply).
    caller_ids: bool = True
    #: The scope the kind's operations find the driver's sessions in (ADK's app and user).
    scope: Scope = field(default_factory=dict)
    #: What :meth:`Writer.stale_write` raises after a delete; empty: the framework starts
    #: the id again with it (nothing deleted comes back).
    refused: tuple[type[BaseException], ...] = ()
    #: The scenarios (:data:`TESTS` names) that do not apply to the kind as written, each
    #: with the reason, in the framework's terms: they are skipped with it.
    skipped: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.skipped) - set(TESTS))
        if unknown:
            raise ValueError(f"skipped: {unknown} name no scenario of the kind contract")


class Faults(Protocol):
    """A TCP proxy between writers and the database server that drops a connection on
    cue (``tests/support/proxy.py`` in chatledger's repository)."""

    @property
    def armed(self) -> bool: ...

    def url(self, upstream: URL) -> URL:
        """``upstream``'s URL through the proxy."""
        ...

    def arm(
        self,
        action: str,
        marker: bytes | re.Pattern[bytes] = ...,
        *,
        delay: float = ...,
        refuse_after: bool = ...,
    ) -> None:
        """Act once on the next client message with ``marker``: ``drop-after-commit``
        (forward it, swallow the reply, drop the client; ``refuse_after``: then refuse
        every connection until :meth:`accept`), ``commit-late`` (drop the client, forward
        it ``delay`` seconds later)."""
        ...

    def events(self, name: str) -> list[float]: ...

    async def noted(self, name: str) -> None:
        """Return once the proxy has logged ``name`` (``"commit answered"``)."""
        ...

    async def accept(self) -> None:
        """Accept connections again."""
        ...


def driver_module(kind: SessionKind) -> str:
    """The module in ``chatledger.testing`` whose ``driver()`` drives the kind."""
    return f"{__package__}.{kind.package.rsplit('.', 1)[-1]}"


def driver_of(kind: SessionKind) -> Driver | None:
    """The kind's driver; ``None`` when its module or its ``driver()`` is missing.

    Raises:
        ImportError: the kind's framework is not installed.
    """
    try:
        module = importlib.import_module(driver_module(kind))
    except ModuleNotFoundError as missing:
        if missing.name != driver_module(kind):
            raise
        return None
    made = getattr(module, "driver", None)
    return made() if callable(made) else None


def drivers() -> list[Driver]:
    """The driver of every registered kind whose framework is installed and that has one."""
    found = []
    for kind in kinds.registered():
        if not kinds.installed(kind):
            continue
        driven = driver_of(kind)
        if driven is not None:
            found.append(driven)
    return found


# -- helpers ------------------------------------------------------------------------------


@contextlib.contextmanager
def lost_reply(ledger: Ledger, then: Callable[[], Awaitable[object]] | None = None) -> Iterator[list[bool]]:
    """In process, what the proxy's ``drop-after-commit`` does on a network, for a
    database with no proxy in front (SQLite): the next write attempt of ``ledger``
    commits, then its reply is lost (``then`` runs first: another writer's call before
    the settle). The list yielded holds ``True`` once that happened."""
    transactions = ledger.transactions
    original = transactions._attempt
    lost: list[bool] = []

    async def attempt(work: Any, *, write: bool, **rest: Any) -> Any:
        result = await original(work, write=write, **rest)
        if write and not lost:
            lost.append(True)
            if then is not None:
                await then()
            raise _Retry(ConnectionResetError("the reply to the COMMIT was lost"), None, ambiguous=True)
        return result

    transactions._attempt = attempt  # type: ignore[method-assign]
    try:
        yield lost
    finally:
        del transactions._attempt


async def _opened(driver: Driver, url: URL, **options: Any) -> Writer:
    writer = driver.open(url, **options)
    await writer.ready()  # its own reads commit too: faults are armed after them
    return writer


async def _found(driver: Driver, url: URL, session_id: str) -> list[kinds.Found]:
    async with kinds.operations(driver.kind)(url, {}) as operations:
        return await operations.find(session_id, driver.scope)


def _fresh(prefix: str = "k") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def _marker(writer: Writer, text: str, *, in_transaction: bool = False) -> bytes | re.Pattern[bytes]:
    point = writer.commit_point(text, in_transaction=in_transaction)
    return COMMIT if point is None else point


async def kind_rows(kind: SessionKind, url: URL, ids: list[str]) -> dict[str, list[tuple[Any, ...]]]:
    """The rows of the kind's sessions of ``ids`` that its export records carry
    (:attr:`chatledger.kinds.SessionKind.records`): of its session table and of the
    tables whose rows go with a session (:attr:`chatledger.tombstones.Tombstones.leftovers`),
    by table, sorted."""
    rows = kind.tombstone_rows()
    carried = {table for layout in kind.records for table in kinds.record_tables(layout).values()}
    tables = [(table, key) for table, key in ((rows.table, rows.key), *rows.leftovers) if table in carried]
    assert tables, f"{kind.name}: no table of its sessions travels in its records"

    async def work(conn: AsyncConnection) -> dict[str, list[tuple[Any, ...]]]:
        found: dict[str, list[tuple[Any, ...]]] = {}
        for table, key in tables:
            statement = select(table).where(table.c[key[-1]].in_(ids))
            found[table.name] = sorted((tuple(row) for row in await conn.execute(statement)), key=repr)
        return found

    ledger = Ledger(url)
    try:
        return await ledger.read(work)
    finally:
        await ledger.close()


async def _filled(driver: Driver, url: URL, prefix: str) -> list[str]:
    """Three sessions of the kind under ``prefix``: one with two items, one with one, and
    one deleted through the kind's operations (a tombstone); their ids."""
    ids = [f"{prefix}-{n}" for n in range(3)]
    writer = await _opened(driver, url)
    try:
        for id, count in zip(ids, (2, 1, 1), strict=True):
            handle = await writer.create(id)
            for n in range(count):
                await writer.write(handle, f"{id} item {n} ünï 🦜")
    finally:
        await writer.close()
    async with kinds.operations(driver.kind)(url, {}) as operations:
        (found,) = await operations.find(ids[2], driver.scope)
        assert await operations.delete(found)
    return ids


# -- identity ----------------------------------------------------------------------------


async def test_a_write_repeated_with_its_id_and_content_is_stored_once(driver: Driver, url: URL) -> None:
    if not driver.caller_ids:
        pytest.skip(f"{driver.kind.name}: {driver.identity}")
    writer = await _opened(driver, url)
    try:
        session_id = _fresh()
        handle = await writer.create(session_id)
        write_id = str(uuid.uuid4())
        first = await writer.write(handle, "once", write_id=write_id)
        assert await writer.write(handle, "once", write_id=write_id) == first
        await writer.write(handle, "other")
        # Repeated after another write too: what the first returned, and nothing stored.
        assert await writer.write(handle, "once", write_id=write_id) == first
        assert await writer.texts(session_id) == ["once", "other"]
        await writer.write(handle, "next")
        assert await writer.texts(session_id) == ["once", "other", "next"]
    finally:
        await writer.close()


async def test_a_write_id_with_other_content_is_an_identity_conflict(driver: Driver, url: URL) -> None:
    if not driver.caller_ids:
        pytest.skip(f"{driver.kind.name}: {driver.identity}")
    writer = await _opened(driver, url)
    try:
        session_id = _fresh()
        handle = await writer.create(session_id)
        write_id = str(uuid.uuid4())
        await writer.write(handle, "original", write_id=write_id)
        before = await kind_rows(driver.kind, url, [session_id])
        with pytest.raises(IdentityConflict) as refused:
            await writer.write(handle, "other content", write_id=write_id)
        assert isinstance(refused.value, ValueError)
        assert refused.value.write_id == write_id
        assert await writer.texts(session_id) == ["original"]
        assert await kind_rows(driver.kind, url, [session_id]) == before
    finally:
        await writer.close()


# -- exactly once across a lost COMMIT reply -------------------------------------------------


async def _lost_reply(driver: Driver, url: URL, faults: Faults | None, action: str) -> None:
    if faults is None and action != "drop-after-commit":
        pytest.skip("a COMMIT that arrives late needs the proxy (none in front of SQLite)")
    writer = await _opened(driver, url if faults is None else faults.url(url))
    try:
        session_id = _fresh()
        handle = await writer.create(session_id)
        await writer.write(handle, "first")
        text = f"lost-{uuid.uuid4().hex}"
        if faults is None:
            with lost_reply(writer.ledger) as lost:
                await asyncio.wait_for(writer.write(handle, text), TIMEOUT)
            assert lost
        else:
            faults.arm(action, _marker(writer, text), delay=1.0)
            await asyncio.wait_for(writer.write(handle, text), TIMEOUT)
            assert not faults.armed
            await asyncio.wait_for(faults.noted("commit forwarded"), TIMEOUT)
        await writer.write(handle, "after")
    finally:
        await writer.close()
    direct = await _opened(driver, url)
    try:
        assert await direct.texts(session_id) == ["first", text, "after"]
    finally:
        await direct.close()


async def test_a_write_whose_commit_reply_is_lost_is_stored_once(
    driver: Driver, url: URL, faults: Faults | None
) -> None:
    await _lost_reply(driver, url, faults, "drop-after-commit")


async def test_a_write_racing_its_own_late_commit_is_stored_once(
    driver: Driver, url: URL, faults: Faults | None
) -> None:
    await _lost_reply(driver, url, faults, "commit-late")


async def test_a_write_overtaken_by_a_delete_is_settled_as_written(
    driver: Driver, url: URL, faults: Faults | None
) -> None:
    """The write commits and its reply is lost; the database stays unreachable for the
    writer while another deletes the session through the kind's operations. The
    settle finds the write erased by that delete: written, then deleted -- a success,
    and the session stays deleted."""
    writer = await _opened(driver, url if faults is None else faults.url(url), retry_timeout=30)
    try:
        session_id = _fresh()
        handle = await writer.create(session_id)
        await writer.write(handle, "first", in_transaction=True)
        text = f"overtaken-{uuid.uuid4().hex}"

        async def delete() -> None:
            async with kinds.operations(driver.kind)(url, {}) as operations:
                (found,) = await operations.find(session_id, driver.scope)
                assert await operations.delete(found)

        if faults is None:
            with lost_reply(writer.ledger, then=delete) as lost:
                await asyncio.wait_for(writer.write(handle, text, in_transaction=True), TIMEOUT)
            assert lost
        else:
            faults.arm("drop-after-commit", _marker(writer, text, in_transaction=True), refuse_after=True)
            writing = asyncio.create_task(writer.write(handle, text, in_transaction=True))
            await asyncio.wait_for(faults.noted("commit answered"), TIMEOUT)
            await delete()
            await faults.accept()
            await asyncio.wait_for(writing, TIMEOUT)  # no error: written, then deleted
        assert await _found(driver, url, session_id) == []
        assert await writer.texts(session_id) == []
    finally:
        await writer.close()


# -- delete and purge through the kind's operations ------------------------------------------


async def _stays_deleted(driver: Driver, url: URL, writer: Writer, handle: Any, session_id: str) -> None:
    assert await _found(driver, url, session_id) == []
    assert await writer.texts(session_id) == []
    if driver.refused:
        with pytest.raises(driver.refused):
            await writer.stale_write(handle, "stale")
        assert await writer.texts(session_id) == []
        assert await _found(driver, url, session_id) == []
    else:  # the framework starts the id again: with the new write alone
        await writer.stale_write(handle, "anew")
        assert await writer.texts(session_id) == ["anew"]


async def test_a_deleted_session_stays_deleted(driver: Driver, url: URL) -> None:
    writer = await _opened(driver, url)
    try:
        session_id = _fresh()
        handle = await writer.create(session_id)
        await writer.write(handle, "one")
        await writer.write(handle, "two")
        async with kinds.operations(driver.kind)(url, {}) as operations:
            (found,) = await operations.find(session_id, driver.scope)
            assert found.key[-1] == session_id
            assert found.entries in (None, 2)
            assert await operations.delete(found)
            assert not await operations.delete(found)  # gone already
        await _stays_deleted(driver, url, writer, handle, session_id)
    finally:
        await writer.close()


async def test_purged_sessions_stay_deleted(driver: Driver, url: URL) -> None:
    prefix = _fresh("p")
    writer = await _opened(driver, url)
    try:
        handles = {}
        for n in range(3):
            session_id = f"{prefix}-{n}"
            handles[session_id] = await writer.create(session_id)
            await writer.write(handles[session_id], f"item {n}")
        kept = f"{prefix[::-1]}-kept"
        await writer.write(await writer.create(kept), "kept")
        async with kinds.operations(driver.kind)(url, {}) as operations:
            purged = await operations.purge(Selection(prefix=prefix), driver.scope, size=2, progress=None)
        assert purged == len(handles)
        for session_id, handle in handles.items():
            await _stays_deleted(driver, url, writer, handle, session_id)
        assert await writer.texts(kept) == ["kept"]
    finally:
        await writer.close()


# -- moves ------------------------------------------------------------------------------------


async def test_export_then_import_keeps_the_kinds_rows(
    driver: Driver, url: URL, spare_url: URL, tmp_path: Path
) -> None:
    ids = await _filled(driver, url, _fresh("x"))
    output = io.StringIO()
    await export(url, output, ids=ids)
    path = tmp_path / "kind.jsonl"
    path.write_text(output.getvalue(), encoding="utf-8")
    report = await import_file(spare_url, str(path))
    assert report.clean and report.imported == len(ids), report
    assert await kind_rows(driver.kind, spare_url, ids) == await kind_rows(driver.kind, url, ids)
    again = await import_file(spare_url, str(path))  # idempotent
    assert (again.imported, again.identical, again.differing) == (0, len(ids), 0), again


async def test_copy_keeps_the_kinds_rows(driver: Driver, url: URL, spare_url: URL) -> None:
    ids = await _filled(driver, url, _fresh("c"))
    report = await copy(url, spare_url, ids=ids)
    assert report.clean and report.imported == len(ids), report
    assert await kind_rows(driver.kind, spare_url, ids) == await kind_rows(driver.kind, url, ids)
    # The framework reads the copy as it reads the original.
    source, target = await _opened(driver, url), await _opened(driver, spare_url)
    try:
        for id in ids:
            assert await target.texts(id) == await source.texts(id)
    finally:
        await source.close()
        await target.close()


# -- the entry point --------------------------------------------------------------------------

#: The contract's tests by name: the ``test_*`` functions above, in their order.
TESTS: dict[str, Callable[..., Awaitable[None]]] = {
    name: test for name, test in list(globals().items()) if name.startswith("test_") and callable(test)
}


class KindContract:
    """The scenarios as methods: subclass it as ``Test<Name>`` and give the fixtures
    ``driver``, ``url``, ``faults`` and ``spare_url`` (see the module)."""

    @pytest.fixture(autouse=True)
    def _applies(self, request: pytest.FixtureRequest, driver: Driver) -> None:
        """Skip a scenario the driver says does not apply, with its reason."""
        reason = driver.skipped.get(getattr(request.node, "originalname", request.node.name))
        if reason is not None:
            pytest.skip(f"{driver.kind.name}: {reason}")


for _name, _test in TESTS.items():
    setattr(KindContract, _name, staticmethod(_test))
