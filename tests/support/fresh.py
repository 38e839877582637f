"""Fresh, empty databases for tests that need one of their own (not migrated)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from sqlalchemy.engine import URL

from .backends import Server, fresh_name


@asynccontextmanager
async def fresh_database(
    server: Server | None, directory: Path, *, prefix: str = "chatledger_t", as_an_app_would: bool = False
) -> AsyncIterator[URL]:
    """A new empty database on ``server`` (``None``: a SQLite file in ``directory``),
    dropped afterwards.

    ``as_an_app_would``: created as an application that never read chatledger's
    README would: MySQL with the server's default character set and collation
    (case-insensitive), PostgreSQL with a session time zone other than UTC.
    """
    if server is None:
        yield URL.create("sqlite+aiosqlite", database=str(directory / f"{fresh_name(prefix)}.sqlite3"))
        return
    name = fresh_name(prefix)
    if server.backend == "mysql" and as_an_app_would:
        await server.execute(f"CREATE DATABASE {name}")
        url = server.database_url(name)
    else:
        url = await server.create_database(name)
    try:
        if server.backend == "postgresql" and as_an_app_would:
            await server.execute(f"ALTER DATABASE {name} SET timezone TO 'Europe/Berlin'")
        yield url
    finally:
        await server.drop_database(name)
