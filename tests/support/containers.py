"""Test servers in Docker containers, started through testcontainers.

The images come from ``docker/build-images.sh`` (Debian's packages, no registry):
one image holds PostgreSQL 17 and MariaDB 11.8 with a prepared data directory
each. A container runs one server with an explicit command (the official images'
entrypoint conventions do not apply) on the host's network, listening on a free
port of 127.0.0.1, and is ready when the server's own client says so inside it
(testcontainers' ``ExecWaitStrategy``). Host networking keeps every connection on
the loopback interface and needs no bridge or iptables rules from the engine.

testcontainers' reaper container (ryuk) is turned off: it would have to be pulled.
The fixtures remove their containers themselves (``Servers.close``), and every
container carries the label ``chatledger.test`` so that CI can remove what a killed
run left behind.

``mysql-8.4`` runs the official ``mysql`` image, for users whose engine can pull
it (``CHATLEDGER_TEST_MYSQL8_IMAGE``): its entrypoint initialises the data
directory and then runs ``mysqld`` with the arguments given here.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass

# Before testcontainers reads its configuration.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

#: The image of docker/build-images.sh (its RECIPE number is the tag's suffix).
SERVER_IMAGE = os.environ.get("CHATLEDGER_SERVER_IMAGE", "chatledger-servers:trixie-r1")
#: Seconds a containerised server may take to answer.
START_TIMEOUT = 90
LABEL = "chatledger.test"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class ContainerSpec:
    """How to run one server of an image: its command, user, readiness check, DSN."""

    image: str
    #: What ``build`` says when the image is missing.
    build_hint: str
    command: Callable[[int], list[str]]
    ready: Callable[[int], list[str]]
    dsn: Callable[[int], str]
    user: str = "root"
    environment: tuple[tuple[str, str], ...] = ()


def _postgres_command(port: int) -> list[str]:
    return [
        "postgres",
        "-D",
        "/var/lib/chatledger/postgresql",
        "-p",
        str(port),
        "-k",
        "/tmp",
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        "max_connections=200",
        # A test server: a lost container loses nothing that matters.
        "-c",
        "fsync=off",
    ]


def _mariadb_command(port: int) -> list[str]:
    # Debian's own server configuration applies (as for a user of the package);
    # the socket and pid file move to /tmp, which exists in the container.
    return [
        "mariadbd",
        "--user=mysql",
        "--datadir=/var/lib/chatledger/mariadb",
        f"--port={port}",
        "--bind-address=127.0.0.1",
        "--socket=/tmp/mysqld.sock",
        "--pid-file=/tmp/mysqld.pid",
        "--skip-name-resolve",
        "--max-connections=300",
    ]


def _mysql_ping(port: int, admin: str = "mariadb-admin") -> list[str]:
    return [admin, "--protocol=tcp", "-h127.0.0.1", f"-P{port}", "-uroot", "ping"]


BUILD_HINT = "build it with docker/build-images.sh (Debian's packages, no registry needed)"

SPECS: dict[str, ContainerSpec] = {
    "postgresql-17": ContainerSpec(
        image=SERVER_IMAGE,
        build_hint=BUILD_HINT,
        command=_postgres_command,
        ready=lambda port: ["pg_isready", "-q", "-h", "127.0.0.1", "-p", str(port)],
        dsn=lambda port: f"postgresql://postgres@127.0.0.1:{port}/postgres",
        user="postgres",
    ),
    "mysql-mariadb-11.8": ContainerSpec(
        image=SERVER_IMAGE,
        build_hint=BUILD_HINT,
        command=_mariadb_command,
        ready=_mysql_ping,
        dsn=lambda port: f"mysql://root@127.0.0.1:{port}/mysql",
    ),
    "mysql-8.4": ContainerSpec(
        image=os.environ.get("CHATLEDGER_TEST_MYSQL8_IMAGE") or "mysql:8.4",
        build_hint="pull it from Docker Hub (docker pull mysql:8.4); this engine cannot",
        command=lambda port: [
            "mysqld",
            f"--port={port}",
            "--bind-address=127.0.0.1",
            "--character-set-server=utf8mb4",
        ],
        ready=lambda port: _mysql_ping(port, "mysqladmin"),
        dsn=lambda port: f"mysql://root@127.0.0.1:{port}/mysql",
        environment=(("MYSQL_ALLOW_EMPTY_PASSWORD", "yes"), ("MYSQL_ROOT_HOST", "%")),
    ),
}


def docker_problem() -> str | None:
    """Why no Docker engine can serve containers here, or ``None``."""
    try:
        import docker  # installed with testcontainers
    except ImportError:
        return "the docker package is missing (pip install -e '.[dev]')"
    try:
        client = docker.from_env(timeout=5)
    except Exception as error:
        return f"no Docker engine answers ({error})"
    try:
        client.ping()
    except Exception as error:
        return f"no Docker engine answers ({error})"
    finally:
        client.close()
    return None


def image_problem(spec: ContainerSpec) -> str | None:
    """Why ``spec``'s image cannot run (the engine lacks it and nothing is pulled here),
    or ``None``."""
    import docker
    from docker.errors import ImageNotFound

    client = docker.from_env(timeout=30)
    try:
        client.images.get(spec.image)
    except ImageNotFound:
        return f"image {spec.image} is not on this Docker engine: {spec.build_hint}"
    finally:
        client.close()
    return None


class RunningServer:
    """One started container: its DSN and how to remove it."""

    def __init__(self, name: str, spec: ContainerSpec) -> None:
        from testcontainers.core.container import DockerContainer
        from testcontainers.core.wait_strategies import ExecWaitStrategy

        self.port = free_port()
        self.container = DockerContainer(
            spec.image,
            command=spec.command(self.port),  # type: ignore[arg-type]
            env=dict(spec.environment),
            network_mode="host",
            user=spec.user,
            labels={LABEL: name},
            _wait_strategy=ExecWaitStrategy(spec.ready(self.port))
            .with_startup_timeout(START_TIMEOUT)
            .with_poll_interval(0.5),
        )
        self.dsn = spec.dsn(self.port)

    def start(self) -> RunningServer:
        try:
            self.container.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        with contextlib.suppress(Exception):  # it may never have been created
            self.container.stop()
