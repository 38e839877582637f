"""A throwaway PostgreSQL high-availability cluster: one primary and two standbys of
local processes, managed by Patroni, with a one-member etcd as its consensus store.

Everything runs on this machine's PostgreSQL 15 binaries (Debian's ``patroni`` and
``etcd-server`` packages), in one temporary directory, on free ports of 127.0.0.1:
etcd's client and peer ports, and per node a PostgreSQL port and a Patroni REST port.
Patroni bootstraps the first node (``initdb``), the others clone it
(``pg_basebackup``) and stream from it. ``synchronous_mode`` makes the primary wait
for one standby's flush before a COMMIT returns, and Patroni promotes only that
standby: an acknowledged commit survives the loss of the primary.

The timings are short so that a failover is quick (leader key ``ttl`` 10 s, Patroni
loop every second); a crashed primary is replaced within about ``ttl`` seconds.

``python -m tests.support.patroni`` starts a cluster, prints its multi-host DSN and waits,
until Ctrl-C.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

from chatledger.dsn import resolve_dsn

from .throwaway import SERVER_TIMEOUT, _end, _tail, _which, free_port, require

BINDIR = Path("/usr/lib/postgresql/15/bin")
NODES = 3
SCOPE = "chatledger-test"
#: Patroni's timings (seconds): the leader key's time to live, the loop period, and the
#: retry budget of its calls to etcd and PostgreSQL (``loop_wait + 2 * retry_timeout``
#: must not exceed ``ttl``).
TTL, LOOP_WAIT, RETRY_TIMEOUT = 10, 1, 4


def patroni_missing() -> str | None:
    """Why a Patroni cluster cannot run here, or ``None``."""
    if not (BINDIR / "postgres").exists():
        return f"PostgreSQL 15's server binaries are missing ({BINDIR})"
    if _which("patroni") is None:
        return "patroni is not installed (apt-get install patroni)"
    if _which("etcd") is None:
        return "etcd is not installed (apt-get install etcd-server)"
    return None


def _as_postgres() -> dict[str, Any]:
    # PostgreSQL refuses to run as root: Patroni and its servers run as "postgres".
    if os.geteuid() == 0:
        return {"user": "postgres", "group": "postgres", "extra_groups": []}
    return {}


def _clean_env(home: Path) -> dict[str, str]:
    """The environment of Debian's Patroni: the system Python, not the test venv."""
    keep = {"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C.UTF-8", "HOME": str(home)}
    return keep


def _http(url: str, *, method: str = "GET", body: dict[str, Any] | None = None) -> tuple[int, Any]:
    """One request to a Patroni REST API: (status, decoded JSON or text); (0, None) when
    nothing answers."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    except OSError:
        return 0, None
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


class Etcd:
    """A one-member etcd (v3 API) on free loopback ports."""

    def __init__(self, root: Path) -> None:
        self.root = root / "etcd"
        self.root.mkdir()
        self.client_port = free_port()
        self.peer_port = free_port()
        self.log = root / "etcd.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = _which("etcd")
        assert binary is not None
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        command = [
            binary,
            "--name=etcd1",
            f"--data-dir={self.root}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=etcd1={peer}",
            "--initial-cluster-state=new",
            "--logger=zap",
        ]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _wait_for(lambda: _http(f"{client}/health")[0] == 200, "etcd to answer", self.log, self.process)

    def close(self) -> None:
        if self.process is not None:
            _end(self.process, signal.SIGKILL, timeout=10)


def _wait_for(
    condition: Any,
    what: str,
    log: Path,
    process: subprocess.Popen[bytes] | None,
    timeout: float = SERVER_TIMEOUT,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if process is not None and process.poll() is not None:
            raise RuntimeError(
                f"waiting for {what}: the process exited with {process.returncode}\n{_tail(log)}"
            )
        time.sleep(0.2)
    raise TimeoutError(f"{what}: not within {timeout} s\n{_tail(log)}")


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces, so split after its ")".
        if int(stat.rpartition(")")[2].split()[1]) == pid:
            found.append(int(entry.name))
    return found


class PatroniNode:
    """One Patroni process and the PostgreSQL server it runs, in ``root/nodeN``."""

    def __init__(self, root: Path, index: int, etcd: Etcd) -> None:
        self.index = index
        self.name = f"node{index + 1}"
        self.dir = root / self.name
        self.dir.mkdir()
        self.data = self.dir / "data"
        self.port = free_port()
        self.rest_port = free_port()
        self.log = self.dir / "patroni.log"
        self.config = self.dir / "patroni.yml"
        self.process: subprocess.Popen[bytes] | None = None
        hba = [
            "local all all trust",
            "host all all 127.0.0.1/32 trust",
            "host replication all 127.0.0.1/32 trust",
        ]
        config = {
            "scope": SCOPE,
            "namespace": "/chatledger/",
            "name": self.name,
            "restapi": {
                "listen": f"127.0.0.1:{self.rest_port}",
                "connect_address": f"127.0.0.1:{self.rest_port}",
            },
            "etcd3": {"hosts": f"127.0.0.1:{etcd.client_port}"},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL,
                    "loop_wait": LOOP_WAIT,
                    "retry_timeout": RETRY_TIMEOUT,
                    "maximum_lag_on_failover": 1024 * 1024,
                    "synchronous_mode": True,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "use_slots": True,
                        "parameters": {
                            "max_connections": 60,
                            "shared_buffers": "16MB",
                            "wal_keep_size": "128MB",
                            "hot_standby": "on",
                            "wal_log_hints": "on",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C"}, {"auth": "trust"}, "no-sync"],
            },
            "postgresql": {
                "listen": f"127.0.0.1:{self.port}",
                "connect_address": f"127.0.0.1:{self.port}",
                "data_dir": str(self.data),
                "bin_dir": str(BINDIR),
                "pgpass": str(self.dir / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "postgres", "password": "postgres"},
                    "rewind": {"username": "postgres", "password": "postgres"},
                },
                "parameters": {"unix_socket_directories": str(self.dir)},
                "pg_hba": hba,
            },
        }
        # JSON is YAML: Patroni reads it as its YAML configuration.
        self.config.write_text(json.dumps(config, indent=2))

    @property
    def rest(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> None:
        """Start Patroni (it starts, clones or rewinds its PostgreSQL); returns at once."""
        binary = _which("patroni")
        assert binary is not None
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [binary, str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                env=_clean_env(self.dir),
                start_new_session=True,
                **_as_postgres(),
            )

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill(self) -> None:
        """SIGKILL Patroni, the postmaster and every backend at once, as a crashed
        machine leaves them: no shutdown, no last WAL sent."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        postmaster = self.postmaster_pid()
        if postmaster is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(postmaster, signal.SIGSTOP)  # no new backend from here on
            for child in _children(postmaster):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
            os.kill(postmaster, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and Path(f"/proc/{postmaster}").exists():
            # A zombie until init reaps it: gone enough once its state is Z.
            with contextlib.suppress(OSError):
                if Path(f"/proc/{postmaster}/stat").read_text().rpartition(")")[2].split()[0] == "Z":
                    break
            time.sleep(0.05)

    def query(self, sql: str) -> str:
        """One value from this node's ``postgres`` database (psql), "" when it does not answer."""
        result = subprocess.run(
            [str(BINDIR / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-AtXc", sql],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return result.stdout.strip() if result.returncode == 0 else ""

    def close(self) -> None:
        self.kill()

    @property
    def url(self) -> URL:
        """This node's admin URL (``postgres`` database)."""
        return resolve_dsn(f"postgresql://postgres@127.0.0.1:{self.port}/postgres")


class PatroniCluster:
    """etcd and three :class:`PatroniNode` processes; ``close()`` kills them all and
    removes the directory."""

    def __init__(self, nodes: int = NODES) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="chatledger-patroni-"))
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self.etcd = Etcd(self.root)
        self.nodes = [PatroniNode(self.root, index, self.etcd) for index in range(nodes)]
        if os.geteuid() == 0:
            for node in self.nodes:
                subprocess.run(["chown", "-R", "postgres:postgres", str(node.dir)], check=True, timeout=30)

    def start(self) -> None:
        """etcd, then the first node (it bootstraps), then the others; returns once
        there are a leader, a synchronous standby and a streaming replica."""
        self.etcd.start()
        first, *others = self.nodes
        first.start()
        _wait_for(lambda: self.leader() is first, "node1 to bootstrap as leader", first.log, first.process)
        for node in others:
            node.start()
        self.wait_healthy()

    # -- state ---------------------------------------------------------------------

    def members(self) -> list[dict[str, Any]]:
        """Patroni's ``GET /cluster`` members (name, role, state, lag...), asked of any
        running node."""
        for node in self.nodes:
            if node.running:
                status, body = _http(f"{node.rest}/cluster")
                if status == 200 and isinstance(body, dict):
                    return list(body.get("members", []))
        return []

    def node(self, name: str) -> PatroniNode:
        return next(node for node in self.nodes if node.name == name)

    def leader(self) -> PatroniNode | None:
        """The node whose PostgreSQL is a running primary holding the leader key."""
        for member in self.members():
            if member.get("role") == "leader" and member.get("state") == "running":
                node = self.node(member["name"])
                return node if node.running else None
        return None

    def healthy(self, size: int | None = None) -> bool:
        """A running leader, a synchronous standby, and every other running member a
        replica streaming with no lag."""
        size = size if size is not None else sum(node.running for node in self.nodes)
        members = [member for member in self.members() if self.node(member["name"]).running]
        if len(members) != size:
            return False
        roles = sorted(str(member.get("role")) for member in members)
        if roles.count("leader") != 1 or (size > 1 and "sync_standby" not in roles):
            return False
        for member in members:
            if member.get("state") not in ("running", "streaming"):
                return False
            if member.get("role") != "leader" and member.get("lag") not in (0, "0"):
                return False
        return True

    def wait_healthy(self, size: int | None = None, timeout: float = SERVER_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.healthy(size):
                return
            time.sleep(0.2)
        logs = "\n".join(f"-- {node.name}\n{_tail(node.log, 15)}" for node in self.nodes)
        raise TimeoutError(f"the cluster did not become healthy within {timeout} s: {self.members()}\n{logs}")

    def wait_replayed(self, timeout: float = SERVER_TIMEOUT) -> None:
        """Block until every running standby has replayed all the primary's WAL so far."""
        leader = self.leader()
        assert leader is not None
        target = leader.query("SELECT pg_current_wal_lsn()")
        others = [node for node in self.nodes if node.running and node is not leader]
        check = f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn"
        _wait_for(
            lambda: all(node.query(check) == "t" for node in others), "standbys to replay", leader.log, None
        )

    def wait_leader(
        self, other_than: PatroniNode | None = None, timeout: float = SERVER_TIMEOUT
    ) -> PatroniNode:
        """Block until a running node other than ``other_than`` is the leader; return it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leader = self.leader()
            if leader is not None and leader is not other_than:
                return leader
            time.sleep(0.1)
        raise TimeoutError(f"no new leader within {timeout} s: {self.members()}")

    # -- faults and operations -----------------------------------------------------

    def kill_leader(self) -> PatroniNode:
        """SIGKILL the leader node (Patroni and PostgreSQL); return it."""
        leader = self.leader()
        assert leader is not None, self.members()
        leader.kill()
        return leader

    def switchover(self, candidate: PatroniNode | None = None) -> PatroniNode:
        """A planned switchover (Patroni's ``POST /switchover``) to ``candidate``, by
        default the synchronous standby; return the new leader once it serves writes."""
        leader = self.leader()
        assert leader is not None, self.members()
        if candidate is None:
            sync = [member["name"] for member in self.members() if member.get("role") == "sync_standby"]
            candidate = self.node(sync[0])
        status, body = _http(
            f"{leader.rest}/switchover",
            method="POST",
            body={"leader": leader.name, "candidate": candidate.name},
        )
        if status != 200:
            raise RuntimeError(f"switchover refused ({status}): {body}")
        return self.wait_leader(other_than=leader)

    def set_synchronous(self, on: bool) -> None:
        """Turn Patroni's ``synchronous_mode`` on or off (``PATCH /config``) and wait
        until the primary's ``synchronous_standby_names`` follows."""
        leader = self.leader()
        assert leader is not None
        status, body = _http(f"{leader.rest}/config", method="PATCH", body={"synchronous_mode": on})
        if status != 200:
            raise RuntimeError(f"config change refused ({status}): {body}")

        def applied() -> bool:
            roles = [member.get("role") for member in self.members()]
            return ("sync_standby" in roles) is on

        _wait_for(applied, f"synchronous_mode {on}", leader.log, None)

    @property
    def dsn(self) -> str:
        """The multi-host DSN of the cluster's ``postgres`` database, writes routed to
        the primary."""
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"

    def close(self) -> None:
        try:
            for node in self.nodes:
                node.close()
            self.etcd.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def patroni_cluster() -> Iterator[PatroniCluster]:
    """A started, healthy cluster; fails (``postgresql`` required) or skips when
    PostgreSQL 15, Patroni or etcd is missing; killed and removed afterwards."""
    require("postgresql", patroni_missing())
    cluster = PatroniCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


def main() -> None:
    reason = patroni_missing()
    if reason:
        raise SystemExit(reason)
    cluster = PatroniCluster()
    try:
        cluster.start()
        for node in cluster.nodes:
            print(f"{node.name} postgres 127.0.0.1:{node.port} rest {node.rest}", flush=True)
        print(f"DSN {cluster.dsn}", flush=True)
        print(f"logs under {cluster.root}", flush=True)
        stop = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, stop)
        signal.sigwait(stop)
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
