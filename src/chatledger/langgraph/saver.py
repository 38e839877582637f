"""``LedgerSaver``: LangGraph's ``BaseCheckpointSaver`` on the shared ledger."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_serializable_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from .. import telemetry, validate
from ..dsn import display
from ..engine import Ledger
from ..ids import new_uuid7
from ..portal import Portal
from ..types import MAX_LANGGRAPH_KEY_LENGTH, MAX_LANGGRAPH_NAME_LENGTH
from . import rows
from .rows import Blob, Loaded, Stored, Write

__all__ = ["LedgerSaver"]

T = TypeVar("T")

#: Checkpoints read per statement while listing with a metadata filter.
LIST_PAGE = 100
#: The prune strategies, as LangGraph's savers name them.
PRUNE_STRATEGIES = ("keep_latest", "delete")


class _Shared:
    """A ledger that savers share, and what it was made from (held, so that an id in
    the key stays unique while the entry lives)."""

    def __init__(self, ledger: Ledger, source: object) -> None:
        self.ledger, self.source = ledger, source


#: The ledgers savers share: one per engine (``engine=``) or per URL and options, alive
#: while a saver uses it; so many savers share one pool.
_shared: weakref.WeakValueDictionary[tuple[Any, ...], _Shared] = weakref.WeakValueDictionary()


def _shared_ledger(key: tuple[Any, ...], source: object, make: Callable[[], Ledger]) -> _Shared:
    found = _shared.get(key)
    if found is None or found.source is not source or found.ledger.connections.closed:
        found = _shared[key] = _Shared(make(), source)
    return found


def _frozen(options: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((name, repr(value)) for name, value in options.items()))


# -- input checks ---------------------------------------------------------------------------


def _name(value: object, field: str) -> str:
    """A namespace or channel name: a str of at most 200 characters, no NUL (may be empty)."""
    text = validate.text(value, field)
    if len(text) > MAX_LANGGRAPH_NAME_LENGTH:
        raise ValueError(f"{field} is {len(text)} characters long; the limit is {MAX_LANGGRAPH_NAME_LENGTH}")
    return text


def _key(value: object, field: str) -> str:
    """A checkpoint id, task id or version: 1-64 characters, not blank, no NUL."""
    return validate.identifier(value, field, limit=MAX_LANGGRAPH_KEY_LENGTH)


def _version(value: object, field: str) -> str:
    """A channel version (LangGraph's str, int or float) as the text it is stored under."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise TypeError(f"{field} must be a str, int or float, not {type(value).__name__}")
    return _key(str(value), field)


def _configurable(config: object, field: str = "config") -> Mapping[str, Any]:
    if not isinstance(config, Mapping):
        raise TypeError(f"{field} must be a RunnableConfig (a dict), not {type(config).__name__}")
    configurable = config.get("configurable")
    if not isinstance(configurable, Mapping):
        raise ValueError(f'{field} has no "configurable" dict with the thread_id')
    return configurable


def _thread(configurable: Mapping[str, Any], field: str = "config") -> str:
    if "thread_id" not in configurable:
        raise ValueError(f'{field}["configurable"] has no thread_id')
    return validate.identifier(configurable["thread_id"], f'{field}["configurable"]["thread_id"]')


def _namespace(configurable: Mapping[str, Any], field: str = "config") -> str:
    return _name(configurable.get("checkpoint_ns", ""), f'{field}["configurable"]["checkpoint_ns"]')


def _checkpoint_id(configurable: Mapping[str, Any], field: str = "config") -> str | None:
    found = configurable.get("checkpoint_id")
    return None if not found else _key(found, f'{field}["configurable"]["checkpoint_id"]')


def _thread_ids(values: object, field: str) -> list[str]:
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise TypeError(f"{field} must be a sequence of ids, not {type(values).__name__}")
    return [validate.identifier(value, f"{field}[{index}]") for index, value in enumerate(values)]


def _metadata_json(metadata: Mapping[str, Any]) -> str:
    """The metadata as JSON text (filterable, readable by SQL), key order kept."""
    try:
        encoded = json.dumps(metadata, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise ValueError(f"metadata must be JSON serializable: {error}") from None
    validate.json_depth(metadata, "metadata")
    return validate.text(encoded, "metadata")


def _primitive(value: object) -> bool:
    """A value stored inside the checkpoint itself, as LangGraph's PostgreSQL saver keeps them."""
    return value is None or isinstance(value, str | int | float | bool)


def _row_size(data: bytes | None, *texts: str) -> int:
    """Upper bound of the bytes one row takes as one statement: its bytes twice (hex on
    MySQL, escaped at worst elsewhere) and its texts as :func:`chatledger.validate.statement_size`."""
    return validate.statement_size(*texts) + 2 * len(data or b"")


class LedgerSaver(BaseCheckpointSaver[str]):
    """LangGraph checkpoints in SQLite, PostgreSQL or MySQL/MariaDB, beside the other
    frameworks' sessions, safe to share between tasks and processes.

    Args:
        url: ``postgresql://``, ``mysql://``, ``mariadb://`` or ``sqlite:///path`` (a
            driver such as ``+asyncpg`` is fine); ``None`` with no ``engine``/``ledger``
            reads ``CHATLEDGER_DSN``, then the embedded SQLite default. The savers of
            one URL and options share one ledger and pool in the process.
        engine: An ``AsyncEngine`` the application made and owns, instead of ``url``:
            the savers of one engine share one :class:`chatledger.engine.Ledger` and
            its pool, and closing them leaves the engine open.
        ledger: A :class:`chatledger.engine.Ledger` of your own, instead of both.
        serde: LangGraph's serializer of the checkpoints, channel values and writes
            (``JsonPlusSerializer`` by default; an ``EncryptedSerializer`` encrypts
            all of them; the metadata stays JSON, as in LangGraph's own savers).
        create_tables: Upgrade the database to chatledger's schema on first use (the
            ``auto_upgrade`` option; by default only a SQLite file upgrades itself).
        **options: :class:`chatledger.options.LedgerOptions` for a ledger made here.

    Raises:
        ValueError / TypeError: more than one of ``url``, ``engine`` and ``ledger``; a
            bad option; before anything connects.

    **What it guarantees**, on every backend: :meth:`aput` stores a checkpoint and the
    blobs of the channels it changed in one transaction, and :meth:`aput_writes` a
    task's writes in one, each exactly once across a lost COMMIT (settled by an id
    fixed before the first attempt); runs racing on one thread each store their
    checkpoints with their parent links; a deleted thread's checkpoints never come back,
    and a write of a run from before the delete is refused (``SessionDeleted``). Every
    argument is checked before anything is written (``ValueError`` / ``TypeError``
    naming the field), and a value larger than the server takes in one statement is
    refused naming the limit.

    **Sync calls** follow LangGraph's ``AsyncPostgresSaver``: a saver used from async
    code answers its sync methods (``get_tuple``, ``put``...) from other threads on its
    event loop, and refuses them on the loop's own thread (``asyncio.InvalidStateError``:
    use the async method). A saver of a program with no event loop runs them on a
    private loop of its own (then its async methods run there too), as LangGraph's
    sync ``PostgresSaver`` serves a sync graph.
    """

    _shared: _Shared | None = None

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        engine: AsyncEngine | None = None,
        ledger: Ledger | None = None,
        serde: SerializerProtocol | None = None,
        create_tables: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(serde=serde)
        if sum(given is not None for given in (url, engine, ledger)) > 1:
            raise ValueError("give LedgerSaver one of url, engine= and ledger=")
        if options.get("read_dsn") is not None:
            raise ValueError("read_dsn: LedgerSaver reads on the primary only; leave read_dsn unset")
        if create_tables:
            options["auto_upgrade"] = True
        if ledger is not None:
            if not isinstance(ledger, Ledger):
                raise TypeError(f"ledger must be a chatledger Ledger, not {type(ledger).__name__}")
            if options:
                raise ValueError(f"options {sorted(options)} apply to a new ledger, not to ledger=")
            self.ledger = ledger
        elif engine is not None:
            if not isinstance(engine, AsyncEngine):
                raise TypeError(f"engine must be an AsyncEngine, not {type(engine).__name__}")
            key: tuple[Any, ...] = ("engine", id(engine), _frozen(options))
            self._shared = _shared_ledger(key, engine, lambda: Ledger(engine=engine, **options))
            self.ledger = self._shared.ledger
        else:
            if url is not None and not isinstance(url, str | URL):
                raise TypeError(f"url must be a str or URL, not {type(url).__name__}")
            rendered = url.render_as_string(hide_password=False) if isinstance(url, URL) else url
            key = ("url", rendered, _frozen(options))
            self._shared = _shared_ledger(key, rendered, lambda: Ledger(rendered, **options))
            self.ledger = self._shared.ledger
        try:
            #: The event loop of the async caller (as ``AsyncPostgresSaver.loop``): sync
            #: calls from other threads run there.
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None
        self._portal: Portal | None = None
        self._portal_lock = threading.Lock()

    @classmethod
    @asynccontextmanager
    async def from_url(
        cls,
        url: str | URL,
        *,
        create_tables: bool = False,
        serde: SerializerProtocol | None = None,
        **options: Any,
    ) -> AsyncIterator[LedgerSaver]:
        """A saver on the database of ``url``, as ``AsyncPostgresSaver.from_conn_string``
        makes one: ``async with LedgerSaver.from_url(DSN) as saver:``. The schema is
        checked on entry (``create_tables``: upgraded first); the pool is closed on exit.
        """
        if url is None:
            raise TypeError("url must be a str or URL, not None")
        saver = cls(url, serde=serde, create_tables=create_tables, **options)
        try:
            await saver.setup()
            yield saver
        finally:
            await saver.aclose()

    #: ``AsyncPostgresSaver``'s name for :meth:`from_url`: the one-line swap.
    from_conn_string = from_url

    def __repr__(self) -> str:
        return f"{type(self).__name__}({display(self.ledger.url)!r})"

    async def setup(self) -> None:
        """Check the schema (upgrading it first when ``create_tables``), as LangGraph's
        savers' ``setup()``; a server database is otherwise migrated as a deploy step
        (``chatledger upgrade``)."""
        await self._run(self.ledger.ensure_ready)

    async def aclose(self) -> None:
        """Dispose of the ledger's pool (an ``engine=`` given is left open) and stop the
        private loop, if one ran; the savers sharing the ledger cannot be used afterwards."""
        portal, self._portal = self._portal, None
        if portal is not None:
            await asyncio.to_thread(portal.stop, self.ledger.close)
        else:
            await self.ledger.close()

    def close(self) -> None:
        """:meth:`aclose` from sync code (not on the saver's event loop's own thread)."""
        portal, self._portal = self._portal, None
        if portal is not None:
            portal.stop(self.ledger.close)
        else:
            self._sync(self.ledger.close, "aclose")

    async def __aenter__(self) -> LedgerSaver:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- where calls run ---------------------------------------------------------------------

    async def _run(
        self,
        make: Callable[[], Coroutine[Any, Any, T]],
        name: str | None = None,
        thread_id: str | None = None,
    ) -> T:
        """Run an async method: on the private loop once there is one, else here; with
        ``name``, as the span ``chatledger.langgraph.<name>`` (:mod:`chatledger.telemetry`)."""

        async def traced() -> T:
            if name is None:
                return await make()
            with telemetry.operation(self.ledger, "langgraph", name, thread_id):
                return await make()

        portal = self._portal
        if portal is not None:
            if threading.current_thread() is portal.thread:  # a call of ours, on it already
                return await traced()
            return await portal.acall(traced)
        self.loop = asyncio.get_running_loop()
        return await traced()

    def _sync(self, make: Callable[[], Coroutine[Any, Any, T]], name: str) -> T:
        """Run an async method for a sync caller, by ``AsyncPostgresSaver``'s rules."""
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and (running is self.loop or self.loop is None):
            raise asyncio.InvalidStateError(
                "Synchronous calls to LedgerSaver are only allowed from a different thread than "
                f"its event loop's. From the event loop, use the async interface: `await saver.{name}(...)` "
                "or `await graph.ainvoke(...)`."
            )
        loop = self.loop
        if self._portal is None and loop is not None and loop.is_running() and not loop.is_closed():
            return asyncio.run_coroutine_threadsafe(make(), loop).result()
        with self._portal_lock:
            if self._portal is None:
                self._portal = Portal(f"LedgerSaver {display(self.ledger.url)}", "LedgerSaver")
            portal = self._portal
        return portal.call(make)

    # -- LangGraph's interface ---------------------------------------------------------------

    def get_next_version(self, current: str | int | float | None, channel: None = None) -> str:
        """The next channel version, as LangGraph's PostgreSQL and SQLite savers make it:
        the counter zero-padded to 32 digits, then a random fraction (which orders
        versions of forks of one step apart)."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(str(current).split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint of ``config``: its ``checkpoint_id``, else the thread's latest in
        its ``checkpoint_ns`` (one index read whatever the thread's length); ``None`` if
        there is none. Its pending writes come in ``writes_sort_key`` order."""
        configurable = _configurable(config)
        thread_id, checkpoint_ns = _thread(configurable), _namespace(configurable)
        checkpoint_id = _checkpoint_id(configurable)

        async def call() -> Loaded | None:
            return await rows.get(self.ledger, thread_id, checkpoint_ns, checkpoint_id, self._wanted)

        loaded = await self._run(call, "get_tuple", thread_id)
        return None if loaded is None else self._tuple(loaded)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """The checkpoints of ``config``'s thread (and namespace, and checkpoint id, when
        it names them; every thread's when ``config`` is ``None``), newest first:
        those whose metadata has each key of ``filter`` at its value, below ``before``'s
        checkpoint id, at most ``limit``. Read a page at a time, each in one snapshot."""
        thread_id = checkpoint_ns = checkpoint_id = None
        if config is not None:
            configurable = _configurable(config)
            thread_id = _thread(configurable)
            if configurable.get("checkpoint_ns") is not None:
                checkpoint_ns = _namespace(configurable)
            checkpoint_id = _checkpoint_id(configurable)
        if filter is not None and not isinstance(filter, Mapping):
            raise TypeError(f"filter must be a dict, not {type(filter).__name__}")
        wanted = dict(filter or {})
        run_id = wanted.get("run_id") if isinstance(wanted.get("run_id"), str) else None
        below = None if before is None else _checkpoint_id(_configurable(before, "before"), "before")
        if limit is not None:
            limit = validate.integer(limit, "limit")
        if limit == 0:
            return
        size = LIST_PAGE if wanted or limit is None else min(limit, LIST_PAGE)
        given = 0
        after: list[Any] | None = None
        while True:

            async def call(after: list[Any] | None = after) -> list[Loaded]:
                return await rows.page(
                    self.ledger,
                    thread_id=thread_id,
                    checkpoint_ns=checkpoint_ns,
                    checkpoint_id=checkpoint_id,
                    before=below,
                    after=after,
                    size=size,
                    wanted=self._wanted,
                    run_id=run_id,
                )

            found = await self._run(call, "list", thread_id)
            for loaded in found:
                metadata = json.loads(loaded.row.metadata_json)
                if all(metadata.get(name) == value for name, value in wanted.items()):
                    yield self._tuple(loaded, metadata)
                    given += 1
                    if limit is not None and given >= limit:
                        return
            if len(found) < size:
                return
            after = rows.position(found[-1], thread_id, checkpoint_ns)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store ``checkpoint`` under ``config``'s thread and namespace, its parent the
        ``checkpoint_id`` of ``config``, with the blobs of the channels ``new_versions``
        names; exactly once. Returns the checkpoint's config.

        Raises:
            SessionDeleted: the thread was deleted after this run read it.
            ValueError / TypeError: a bad config, checkpoint, metadata or version
                (naming it), or a value larger than the server takes; nothing written.
        """
        configurable = _configurable(config)
        thread_id, checkpoint_ns = _thread(configurable), _namespace(configurable)
        parent = _checkpoint_id(configurable)
        if not isinstance(checkpoint, Mapping):
            raise TypeError(f"checkpoint must be a Checkpoint (a dict), not {type(checkpoint).__name__}")
        checkpoint_id = _key(checkpoint.get("id"), 'checkpoint["id"]')
        values = checkpoint.get("channel_values")
        if not isinstance(values, Mapping):
            raise TypeError('checkpoint["channel_values"] must be a dict')
        if not isinstance(checkpoint.get("channel_versions"), Mapping):
            raise TypeError('checkpoint["channel_versions"] must be a dict')
        if not isinstance(new_versions, Mapping):
            raise TypeError(f"new_versions must be a dict, not {type(new_versions).__name__}")
        if not isinstance(metadata, Mapping):
            raise TypeError(f"metadata must be a dict, not {type(metadata).__name__}")
        inline = {name: value for name, value in values.items() if _primitive(value)}
        blobs = []
        for channel, version in new_versions.items():
            name = _name(channel, f"new_versions[{channel!r}]")
            if name in values and not _primitive(values[name]):
                kind, data = self.serde.dumps_typed(values[name])
                blobs.append(Blob(name, _version(version, f"new_versions[{channel!r}]"), kind, data))
        for channel, version in checkpoint["channel_versions"].items():
            _name(channel, 'checkpoint["channel_versions"]')
            _version(version, f'checkpoint["channel_versions"][{channel!r}]')
        kind, data = self.serde.dumps_typed({**checkpoint, "channel_values": inline})
        serializable = get_serializable_checkpoint_metadata(config, metadata)
        text = _metadata_json(serializable)
        run_id = serializable.get("run_id")
        row = Stored(
            thread_id,
            checkpoint_ns,
            checkpoint_id,
            parent,
            kind,
            data,
            text,
            validate.identifier(run_id, 'metadata["run_id"]') if isinstance(run_id, str) and run_id else None,
        )

        async def call() -> None:
            limit = await self._limit()
            validate.within_statement_limit(_row_size(data, text), limit, "checkpoint")
            for blob in blobs:
                validate.within_statement_limit(
                    _row_size(blob.data), limit, f"channel_values[{blob.channel!r}]"
                )
            # Fixed before the first attempt: a retry after a lost COMMIT settles by it.
            await rows.put(self.ledger, row, blobs, new_uuid7())

        await self._run(call, "put", thread_id)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint_id,
            }
        }

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes to ``config``'s checkpoint, keyed as LangGraph
        keys them (``idx``: the write's index, a special channel's ``WRITES_IDX_MAP``
        index); exactly once. A write stored already under its key is kept, unless every
        write of the call is to a special channel (then replaced), as LangGraph's
        PostgreSQL saver does.

        Raises:
            SessionDeleted: the checkpoint's thread was deleted after this run read it.
            ValueError / TypeError: a bad config, task id, path or write; nothing written.
        """
        configurable = _configurable(config)
        thread_id, checkpoint_ns = _thread(configurable), _namespace(configurable)
        checkpoint_id = _checkpoint_id(configurable)
        if checkpoint_id is None:
            raise ValueError('config["configurable"] has no checkpoint_id: writes belong to a checkpoint')
        task = _key(task_id, "task_id")
        path = validate.text(task_path, "task_path")
        if isinstance(writes, str | bytes) or not isinstance(writes, Sequence):
            raise TypeError(
                f"writes must be a sequence of (channel, value) pairs, not {type(writes).__name__}"
            )
        stored = []
        for index, pair in enumerate(writes):
            if not isinstance(pair, tuple | list) or len(pair) != 2:
                raise TypeError(f"writes[{index}] must be a (channel, value) pair")
            channel = _name(pair[0], f"writes[{index}] channel")
            kind, data = self.serde.dumps_typed(pair[1])
            stored.append(Write(task, WRITES_IDX_MAP.get(channel, index), path, channel, kind, data))
        replace = all(write.channel in WRITES_IDX_MAP for write in stored)

        async def call() -> None:
            limit = await self._limit()
            for index, write in enumerate(stored):
                validate.within_statement_limit(_row_size(write.data, path), limit, f"writes[{index}]")
            await rows.put_writes(
                self.ledger,
                thread_id,
                checkpoint_ns,
                checkpoint_id,
                stored,
                replace=replace,
                write_id=new_uuid7(),
            )

        await self._run(call, "put_writes", thread_id)

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete the thread's checkpoints and writes in every namespace; its id keeps a
        tombstone, so a run from before the delete cannot bring them back. A missing
        thread is no error; a put of a new run starts the thread again."""
        thread = validate.identifier(thread_id, "thread_id")
        await self._run(lambda: rows.delete_thread(self.ledger, thread), "delete_thread", thread)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints of these runs (their ``metadata["run_id"]``) and their
        writes, each thread in one transaction; the blobs stay for the checkpoints left."""
        runs = _thread_ids(run_ids, "run_ids")
        if not runs:
            return

        async def call() -> None:
            for thread_id in await rows.runs_threads(self.ledger, runs):
                await rows.delete_runs(self.ledger, thread_id, runs)

        await self._run(call, "delete_for_runs")

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of one thread to another, in one transaction
        (a row the target holds under the same key is kept)."""
        source = validate.identifier(source_thread_id, "source_thread_id")
        target = validate.identifier(target_thread_id, "target_thread_id")
        if source == target:
            raise ValueError("source_thread_id and target_thread_id are the same thread")
        await self._run(lambda: rows.copy_thread(self.ledger, source, target), "copy_thread", target)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune the threads, each in one transaction: ``"keep_latest"`` keeps the latest
        checkpoint of each namespace (with its blobs and writes), ``"delete"`` deletes
        the thread as :meth:`adelete_thread` does.

        Raises:
            TypeError: ``thread_ids`` is a str.
            ValueError: an unknown strategy.
            NotImplementedError: ``"keep_latest"`` of a thread that uses a ``DeltaChannel``.
        """
        threads = _thread_ids(thread_ids, "thread_ids")
        if strategy not in PRUNE_STRATEGIES:
            raise ValueError(f"Unknown prune strategy: {strategy!r}")

        async def call() -> None:
            for thread_id in threads:
                if strategy == "delete":
                    await rows.delete_thread(self.ledger, thread_id)
                else:
                    await rows.keep_latest(self.ledger, thread_id, self._wanted)

        await self._run(call, "prune")

    # -- the sync methods (AsyncPostgresSaver's rules) ----------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """:meth:`aget_tuple` for sync code (see the class: **Sync calls**)."""
        return self._sync(lambda: self.aget_tuple(config), "aget_tuple")

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """:meth:`alist` for sync code, read whole before the first item is yielded."""

        async def collect() -> list[CheckpointTuple]:
            return [item async for item in self.alist(config, filter=filter, before=before, limit=limit)]

        yield from self._sync(collect, "alist")

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """:meth:`aput` for sync code."""
        return self._sync(lambda: self.aput(config, checkpoint, metadata, new_versions), "aput")

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        """:meth:`aput_writes` for sync code."""
        self._sync(lambda: self.aput_writes(config, writes, task_id, task_path), "aput_writes")

    def delete_thread(self, thread_id: str) -> None:
        """:meth:`adelete_thread` for sync code."""
        self._sync(lambda: self.adelete_thread(thread_id), "adelete_thread")

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """:meth:`adelete_for_runs` for sync code."""
        self._sync(lambda: self.adelete_for_runs(run_ids), "adelete_for_runs")

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`acopy_thread` for sync code."""
        self._sync(lambda: self.acopy_thread(source_thread_id, target_thread_id), "acopy_thread")

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`aprune` for sync code."""
        self._sync(lambda: self.aprune(thread_ids, strategy=strategy), "aprune")

    # -- rows and tuples -----------------------------------------------------------------------

    async def _limit(self) -> int:
        await self.ledger.ensure_ready()
        return self.ledger.statement_limit

    def _checkpoint(self, row: Stored) -> dict[str, Any]:
        loaded: dict[str, Any] = self.serde.loads_typed((row.type, row.data))
        return loaded

    def _wanted(self, row: Stored) -> Iterable[tuple[str, str]]:
        """The blobs a stored checkpoint needs: its channels at their versions, but those
        kept inline."""
        checkpoint = self._checkpoint(row)
        inline = checkpoint.get("channel_values") or {}
        return [
            (channel, str(version))
            for channel, version in checkpoint["channel_versions"].items()
            if channel not in inline
        ]

    def _tuple(self, loaded: Loaded, metadata: dict[str, Any] | None = None) -> CheckpointTuple:
        row = loaded.row
        checkpoint = self._checkpoint(row)
        values = dict(checkpoint.get("channel_values") or {})
        for blob in loaded.blobs:
            if blob.type != "empty":
                values[blob.channel] = self.serde.loads_typed((blob.type, blob.data or b""))
        checkpoint["channel_values"] = values
        writes = sorted(
            loaded.writes, key=lambda write: writes_sort_key(write.task_path, write.task_id, write.idx)
        )
        config: RunnableConfig = {
            "configurable": {
                "thread_id": row.thread_id,
                "checkpoint_ns": row.checkpoint_ns,
                "checkpoint_id": row.checkpoint_id,
            }
        }
        parent: RunnableConfig | None = None
        if row.parent_checkpoint_id is not None:
            parent = {
                "configurable": {
                    "thread_id": row.thread_id,
                    "checkpoint_ns": row.checkpoint_ns,
                    "checkpoint_id": row.parent_checkpoint_id,
                }
            }
        return CheckpointTuple(
            config,
            checkpoint,  # type: ignore[arg-type]
            cast(CheckpointMetadata, metadata if metadata is not None else json.loads(row.metadata_json)),
            parent,
            [
                (write.task_id, write.channel, self.serde.loads_typed((write.type, write.data or b"")))
                for write in writes
            ],
        )
