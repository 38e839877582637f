"""Throwaway primaries with read replicas, of local processes, for the ``read_dsn`` tests
and the bench.

- PostgreSQL: a primary (:class:`~tests.support.throwaway.ThrowawayPostgres`) and
  streaming standbys, each made by ``pg_basebackup -R`` from it into a data directory
  of its own and started on a free port (hot standby, asynchronous replication).
- MariaDB: a primary with a binary log (``--log-bin``, row format, ``server_id`` 1) and
  asynchronous replicas (``server_id`` 2, 3...) that replicate from it by GTID
  (``CHANGE MASTER TO ... MASTER_USE_GTID=slave_pos``), each a
  :class:`~tests.support.throwaway.ThrowawayMariaDB` with its own data directory.

Each waits until every replica replicates (PostgreSQL: ``pg_stat_replication`` lists
them streaming; MariaDB: both replica threads run), within
:data:`~tests.support.throwaway.SERVER_TIMEOUT`, else fails. ``python -m
tests.support.replicas postgresql|mysql`` starts one with two replicas, prints the DSNs
and waits until Ctrl-C.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.engine import URL

from .throwaway import (
    SERVER_TIMEOUT,
    ThrowawayMariaDB,
    ThrowawayPostgres,
    ThrowawayServer,
    _postgres_bindir,
    _which,
    require,
)


class PostgresStandby(ThrowawayPostgres):
    """A hot standby of ``primary``, from ``pg_basebackup``, streaming from it."""

    def __init__(self, primary: ThrowawayPostgres) -> None:
        ThrowawayServer.__init__(self)  # no initdb: the base backup is the data directory
        self.bindir = primary.bindir
        if "user" in self._popen_user():
            shutil.chown(self.root, "postgres", "postgres")
        subprocess.run(
            [
                str(self.bindir / "pg_basebackup"),
                "-h",
                "127.0.0.1",
                "-p",
                str(primary.port),
                "-U",
                "postgres",
                "-D",
                str(self.root / "data"),
                "-R",  # standby.signal and primary_conninfo
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
            timeout=SERVER_TIMEOUT,
            cwd=self.root,
            **self._popen_user(),  # type: ignore[call-overload]
        )


def _psql(server: ThrowawayPostgres, query: str) -> str:
    result = subprocess.run(
        [
            str(server.bindir / "psql"),
            "-h127.0.0.1",
            f"-p{server.port}",
            "-Upostgres",
            "-dpostgres",
            "-At",
            "-c",
            query,
        ],
        capture_output=True,
        text=True,
        timeout=10,
    )
    return result.stdout.strip() if result.returncode == 0 else ""


class PostgresReplicas:
    """A PostgreSQL primary and ``count`` streaming standbys; ``close()`` removes them."""

    def __init__(self, count: int) -> None:
        self.primary = ThrowawayPostgres()
        self.replicas: list[PostgresStandby] = []
        self.count = count

    def start(self) -> None:
        self.primary.start()
        for _ in range(self.count):
            standby = PostgresStandby(self.primary)
            self.replicas.append(standby)
            standby.start()
        _until(
            lambda: (
                _psql(self.primary, "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
                == str(self.count)
            ),
            f"{self.count} PostgreSQL standbys streaming",
            self.primary.log,
        )

    def pause(self, index: int) -> None:
        """Stop one standby's replay (it keeps receiving WAL): reads there go stale."""
        _psql(self.replicas[index], "SELECT pg_wal_replay_pause()")

    def resume(self, index: int) -> None:
        _psql(self.replicas[index], "SELECT pg_wal_replay_resume()")

    def close(self) -> None:
        for server in (*self.replicas, self.primary):
            server.close()


class MariaDBPrimary(ThrowawayMariaDB):
    """A MariaDB server with a binary log (row format, GTIDs), as a replication source."""

    server_id = 1

    def _command(self) -> list[str]:
        own = [arg for arg in super()._command() if arg != "--skip-log-bin"]
        return [*own, f"--server-id={self.server_id}", "--log-bin=binlog", "--binlog-format=ROW"]


class MariaDBReplica(ThrowawayMariaDB):
    """A MariaDB server replicating asynchronously from ``primary`` by GTID."""

    def __init__(self, primary: ThrowawayMariaDB, server_id: int) -> None:
        super().__init__()
        self.source = primary
        self.server_id = server_id

    def _command(self) -> list[str]:
        return [*super()._command(), f"--server-id={self.server_id}"]

    def start(self) -> None:
        super().start()
        self.sql(
            f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={self.source.port}, "
            "MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos; START SLAVE"
        )

    def sql(self, statements: str) -> str:
        """Run ``statements`` with the ``mariadb`` client; its output (``-N -B``)."""
        client = _which("mariadb", "mysql")
        assert client is not None
        result = subprocess.run(
            [
                client,
                "--no-defaults",
                "--protocol=tcp",
                "-h127.0.0.1",
                f"-P{self.port}",
                "-uroot",
                "-NBe",
                statements,
            ],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if result.returncode != 0:
            raise RuntimeError(f"mariadb on port {self.port}: {result.stderr.strip()}")
        return result.stdout

    def replicating(self) -> bool:
        # ON while the I/O thread is connected to the primary and the SQL thread runs.
        return self.sql("SHOW GLOBAL STATUS LIKE 'Slave_running'").split()[1:] == ["ON"]


class MariaDBReplicas:
    """A MariaDB primary and ``count`` GTID replicas; ``close()`` removes them."""

    def __init__(self, count: int) -> None:
        self.primary = MariaDBPrimary()
        self.replicas = [MariaDBReplica(self.primary, 2 + index) for index in range(count)]

    def start(self) -> None:
        self.primary.start()
        for replica in self.replicas:
            replica.start()
        for replica in self.replicas:
            _until(replica.replicating, f"MariaDB replica on port {replica.port} replicating", replica.log)

    def pause(self, index: int) -> None:
        """Stop one replica's applier (it keeps receiving the binary log): reads go stale."""
        self.replicas[index].sql("STOP SLAVE SQL_THREAD")

    def resume(self, index: int) -> None:
        self.replicas[index].sql("START SLAVE SQL_THREAD")

    def close(self) -> None:
        for server in (*self.replicas, self.primary):
            server.close()


Replicated = PostgresReplicas | MariaDBReplicas
KINDS: dict[str, type[PostgresReplicas] | type[MariaDBReplicas]] = {
    "postgresql": PostgresReplicas,
    "mysql": MariaDBReplicas,
}


def replicas_missing(backend: str) -> str | None:
    """Why a primary with replicas of ``backend`` cannot run here, or ``None``."""
    if backend == "postgresql":
        bindir = _postgres_bindir()
        if bindir is None or not (bindir / "pg_basebackup").exists():
            return "PostgreSQL's server binaries (initdb, postgres, pg_basebackup) are not installed"
        return None
    reason = ThrowawayMariaDB.missing()
    if reason is None and _which("mariadb", "mysql") is None:
        return "the mariadb client is not installed"
    return reason


def admin_urls(cluster: Replicated) -> tuple[URL, list[URL]]:
    """The primary's and each replica's admin URL."""
    return cluster.primary.admin_url, [replica.admin_url for replica in cluster.replicas]


@contextlib.contextmanager
def replicated(backend: str, count: int = 2) -> Iterator[Replicated]:
    """A started primary with ``count`` replicas of ``backend``; fails (required) or
    skips when a binary is missing; killed and removed afterwards."""
    require(backend, replicas_missing(backend))
    cluster = KINDS[backend](count)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


def _until(condition: object, what: str, log: Path) -> None:
    deadline = time.monotonic() + SERVER_TIMEOUT
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return
        time.sleep(0.1)
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:]) if log.exists() else "<no log>"
    raise TimeoutError(f"{what}: not within {SERVER_TIMEOUT} s\n{tail}")


def main(backend: str) -> None:
    reason = replicas_missing(backend)
    if reason:
        raise SystemExit(reason)
    cluster = KINDS[backend](2)
    try:
        cluster.start()
        primary, replicas = admin_urls(cluster)
        print("primary", primary.render_as_string(hide_password=False), flush=True)
        for url in replicas:
            print("replica", url.render_as_string(hide_password=False), flush=True)
        stop = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, stop)
        signal.sigwait(stop)
    finally:
        cluster.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "postgresql")
