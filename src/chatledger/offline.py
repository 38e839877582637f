"""Migrations rendered as SQL (Alembic's offline ``--sql`` mode), for a DBA to read and
run with the database's own client: ``chatledger upgrade --sql`` and ``alembic upgrade
head --sql``.

No connection is made: the dialect comes from the DSN. The script is what an online
upgrade from the starting revision runs, opened and closed the same way
(:data:`chatledger.dialects.OFFLINE_SCRIPTS`: one transaction on PostgreSQL and SQLite,
the schema lock on every backend), with chatledger's own bookkeeping:
``chatledger_alembic_version`` (created by the step that leaves base, as Alembic does)
and ``chatledger_compatibility`` (:func:`chatledger.versioning.record_compatibility`).

What an online upgrade decides by reading the database, a script cannot; its header
says what it assumes instead: the database is at the starting revision (base, or
``START`` of ``START:END``) as ``chatledger_alembic_version`` records it -- not one
whose revision an older chatledger kept in ``alembic_version`` (moved by an online
upgrade only), nor one holding zett-agent's own tables (``chatledger adopt``).
"""

from __future__ import annotations

from alembic.runtime.environment import EnvironmentContext
from sqlalchemy import MetaData
from sqlalchemy.engine import URL

from . import __version__, dialects
from .versioning import VERSION_TABLE, context_options

_DIALECT_NAMES = {"postgresql": "PostgreSQL", "mysql": "MySQL/MariaDB", "sqlite": "SQLite"}


def run_offline(context: EnvironmentContext, url: URL, metadata: MetaData, lock_timeout: float) -> None:
    """``env.py`` in offline mode: write the script for ``url``'s dialect to Alembic's
    output (stdout unless the ``Config`` names another buffer).

    Raises:
        ValueError: a dialect chatledger does not serve.
        alembic.util.CommandError: a step that cannot be rendered without the live
            database (Alembic says which).
    """
    dialect = url.get_backend_name()
    script = dialects.offline_script(dialect)
    context.configure(
        dialect_name=dialect,
        target_metadata=metadata,
        literal_binds=True,
        # The script's own statements below open and close the transaction, as the
        # schema lock needs it; Alembic adds none.
        transactional_ddl=False,
        **context_options(metadata),
    )
    output = context.get_context().impl.static_output
    start = context.get_starting_revision_argument() or "base"
    end = context.get_revision_argument()  # resolved by Alembic: "head" is named
    assumed = (
        "a database without chatledger's tables"
        if start == "base"
        else f"a database at revision {start}, as {VERSION_TABLE} records it"
    )
    header = [
        f"chatledger {__version__}: schema migration from {start} to {end} for "
        f"{_DIALECT_NAMES[dialect]}, rendered offline (--sql).",
        f"For {assumed}.",
        "Not for one holding zett-agent's own tables (`chatledger adopt` converts them), nor for",
        "one whose revision an older chatledger kept in alembic_version (`chatledger upgrade`",
        "moves it): an online upgrade reads and handles both, a script cannot.",
        f"Run it as the schema owner: {script.client}",
        *script.on_failure,
        "",
        f"chatledger's schema lock, as an online upgrade takes it: waits up to {lock_timeout:g} s for",
        "another migration to finish, then fails before any change.",
    ]
    output("\n".join(f"-- {line}".rstrip() for line in header))
    for statement in script.begin(lock_timeout):
        output(statement)
    context.run_migrations()
    for statement in script.end:
        output(statement)
