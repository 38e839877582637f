"""PostgreSQL's two async drivers, asyncpg and psycopg 3, side by side on this machine's
server: the lock timeout each sends with the login, merged with the caller's own
start-up settings; an unreachable server retried and reported alike. (The whole suite
runs on both too: the postgresql-dsn and postgresql-psycopg targets.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection

from chatledger import StorageUnavailable
from chatledger.dsn import resolve_dsn
from chatledger.engine import Ledger

from .support.backends import Servers
from .support.throwaway import migrated_database, shared_server

DRIVERS = ["asyncpg", "psycopg"]


@pytest.fixture(scope="module")
async def postgres_url(servers: Servers) -> AsyncIterator[URL]:
    async with migrated_database(shared_server(servers, "postgresql")) as url:
        yield url


async def _settings(url: URL, *names: str, **options: Any) -> list[str]:
    ledger = Ledger(url, **options)

    async def read(conn: AsyncConnection) -> list[str]:
        return [str(await conn.scalar(text(f"SHOW {name}"))) for name in names]

    try:
        return await ledger.read(read)
    finally:
        await ledger.close()


@pytest.mark.parametrize("driver", DRIVERS)
async def test_lock_timeout_goes_with_the_login(postgres_url: URL, driver: str) -> None:
    url = postgres_url.set(drivername=f"postgresql+{driver}")
    assert await _settings(url, "lock_timeout") == ["5s"]
    assert await _settings(url, "lock_timeout", lock_timeout=2.5) == ["2500ms"]


@pytest.mark.parametrize(
    ("driver", "connect_args"),
    [
        ("asyncpg", {"server_settings": {"application_name": "mine", "lock_timeout": "1234ms"}}),
        ("psycopg", {"options": "-c application_name=mine -c lock_timeout=1234ms"}),
    ],
)
async def test_callers_start_up_settings_win_one_by_one(
    postgres_url: URL, driver: str, connect_args: dict[str, Any]
) -> None:
    url = postgres_url.set(drivername=f"postgresql+{driver}")
    assert await _settings(url, "application_name", "lock_timeout", connect_args=connect_args) == [
        "mine",
        "1234ms",
    ]
    only_name = {
        name: {"application_name": "mine"} if name == "server_settings" else "-c application_name=mine"
        for name in connect_args
    }
    assert await _settings(url, "application_name", "lock_timeout", connect_args=only_name) == ["mine", "5s"]


async def test_psycopg_keeps_the_dsns_own_options(postgres_url: URL) -> None:
    dsn = postgres_url.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    url = resolve_dsn(f"{dsn}?options=-c%20statement_timeout%3D7s")
    assert await _settings(url, "statement_timeout", "lock_timeout") == ["7s", "5s"]


@pytest.mark.parametrize("driver", DRIVERS)
async def test_unreachable_server_is_retried_then_reported(driver: str) -> None:
    ledger = Ledger(f"postgresql+{driver}://someone@127.0.0.1:1/nothing", retry_timeout=0.3)
    try:
        with pytest.raises(StorageUnavailable, match="retry budget"):
            await ledger.read(lambda conn: conn.scalar(text("SELECT 1")))
        assert ledger.retries >= 1
    finally:
        await ledger.close()
