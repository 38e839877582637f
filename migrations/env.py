"""Alembic environment for chatledger (async).

Where the database comes from, first match wins:
1. a connection handed over by chatledger itself (``chatledger upgrade``, the
   embedded SQLite default upgrading itself) in ``config.attributes``;
2. ``alembic -x dsn=...``;
3. the ``CHATLEDGER_DSN`` environment variable, then the embedded SQLite default,
   exactly as the storage resolves it.
"""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from chatledger.dsn import resolve_dsn, sqlite_file
from chatledger.schema import Base

config = context.config
target_metadata = Base.metadata


def run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        render_as_batch=connection.dialect.name == "sqlite",
        # One transaction for the whole upgrade where the database allows DDL in one.
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        context.run_migrations()


async def run_async_migrations() -> None:
    url = config.attributes.get("url") or resolve_dsn(context.get_x_argument(as_dictionary=True).get("dsn"))
    path = sqlite_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(run_migrations)
            await connection.commit()
    finally:
        await engine.dispose()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_migrations(connection)
    else:
        asyncio.run(run_async_migrations())


if context.is_offline_mode():
    raise SystemExit("chatledger migrations run online only: give a DSN, not --sql")
run_migrations_online()
