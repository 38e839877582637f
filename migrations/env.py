"""Alembic environment for chatledger (async).

Where the database comes from, first match wins:
1. a connection handed over by chatledger itself (``chatledger upgrade``,
   ``auto_upgrade``) in ``config.attributes["connection"]``, already in the one
   transaction that holds the schema lock;
2. ``alembic -x dsn=...``;
3. the ``CHATLEDGER_DSN`` environment variable, then the embedded SQLite default,
   exactly as the storage resolves it.

In cases 2 and 3 this file takes the schema lock itself (``-x lock_timeout=SECONDS``,
default :data:`chatledger.migrate.LOCK_TIMEOUT`) and runs everything in one
transaction; see :mod:`chatledger.migrate` for what that means per backend, and
:mod:`chatledger.revisions` (or ``README`` here) for the conventions every revision
file follows.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection

from chatledger import migrate
from chatledger.dsn import resolve_dsn
from chatledger.schema import metadata

config = context.config
if config.config_file_name is not None:  # the alembic command line: alembic.ini's logging
    fileConfig(config.config_file_name, disable_existing_loggers=False)
target_metadata = metadata


def run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        # One transaction for the whole upgrade where the database allows DDL in one.
        transaction_per_migration=False,
        **migrate.context_options(target_metadata),
    )
    with context.begin_transaction():
        if not context.get_context().opts.get("dont_mutate", False):  # all but `alembic current`
            migrate.adopt_legacy_revision(connection, context.script)
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_migrations(connection)
        return
    arguments = context.get_x_argument(as_dictionary=True)
    lock_timeout = float(arguments.get("lock_timeout", migrate.LOCK_TIMEOUT))
    migrate.run_alembic_from_command_line(resolve_dsn(arguments.get("dsn")), run_migrations, lock_timeout)


if context.is_offline_mode():
    raise SystemExit("chatledger migrations run online only: give a DSN, not --sql")
run_migrations_online()
