"""Alembic environment for chatledger (async).

Where the database comes from, first match wins:
1. a connection handed over by chatledger itself (``chatledger upgrade``, the
   embedded SQLite default upgrading itself) in ``config.attributes["connection"]``;
2. ``alembic -x dsn=...``;
3. the ``CHATLEDGER_DSN`` environment variable, then the embedded SQLite default,
   exactly as the storage resolves it.
"""

from __future__ import annotations

import asyncio
from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection

from chatledger.dsn import resolve_dsn
from chatledger.migrate import run_on_connection
from chatledger.schema import metadata

config = context.config
if config.config_file_name is not None:  # the alembic command line: alembic.ini's logging
    fileConfig(config.config_file_name, disable_existing_loggers=False)
target_metadata = metadata


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


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_migrations(connection)
    else:
        dsn = context.get_x_argument(as_dictionary=True).get("dsn")
        asyncio.run(run_on_connection(resolve_dsn(dsn), run_migrations))


if context.is_offline_mode():
    raise SystemExit("chatledger migrations run online only: give a DSN, not --sql")
run_migrations_online()
