"""Multi-host PostgreSQL DSNs (libpq's ``h1:p1,h2:p2`` and SQLAlchemy's repeated
``host=``): how they are parsed and refused, and, on this machine's server, that both
drivers skip a host that refuses the connection and that "no host serves the session
asked for" (``target_session_attrs``: a cluster promoting a standby) is retried as an
unavailable server, then ``StorageUnavailable``. The failover itself runs on a Patroni
cluster in ``tests/test_failover.py``."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL

from chatledger import StorageUnavailable
from chatledger.dsn import resolve_dsn
from chatledger.engine import Ledger

from .support.backends import Servers
from .support.throwaway import free_port, migrated_database, shared_server

DRIVERS = ["postgresql", "postgresql+psycopg"]


@pytest.mark.parametrize("scheme", [*DRIVERS, "postgres", "postgresql+asyncpg"])
def test_hosts_in_the_address_become_repeated_host_parameters(scheme: str) -> None:
    url = resolve_dsn(f"{scheme}://app:s%40cret@db1:5433,db2,db3:6000/ledger?target_session_attrs=read-write")
    assert url.host is None and url.port is None and url.database == "ledger"
    assert url.query["host"] == ("db1:5433", "db2:5432", "db3:6000")  # 5432 written out for asyncpg
    assert url.query["target_session_attrs"] == "read-write"
    assert url.password == "s@cret"


def test_repeated_host_parameters_get_their_ports() -> None:
    url = resolve_dsn("postgresql://app@/ledger?host=db1&host=db2:5433")
    assert url.query["host"] == ("db1:5432", "db2:5433")
    # SQLAlchemy's other form is left to SQLAlchemy.
    url = resolve_dsn("postgresql+psycopg://app@/ledger?host=db1,db2&port=5432,5433")
    assert url.query["host"] == "db1,db2" and url.query["port"] == "5432,5433"


def test_multihost_dsn_keeps_sslmode_rule_and_masks_the_password() -> None:
    url = resolve_dsn("postgresql://app:pw@db1,db2/ledger?sslmode=require")
    assert url.query["ssl"] == "require" and "sslmode" not in url.query
    assert "pw" not in url.render_as_string(hide_password=True)


@pytest.mark.parametrize(
    ("dsn", "message"),
    [
        ("postgresql://db1:x,db2/ledger", "port of host 'db1' is not a number"),
        ("postgresql://db1:0,db2/ledger", "outside 1..65535"),
        ("postgresql://db1:70000,db2/ledger", "outside 1..65535"),
        ("postgresql://db1,db2/ledger?host=db3", "both in its address and as host= parameters"),
        ("postgresql://db1,:5432/ledger", "a host without a name"),
        ("postgresql://db1,db2/", "names no database"),
        ("postgresql://app:p@ss@db1,db2/ledger", "not percent-encoded"),
    ],
)
def test_bad_multihost_dsns_are_refused_naming_the_field(dsn: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        resolve_dsn(dsn)
    assert "p@ss" not in str(raised.value)


@pytest.fixture(scope="module")
async def postgres_url(servers: Servers) -> AsyncIterator[URL]:
    async with migrated_database(shared_server(servers, "postgresql")) as url:
        yield url


def _multihost(url: URL, scheme: str, first_port: int, attrs: str) -> str:
    return (
        f"{scheme}://{url.username}@127.0.0.1:{first_port},{url.host}:{url.port}/{url.database}"
        f"?target_session_attrs={attrs}"
    )


@pytest.mark.parametrize("scheme", DRIVERS)
async def test_a_refused_host_is_skipped_for_the_next_one(postgres_url: URL, scheme: str) -> None:
    ledger = Ledger(_multihost(postgres_url, scheme, free_port(), "read-write"))
    try:
        port = await ledger.read(lambda conn: conn.scalar(text("SELECT inet_server_port()")))
    finally:
        await ledger.close()
    assert port == postgres_url.port


@pytest.mark.parametrize("scheme", DRIVERS)
async def test_no_host_serving_the_session_is_unavailable_retried(postgres_url: URL, scheme: str) -> None:
    # This machine's server is a primary: none of the hosts is a standby.
    ledger = Ledger(_multihost(postgres_url, scheme, free_port(), "standby"), retry_timeout=0.5)
    try:
        with pytest.raises(StorageUnavailable, match="retry budget") as raised:
            await ledger.read(lambda conn: conn.scalar(text("SELECT 1")))
    finally:
        await ledger.close()
    assert ledger.retries >= 1
    assert "attempts" in str(raised.value)
