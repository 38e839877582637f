"""Throwaway database servers and writer processes for the fault and pooling tests.

The shared servers of this machine (and CI) are never stopped by a test: other
tests use them at the same time. A test that restarts a server runs its own
PostgreSQL (``initdb`` + ``postgres``) or MariaDB (``mariadb-install-db`` +
``mariadbd``) on a free loopback port, in a temporary directory that is removed
afterwards; a test that needs PgBouncer runs its own ``pgbouncer`` the same way.
Every wait has a timeout, and every process is killed on the way out, whatever
the test did.

Run as a module (``python -m tests.support.throwaway ...``) this file is also the writer
process that the SIGKILL tests kill in the middle of a transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from chatledger.dsn import resolve_dsn
from chatledger.migrate import upgrade_database

from .backends import Server, Servers, fresh_name, required_backends

#: Seconds a server may take to start or stop before the test fails.
SERVER_TIMEOUT = 60.0
#: The repository root, the working directory of writer processes.
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def require(backend: str, reason: str | None) -> None:
    """Fail when ``reason`` (why a tool is missing) applies to a backend that
    ``CHATLEDGER_REQUIRE_BACKENDS`` names; skip with the reason otherwise."""
    if reason is None:
        return
    if backend in required_backends():
        pytest.fail(f"{backend} is required by CHATLEDGER_REQUIRE_BACKENDS but {reason}")
    pytest.skip(reason)


def shared_server(servers: Servers, backend: str) -> Server:
    """This machine's server of a backend (from the test DSN variables), as the
    ``database`` fixture finds it: missing fails when required, else skips."""
    found = servers.get(backend)
    if isinstance(found, str):
        require(backend, f"unavailable: {found}")
        raise AssertionError("unreachable")
    return found


@contextlib.asynccontextmanager
async def migrated_database(server: Server) -> AsyncIterator[URL]:
    """A fresh database on ``server``, migrated to head, dropped afterwards."""
    name = fresh_name("chatledger_fault")
    url = await server.create_database(name)
    try:
        await upgrade_database(url)
        yield url
    finally:
        await server.drop_database(name)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "<no log>"


def _wait(condition: object, what: str, log: Path, process: subprocess.Popen[bytes] | None) -> None:
    deadline = time.monotonic() + SERVER_TIMEOUT
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what}: the process exited with {process.returncode}\n{_tail(log)}")
        time.sleep(0.1)
    raise TimeoutError(f"{what}: not done within {SERVER_TIMEOUT} s\n{_tail(log)}")


def _end(process: subprocess.Popen[bytes], sig: signal.Signals, timeout: float = SERVER_TIMEOUT) -> None:
    """Send ``sig`` and wait; SIGKILL when it does not exit in time."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(sig)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait(timeout=10)


class ThrowawayServer:
    """One private database server on a free loopback port, in a temporary directory.

    ``start()`` / ``stop(crash=...)`` / ``restart(...)`` block until the server
    answers (or is gone), within :data:`SERVER_TIMEOUT`; use ``asyncio.to_thread``
    from a running event loop. ``close()`` kills it and removes the directory.
    """

    backend: str

    def __init__(self) -> None:
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix=f"chatledger-{self.backend}-"))
        self.log = self.root / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def admin_url(self) -> URL:
        raise NotImplementedError

    @property
    def server(self) -> Server:
        """The server as the test fixtures know one (create / drop databases)."""
        return Server(self.backend, self.admin_url)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @staticmethod
    def missing() -> str | None:
        """Why this kind of server cannot run here, or ``None``."""
        raise NotImplementedError

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _answers(self) -> bool:
        raise NotImplementedError

    def _popen_user(self) -> dict[str, object]:
        return {}

    def start(self) -> None:
        if self.running:
            raise RuntimeError(f"{self.backend} throwaway server is running already")
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                **self._popen_user(),  # type: ignore[call-overload]
            )
        _wait(self._answers, f"starting {self.backend} on port {self.port}", self.log, self.process)

    def stop(self, *, crash: bool = False) -> None:
        """Shut the server down: ``crash`` kills it as a power cut would leave it
        (crash recovery on the next start); otherwise a fast, clean shutdown. Either
        way, connected clients lose their connection."""
        if self.process is not None:
            _end(self.process, self._crash_signal if crash else self._stop_signal)

    def restart(self, *, crash: bool = False, down_for: float = 0.5) -> None:
        self.stop(crash=crash)
        time.sleep(down_for)
        self.start()

    def close(self) -> None:
        try:
            if self.process is not None:
                _end(self.process, signal.SIGKILL, timeout=10)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    _stop_signal = signal.SIGTERM
    _crash_signal = signal.SIGKILL


def _postgres_bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda path: int(path.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class ThrowawayPostgres(ThrowawayServer):
    """PostgreSQL via ``initdb`` and ``postgres``, as the ``postgres`` OS user when
    run as root (the server refuses root); trust authentication on 127.0.0.1."""

    backend = "postgresql"
    # SIGINT: fast shutdown. SIGQUIT: immediate shutdown, crash recovery on the next
    # start (SIGKILL would orphan the backends, which keep the shared memory).
    _stop_signal = signal.SIGINT
    _crash_signal = signal.SIGQUIT

    @staticmethod
    def missing() -> str | None:
        """Why a throwaway PostgreSQL cannot run here, or ``None``."""
        if _postgres_bindir() is None:
            return "PostgreSQL's server binaries (initdb, postgres) are not installed"
        return None

    def __init__(self) -> None:
        super().__init__()
        bindir = _postgres_bindir()
        assert bindir is not None
        self.bindir = bindir
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        subprocess.run(
            [
                str(bindir / "initdb"),
                "--no-sync",
                "--auth=trust",
                "--username=postgres",
                "--encoding=UTF8",
                "--locale=C",
                f"--pgdata={self.root / 'data'}",
            ],
            check=True,
            capture_output=True,
            timeout=SERVER_TIMEOUT,
            cwd=self.root,
            **self._popen_user(),  # type: ignore[call-overload]
        )

    def _popen_user(self) -> dict[str, object]:
        if os.geteuid() == 0:
            return {"user": "postgres", "group": "postgres", "extra_groups": []}
        return {}

    @property
    def admin_url(self) -> URL:
        return resolve_dsn(f"postgresql://postgres@127.0.0.1:{self.port}/postgres")

    def _command(self) -> list[str]:
        return [
            str(self.bindir / "postgres"),
            "-D",
            str(self.root / "data"),
            "-p",
            str(self.port),
            "-k",
            str(self.root),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "max_connections=40",
            "-c",
            "shared_buffers=16MB",
        ]

    def _answers(self) -> bool:
        ready = subprocess.run(
            [str(self.bindir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)],
            capture_output=True,
            timeout=10,
        )
        return ready.returncode == 0


def _which(*names: str) -> str | None:
    for name in names:
        for found in (shutil.which(name), shutil.which(name, path="/usr/sbin:/usr/local/sbin")):
            if found:
                return found
    return None


class ThrowawayMariaDB(ThrowawayServer):
    """MariaDB via ``mariadb-install-db`` and ``mariadbd``; ``root`` without a
    password on 127.0.0.1."""

    backend = "mysql"
    _stop_signal = signal.SIGTERM  # clean shutdown
    _crash_signal = signal.SIGKILL  # InnoDB crash recovery on the next start

    @staticmethod
    def missing() -> str | None:
        """Why a throwaway MariaDB cannot run here, or ``None``."""
        for names in (("mariadbd", "mysqld"), ("mariadb-install-db", "mysql_install_db"), ("mariadb-admin",)):
            if _which(*names) is None:
                return f"MariaDB's {names[0]} is not installed"
        return None

    def __init__(self) -> None:
        super().__init__()
        install = _which("mariadb-install-db", "mysql_install_db")
        assert install is not None
        done = subprocess.run(
            [
                install,
                "--no-defaults",
                f"--datadir={self.root / 'data'}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                *(["--user=root"] if os.geteuid() == 0 else []),
            ],
            capture_output=True,
            text=True,
            timeout=SERVER_TIMEOUT,
            cwd=self.root,
        )
        if done.returncode:  # its own words, which CalledProcessError would not show
            raise AssertionError(
                f"{install} failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}"
            )

    @property
    def admin_url(self) -> URL:
        return resolve_dsn(f"mysql://root@127.0.0.1:{self.port}/mysql")

    def _command(self) -> list[str]:
        server = _which("mariadbd", "mysqld")
        assert server is not None
        return [
            server,
            "--no-defaults",
            f"--datadir={self.root / 'data'}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.root / 'mysqld.sock'}",
            f"--pid-file={self.root / 'mysqld.pid'}",
            "--skip-name-resolve",
            "--skip-log-bin",
            "--innodb-buffer-pool-size=32M",
            *(["--user=root"] if os.geteuid() == 0 else []),
        ]

    def _answers(self) -> bool:
        admin = _which("mariadb-admin", "mysqladmin")
        assert admin is not None
        ping = subprocess.run(
            [admin, "--no-defaults", "--protocol=tcp", "-h127.0.0.1", f"-P{self.port}", "-uroot", "ping"],
            capture_output=True,
            timeout=10,
        )
        return ping.returncode == 0


THROWAWAY: dict[str, type[ThrowawayServer]] = {"postgresql": ThrowawayPostgres, "mysql": ThrowawayMariaDB}


@contextlib.contextmanager
def throwaway_server(backend: str) -> Iterator[ThrowawayServer]:
    """A started throwaway server of ``backend``; fails (required) or skips when its
    binaries are missing; killed and removed afterwards."""
    kind = THROWAWAY[backend]
    require(backend, kind.missing())
    server = kind()
    try:
        server.start()
        yield server
    finally:
        server.close()


def pgbouncer_missing() -> str | None:
    """Why PgBouncer cannot run here (Debian package ``pgbouncer``), or ``None``."""
    if _which("pgbouncer") is None:
        return "the pgbouncer binary is not installed (apt-get install pgbouncer)"
    return None


class ThrowawayPgBouncer:
    """PgBouncer in transaction pooling mode on a free loopback port, in front of the
    PostgreSQL server of ``upstream`` (any database on it, as the client names it).

    Clients authenticate as ``trust`` (any user of the auth file); PgBouncer logs in
    to the server as that user with the password from ``upstream``. Server
    connections are reset with ``DISCARD ALL`` after every transaction, which drops
    every prepared statement: a client that reuses one across transactions fails.
    """

    def __init__(self, upstream: URL, *, pool_size: int = 4) -> None:
        binary = _which("pgbouncer")
        assert binary is not None, pgbouncer_missing()
        self.port = free_port()
        self.upstream = upstream
        self.root = Path(tempfile.mkdtemp(prefix="chatledger-pgbouncer-"))
        self.root.chmod(0o755)  # read by the unprivileged user PgBouncer switches to
        self.log = self.root / "pgbouncer.log"
        user = upstream.username or "postgres"
        password = (upstream.password or "").replace('"', '""')
        (self.root / "userlist.txt").write_text(f'"{user}" "{password}"\n')
        (self.root / "pgbouncer.ini").write_text(
            "\n".join(
                [
                    "[databases]",
                    f"* = host={upstream.host or '127.0.0.1'} port={upstream.port or 5432}",
                    "[pgbouncer]",
                    "listen_addr = 127.0.0.1",
                    f"listen_port = {self.port}",
                    "unix_socket_dir =",
                    "auth_type = trust",
                    f"auth_file = {self.root / 'userlist.txt'}",
                    "pool_mode = transaction",
                    "server_reset_query = DISCARD ALL",
                    "server_reset_query_always = 1",
                    f"default_pool_size = {pool_size}",
                    "max_client_conn = 200",
                    "",
                ]
            )
        )
        for path in self.root.iterdir():
            path.chmod(0o644)
        command = [binary, *(["-u", "nobody"] if os.geteuid() == 0 else []), str(self.root / "pgbouncer.ini")]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.root
            )
        try:
            _wait(self._listening, f"starting pgbouncer on port {self.port}", self.log, self.process)
        except BaseException:
            self.close()
            raise

    def url(self, database: str) -> URL:
        """``upstream``'s URL for ``database``, through PgBouncer."""
        return self.upstream.set(host="127.0.0.1", port=self.port, database=database)

    def _listening(self) -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.settimeout(1)
            return probe.connect_ex(("127.0.0.1", self.port)) == 0

    def close(self) -> None:
        try:
            _end(self.process, signal.SIGTERM, timeout=10)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@dataclass(frozen=True)
class LedgerState:
    """What the tables hold for one session: the counter row's ``last_sequence``,
    the number of raw messages, and their sequences in order."""

    counter: int
    sequences: list[int]

    @property
    def consistent(self) -> bool:
        """Counter == rows == max sequence, sequences 1..counter without a gap."""
        return self.sequences == list(range(1, self.counter + 1))


async def ledger_state(storage: object, session_id: str) -> LedgerState:
    """Read one session's counter and raw-message sequences in one read transaction."""
    from chatledger.schema import raw_messages_table, sessions_table
    from chatledger.zett import LedgerSessionStorage

    assert isinstance(storage, LedgerSessionStorage)

    async def work(conn: AsyncConnection) -> LedgerState:
        counter = await conn.scalar(
            select(func.coalesce(func.max(sessions_table.c.last_sequence), 0)).where(
                sessions_table.c.id == session_id
            )
        )
        sequences = await conn.scalars(
            select(raw_messages_table.c.sequence)
            .where(raw_messages_table.c.session_id == session_id)
            .order_by(raw_messages_table.c.sequence)
        )
        return LedgerState(int(counter or 0), [int(sequence) for sequence in sequences])

    return await storage.ledger.read(work)


# -- the writer process the SIGKILL tests kill ------------------------------------------

#: Points where a ``hang`` writer stops inside its append transaction: right after
#: the statement that advances the counter row (on PostgreSQL the one statement of
#: the append, on SQLite before the message insert, on MySQL revision 0008's
#: procedure's ``CALL`` or, before it, the counter upsert), and right before COMMIT.
#: Where the append is one statement that commits itself (``ledger.single_append``),
#: it has no such points: the writer gives it a title to set, which takes the
#: transaction.
HANG_POINTS = ("after-counter", "before-commit")


def _stop_here() -> None:
    """Tell the parent, then block the whole process (the transaction stays open)
    until it is killed."""
    print("READY", flush=True)
    time.sleep(3600)
    raise SystemExit("not killed within an hour")


async def _hang(dsn: str, session_id: str, point: str) -> None:
    """Call ``storage.append`` and stop it at ``point``, inside its transaction."""
    from sqlalchemy import event
    from zett_agent.messages import UserMessage

    from chatledger.dialects import TRANSACTION_ENDED
    from chatledger.zett import LedgerSessionStorage

    async with LedgerSessionStorage(dsn) as storage:
        await storage.ledger.ensure_ready()  # its own transactions come before the hooks
        engine = storage.ledger.engine.sync_engine
        if point == "after-counter":

            @event.listens_for(engine, "after_cursor_execute")
            def _after(conn: Connection, cursor: object, statement: str, *args: object) -> None:
                # Not the statement that commits itself: in autocommit, or (MySQL)
                # revision 0010's procedure, which ends its own transaction.
                in_transaction = (
                    conn.get_execution_options().get("isolation_level") != "AUTOCOMMIT"
                    and "chatledger_append_committed" not in statement
                )
                words = statement.upper().split()
                advances = "INSERT" in words and "agent_sessions" in statement
                if in_transaction and (advances or words[:1] == ["CALL"]):
                    _stop_here()

        elif point == "before-commit":

            @event.listens_for(engine, "commit")
            def _commit(conn: Connection) -> None:
                # Not the COMMIT of a transaction its statement ended (it sends nothing).
                if not conn.info.get(TRANSACTION_ENDED):
                    _stop_here()

        else:
            raise SystemExit(f"unknown hang point {point!r}")
        title = "never set" if storage.ledger.single_append is not None else None
        await storage.append(session_id, "killed", UserMessage(content="never committed"), title=title)
        raise SystemExit("the append finished without stopping")


async def _loop(dsn: str, session_id: str) -> None:
    """Append forever, printing ``ACK sequence text`` after each acknowledged append."""
    from zett_agent.messages import UserMessage

    from chatledger.zett import LedgerSessionStorage

    async with LedgerSessionStorage(dsn) as storage:
        await storage.ledger.ensure_ready()
        print("READY", flush=True)
        index = 0
        while True:
            text = f"loop-{index}-{uuid.uuid4().hex[:6]}"
            sequence = await storage.append(session_id, "loop", UserMessage(content=text))
            print(f"ACK {sequence} {text}", flush=True)
            index += 1


def writer_command(mode: str, dsn: str, session_id: str, point: str = "") -> list[str]:
    """The argv of a writer process: ``mode`` is ``hang`` (with a point of
    :data:`HANG_POINTS`) or ``loop``."""
    return [sys.executable, "-m", "tests.support.throwaway", mode, dsn, session_id, point]


def main(argv: list[str]) -> None:
    mode, dsn, session_id, point = argv
    if mode == "hang":
        asyncio.run(_hang(dsn, session_id, point))
    elif mode == "loop":
        asyncio.run(_loop(dsn, session_id))
    else:
        raise SystemExit(f"unknown writer mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
