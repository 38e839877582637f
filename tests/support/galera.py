"""A throwaway 3-node MariaDB Galera cluster of local ``mariadbd`` processes.

Each node is a :class:`~tests.support.throwaway.ThrowawayMariaDB` (its own temporary data
directory and free loopback port) with the wsrep settings Galera needs:
``wsrep_on``, Debian's ``galera-4`` provider, row-based binary logging, interleaved
auto-increment locks, and rsync state transfers. Every node listens for group
communication (gcomm), incremental state transfer (IST) and full state transfer
(SST) on ports of its own on 127.0.0.1. The first node bootstraps the cluster
(``--wsrep-new-cluster``); the others join it and receive its state by rsync.

``python -m tests.support.galera`` starts a cluster, prints the node DSNs and waits (for
``chatledger stress --dsn ... --dsn ... --cluster``), until Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.engine import URL

from .throwaway import SERVER_TIMEOUT, ThrowawayMariaDB, _which, free_port, require

PROVIDER = Path("/usr/lib/galera/libgalera_smm.so")
NODES = 3


def galera_missing() -> str | None:
    """Why a Galera cluster cannot run here, or ``None``."""
    reason = ThrowawayMariaDB.missing()
    if reason:
        return reason
    if not PROVIDER.exists():
        return f"the Galera provider {PROVIDER} is missing (apt-get install galera-4)"
    if _which("rsync") is None:
        return "rsync is missing (apt-get install rsync): the nodes' state transfer uses it"
    return None


class GaleraNode(ThrowawayMariaDB):
    """One node: a MariaDB server with wsrep on, in a cluster of ``peers`` gcomm ports."""

    def __init__(self, index: int, gcomm_ports: list[int]) -> None:
        super().__init__()
        if os.geteuid() == 0:
            # The rsync daemon of a state transfer run by root switches to "nobody",
            # which cannot write the data directory: the node runs as Debian's
            # "mysql" user instead, as the packaged server does.
            subprocess.run(["chown", "-R", "mysql:mysql", str(self.root)], check=True, timeout=30)
        self.index = index
        self.gcomm_port = gcomm_ports[index]
        self.peers = gcomm_ports
        self.ist_port = free_port()
        self.sst_port = free_port()
        #: Start the cluster with this node (``--wsrep-new-cluster``) on the next start.
        self.bootstrap = False

    def _command(self) -> list[str]:
        cluster = ",".join(f"127.0.0.1:{port}" for port in self.peers)
        options = (
            f"gmcast.listen_addr=tcp://127.0.0.1:{self.gcomm_port};ist.recv_addr=127.0.0.1:{self.ist_port}"
        )
        own = ["--user=mysql" if arg == "--user=root" else arg for arg in super()._command()]
        return [
            *own,
            "--wsrep-on=ON",
            f"--wsrep-provider={PROVIDER}",
            f"--wsrep-cluster-address=gcomm://{cluster}",
            "--wsrep-cluster-name=chatledger-test",
            f"--wsrep-node-name=node{self.index + 1}",
            "--wsrep-node-address=127.0.0.1",
            f"--wsrep-node-incoming-address=127.0.0.1:{self.port}",
            f"--wsrep-provider-options={options}",
            f"--wsrep-sst-receive-address=127.0.0.1:{self.sst_port}",
            "--wsrep-sst-method=rsync",
            "--binlog-format=ROW",
            "--innodb-autoinc-lock-mode=2",
            "--default-storage-engine=InnoDB",
            *(["--wsrep-new-cluster"] if self.bootstrap else []),
        ]

    def status(self, name: str) -> str:
        """A ``wsrep_%`` status value of this node, e.g. ``wsrep_local_state_comment``."""
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
                "-N",
                "-B",
                "-e",
                f"SHOW STATUS LIKE '{name}'",
            ],
            capture_output=True,
            text=True,
            timeout=10,
        )
        parts = result.stdout.split()
        return parts[1] if result.returncode == 0 and len(parts) == 2 else ""

    def _answers(self) -> bool:
        return super()._answers() and self.status("wsrep_local_state_comment") == "Synced"


class GaleraCluster:
    """Three :class:`GaleraNode` processes forming one cluster; ``close()`` kills them
    and removes their directories."""

    def __init__(self, nodes: int = NODES) -> None:
        gcomm_ports = [free_port() for _ in range(nodes)]
        self.nodes: list[GaleraNode] = []
        try:
            for index in range(nodes):
                self.nodes.append(GaleraNode(index, gcomm_ports))
        except BaseException:
            self.close()
            raise

    def start(self) -> None:
        """Bootstrap the first node, then join the others one by one (each ``Synced``)."""
        first, *others = self.nodes
        first.bootstrap = True
        first.start()
        first.bootstrap = False  # a restart joins the running cluster
        for node in others:
            node.start()
        self.wait_for_size(len(self.nodes))

    def wait_for_size(self, size: int) -> None:
        """Block until every running node sees a primary component of ``size`` nodes."""
        deadline = time.monotonic() + SERVER_TIMEOUT
        while time.monotonic() < deadline:
            running = [node for node in self.nodes if node.running]
            if all(node.status("wsrep_cluster_size") == str(size) for node in running):
                return
            time.sleep(0.2)
        sizes = {node.index + 1: node.status("wsrep_cluster_size") for node in self.nodes}
        raise TimeoutError(f"the cluster did not reach {size} nodes within {SERVER_TIMEOUT} s: {sizes}")

    def kill(self, index: int) -> None:
        """SIGKILL one node, as a crashed machine would leave it."""
        self.nodes[index].stop(crash=True)

    def rejoin(self, index: int) -> None:
        """Start a killed node again: it rejoins and receives the state it missed."""
        self.nodes[index].start()
        self.wait_for_size(len(self.nodes))

    @property
    def urls(self) -> list[URL]:
        """The nodes' admin URLs (``mysql`` database), in node order."""
        return [node.admin_url for node in self.nodes]

    def close(self) -> None:
        # Joiners first: a bootstrapping node killed first can leave them waiting.
        for node in reversed(self.nodes):
            node.close()


@contextlib.contextmanager
def galera_cluster() -> Iterator[GaleraCluster]:
    """A started 3-node cluster; fails (``mysql`` required) or skips when MariaDB,
    Galera or rsync is missing; killed and removed afterwards."""
    require("mysql", galera_missing())
    cluster = GaleraCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


def main() -> None:
    reason = galera_missing()
    if reason:
        raise SystemExit(reason)
    cluster = GaleraCluster()
    try:
        cluster.start()
        for node in cluster.nodes:
            dsn = node.admin_url.render_as_string(hide_password=False)
            pid = node.process.pid if node.process else "-"
            print(f"node{node.index + 1} pid {pid} {dsn}", flush=True)
        print(f"logs under {', '.join(str(node.root) for node in cluster.nodes)}", flush=True)
        # Blocked first, so that sigwait receives them instead of their handlers.
        stop = {signal.SIGINT, signal.SIGTERM}
        signal.pthread_sigmask(signal.SIG_BLOCK, stop)
        signal.sigwait(stop)
    finally:
        cluster.close()


if __name__ == "__main__":
    main()
