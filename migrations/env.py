"""Alembic environment for chatledger (async).

Where the database comes from, first match wins:
1. a connection handed over by chatledger itself (``chatledger upgrade``,
   ``auto_upgrade``) in ``config.attributes["connection"]``, already in the one
   transaction that holds the schema lock;
2. ``config.attributes["url"]`` (``chatledger upgrade --sql``), then ``alembic -x dsn=...``;
3. the ``CHATLEDGER_DSN`` environment variable, then the embedded SQLite default,
   exactly as the storage resolves it (said on stderr, with the file's path).

In cases 2 and 3 this file takes the schema lock itself (``-x lock_timeout=SECONDS``,
default :data:`chatledger.migrate.LOCK_TIMEOUT`) and runs everything in one
transaction; see :mod:`chatledger.migrate` for what that means per backend, and
:mod:`chatledger.revisions` (or ``README`` here) for the conventions every revision
file follows. Offline (``--sql``), it writes that transaction as a script instead,
for the DSN's dialect, without connecting: :mod:`chatledger.offline`.

A database holding zett-agent's own tables and no chatledger revision is not migrated
(it needs ``chatledger adopt``), but by the adoption itself.
"""

from __future__ import annotations

import sys
from logging.config import fileConfig

from alembic import context
from alembic.util import CommandError
from sqlalchemy.engine import URL, Connection

from chatledger import adoption, dialects, migrate
from chatledger.dsn import resolve_dsn
from chatledger.errors import ChatledgerError
from chatledger.offline import run_offline
from chatledger.schema import metadata

config = context.config
if config.config_file_name is not None:  # the alembic command line: alembic.ini's logging
    fileConfig(config.config_file_name, disable_existing_loggers=False)
target_metadata = metadata


def run_migrations(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=dialects.backend(connection.dialect.name).rebuilds_tables,
        # One transaction for the whole upgrade where the database allows DDL in one.
        transaction_per_migration=False,
        **migrate.context_options(target_metadata),
    )
    with context.begin_transaction():
        if not context.get_context().opts.get("dont_mutate", False):  # all but `alembic current`
            if not config.attributes.get("adopting"):
                adoption.refuse_zett_tables(connection)
            migrate.adopt_legacy_revision(connection, context.script)
        context.run_migrations()


def target() -> tuple[URL, float]:
    """The database and lock timeout of a run that opens its own connection."""
    arguments = context.get_x_argument(as_dictionary=True)
    url = config.attributes.get("url")
    if url is None:
        notice = migrate.default_notice(arguments.get("dsn"), option="-x dsn=...")
        if notice is not None:
            print(f"chatledger: {notice}", file=sys.stderr)
        url = resolve_dsn(arguments.get("dsn"))
    lock_timeout = config.attributes.get("lock_timeout", arguments.get("lock_timeout", migrate.LOCK_TIMEOUT))
    return url, float(lock_timeout)


def main() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_migrations(connection)
        return
    try:
        url, lock_timeout = target()
        if context.is_offline_mode():
            run_offline(context, url, target_metadata, lock_timeout)
        else:
            migrate.run_alembic_from_command_line(url, run_migrations, lock_timeout)
    except (ChatledgerError, ValueError) as error:
        # The alembic command prints a CommandError as one line, without a traceback.
        raise CommandError(str(error)) from error


main()
