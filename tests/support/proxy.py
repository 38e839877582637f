"""A TCP forwarder between a store and its database server that drops connections on cue.

The faults of a real network, without touching the server: the proxy listens on a
free loopback port, opens one upstream connection per client connection, and
forwards bytes both ways. Armed with a plan, it acts on the next client message that
contains a marker -- ``COMMIT`` (PostgreSQL's simple query and MySQL's ``COM_QUERY``
both carry the statement's text) or a value the test appended (asyncpg sends it in
its Bind message, aiomysql inside the statement text):

* ``drop-after-commit``: forward the COMMIT, wait for the server's answer, swallow
  it and drop the client: the transaction is committed, the client cannot know.
* ``commit-late``: drop the client at once and forward the COMMIT only ``delay``
  seconds later, while the server's transaction still holds its locks: the client
  reconnects and looks its write up while the server has not committed it yet.
* ``drop-before``: drop the client without forwarding the message: nothing was
  committed.
* ``stall-before``: black-hole the connection at that message, both ways: the message
  is not forwarded, nothing more goes either way, and no reset comes. The server's
  transaction stays open until the client gives up on the connection (closes it): the
  proxy then drops the server's side too, which rolls the transaction back.
* ``stall-after-commit``: forward the message, then black-hole the connection both
  ways: the server commits, the client waits for an answer that never comes.

:meth:`stall` black-holes every connection, open and new (a new one is accepted and
then hears nothing, as behind a firewall that drops packets), until :meth:`unstall`;
a black-holed connection the client gives up on is dropped on the server's side too.
:meth:`refuse` closes the listening socket (new connections are refused) and
:meth:`accept` opens it again on the same port; :meth:`sever` drops every connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from sqlalchemy.engine import URL

from chatledger.engine import Ledger

#: The marker of a COMMIT in the client's byte stream: the statement ``COMMIT``, not
#: the ``READ COMMITTED`` of a BEGIN.
COMMIT = re.compile(rb"COMMIT(?![A-Z])")


@dataclass(eq=False)
class _Pair:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    #: Discard what the server sends from now on, and drop both sides after it.
    swallow: bool = False
    #: Then also refuse new connections and drop every other one.
    refuse_after: bool = False
    #: Black-holed: nothing is forwarded either way, and nothing is answered.
    stalled: bool = False
    closed: bool = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.client.transport.abort()
            self.upstream.transport.abort()


@dataclass
class _Plan:
    action: str
    marker: re.Pattern[bytes]
    delay: float
    refuse_after: bool
    #: Acts only once a message containing this passed (``None``: at once).
    after: re.Pattern[bytes] | None = None


@dataclass
class Proxy:
    """See the module docstring. Use :func:`running_proxy`."""

    upstream_host: str
    upstream_port: int
    port: int = 0
    #: What happened, in order: ``(monotonic time, event)``.
    log: list[tuple[float, str]] = field(default_factory=list)
    #: Client connections accepted so far.
    accepted: int = 0
    _plan: _Plan | None = None
    _server: asyncio.Server | None = None
    _pairs: set[_Pair] = field(default_factory=set)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _noted: asyncio.Event = field(default_factory=asyncio.Event)
    _stalled: bool = False

    def url(self, upstream: URL) -> URL:
        """``upstream``'s URL through this proxy."""
        return upstream.set(host="127.0.0.1", port=self.port)

    def arm(
        self,
        action: str,
        marker: bytes | re.Pattern[bytes] = COMMIT,
        *,
        delay: float = 1.0,
        refuse_after: bool = False,
        after: bytes | None = None,
    ) -> None:
        """Act once on the next client message containing ``marker`` (see the module).
        ``refuse_after`` (``drop-after-commit``): once the server answered the COMMIT,
        refuse new connections and drop every open one, before the client can
        reconnect -- the database becomes unreachable right after committing.
        ``after``: only on such a message after one containing these bytes (the
        COMMIT of a given statement's transaction)."""
        if action not in (
            "drop-after-commit",
            "commit-late",
            "drop-before",
            "stall-before",
            "stall-after-commit",
        ):
            raise ValueError(f"unknown action {action!r}")
        pattern = marker if isinstance(marker, re.Pattern) else re.compile(re.escape(marker))
        first = None if after is None else re.compile(re.escape(after))
        self._plan = _Plan(action, pattern, delay, refuse_after, first)

    @property
    def armed(self) -> bool:
        return self._plan is not None

    def events(self, name: str) -> list[float]:
        return [at for at, event in self.log if event == name]

    async def noted(self, name: str) -> None:
        """Return once the log holds ``name``."""
        while not self.events(name):
            self._noted.clear()
            await self._noted.wait()

    def _note(self, event: str) -> None:
        self.log.append((time.monotonic(), event))
        self._noted.set()

    async def accept(self) -> None:
        """Listen (again) on :attr:`port`."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    def refuse(self) -> None:
        """Stop listening: new connections are refused; open ones stay."""
        if self._server is not None:
            self._server.close()
            self._server = None
        self._note("refusing")

    def stall(self) -> None:
        """Black-hole every connection, open and new, until :meth:`unstall`."""
        self._stalled = True
        for pair in self._pairs:
            pair.stalled = True
        self._note("stalled")

    def unstall(self) -> None:
        """Stop black-holing new connections; the ones black-holed stay silent until
        their client gives up on them (their bytes were dropped: a stream cannot
        resume)."""
        self._stalled = False
        self._note("unstalled")

    def sever(self) -> None:
        """Drop every open connection, as a server restart or a firewall would."""
        for pair in list(self._pairs):
            pair.close()
        self._note("severed")

    async def close(self) -> None:
        self.refuse()
        self.sever()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._note("accepted")
        try:
            up_reader, up_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        except OSError:
            writer.transport.abort()
            return
        pair = _Pair(writer, up_writer, stalled=self._stalled)
        self._pairs.add(pair)
        try:
            await asyncio.gather(self._to_server(pair, reader), self._to_client(pair, up_reader))
        finally:
            pair.close()
            self._pairs.discard(pair)

    async def _to_server(self, pair: _Pair, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while not pair.closed:
                chunk = await reader.read(65536)
                if not chunk:
                    if pair.stalled:  # the client gave up on it: so does the "network"
                        pair.close()
                    else:
                        pair.upstream.close()
                    return
                if pair.stalled:
                    continue  # dropped
                plan = self._plan
                if plan is not None and plan.after is not None and plan.after.search(chunk):
                    plan.after = None  # this message passes; the next marker is acted on
                elif plan is not None and plan.after is None and plan.marker.search(chunk):
                    self._plan = None
                    await self._act(pair, plan, chunk)
                    if pair.stalled:
                        continue  # read on, to see when the client gives up
                    return
                pair.upstream.write(chunk)
                await pair.upstream.drain()
        if pair.stalled:  # the client gave up on it (a reset): so does the "network"
            pair.close()

    async def _act(self, pair: _Pair, plan: _Plan, chunk: bytes) -> None:
        if plan.action == "drop-before":
            self._note("dropped before")
            pair.close()
        elif plan.action == "stall-before":
            pair.stalled = True
            self._note("stalled before")
        elif plan.action == "stall-after-commit":
            pair.stalled = True  # before the answer can come
            pair.upstream.write(chunk)
            await pair.upstream.drain()
            self._note("commit forwarded")
        elif plan.action == "drop-after-commit":
            pair.swallow = True
            pair.refuse_after = plan.refuse_after
            pair.upstream.write(chunk)
            await pair.upstream.drain()
            self._note("commit forwarded")
        else:  # commit-late
            pair.swallow = True
            pair.client.transport.abort()
            self._note("client dropped")
            task = asyncio.create_task(self._forward_late(pair, chunk, plan.delay))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _forward_late(self, pair: _Pair, chunk: bytes, delay: float) -> None:
        await asyncio.sleep(delay)
        pair.upstream.write(chunk)
        await pair.upstream.drain()
        self._note("commit forwarded")

    async def _to_client(self, pair: _Pair, reader: asyncio.StreamReader) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while not pair.closed:
                chunk = await reader.read(65536)
                if not chunk:  # the server closed the connection: so does the proxy
                    if not pair.stalled:
                        pair.client.close()
                    return
                if pair.stalled:
                    continue  # dropped
                if pair.swallow:
                    # The server's answer to the COMMIT: the transaction is committed.
                    self._note("commit answered")
                    if pair.refuse_after:
                        self.refuse()
                        self.sever()
                    pair.close()
                    return
                pair.client.write(chunk)
                await pair.client.drain()


def commit_point(ledger: Ledger, value: str) -> re.Pattern[bytes]:
    """The client message that commits an append, for :meth:`Proxy.arm`: its ``COMMIT``;
    or, where the append is one statement committed by itself (``ledger.single_append``),
    that statement, found by ``value``, a unique value it binds (its message id, or a
    unique content)."""
    return re.compile(re.escape(value.encode())) if ledger.single_append is not None else COMMIT


@contextlib.asynccontextmanager
async def running_proxy(upstream: URL) -> AsyncIterator[Proxy]:
    """A proxy in front of ``upstream``'s server, closed on the way out."""
    proxy = Proxy(upstream.host or "127.0.0.1", upstream.port or _DEFAULT_PORTS[upstream.get_backend_name()])
    await proxy.accept()
    try:
        yield proxy
    finally:
        await proxy.close()


_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306}
