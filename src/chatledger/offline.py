"""Migrations rendered as SQL (Alembic's offline ``--sql`` mode), for a DBA to read and
run with the database's own client: ``chatledger upgrade --sql`` and ``alembic upgrade
head --sql``.

No connection is made: the dialect comes from the DSN. The script is what an online
upgrade from the starting revision runs, opened and closed the same way
(:attr:`chatledger.dialects.Backend.offline_script`: one transaction on PostgreSQL and SQLite,
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

import io
import re
import sys
from collections.abc import Collection, Mapping
from typing import Any

from alembic.runtime.environment import EnvironmentContext
from alembic.runtime.migration import MigrationContext, MigrationInfo
from alembic.util import CommandError
from sqlalchemy import MetaData
from sqlalchemy.engine import URL

from . import __version__, dialects
from .versioning import VERSION_TABLE, context_options

#: What may not reach a ``--`` comment: a line break (or any control character) would
#: end it, and the rest of the line would run as SQL.
_NOT_IN_A_COMMENT = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]")


def run_offline(context: EnvironmentContext, url: URL, metadata: MetaData, lock_timeout: float) -> None:
    """``env.py`` in offline mode: write the script for ``url``'s dialect to Alembic's
    output (stdout unless the ``Config`` names another buffer).

    Nothing is written until every step has been rendered: the header names the
    revisions as Alembic resolved them (``--revision FROM:TO`` as given is never
    copied into the script), and a revision it cannot resolve leaves the output empty
    (its error on one line, as the ``alembic`` command prints it on stdout too).

    Raises:
        ValueError: a dialect chatledger does not serve.
        alembic.util.CommandError: a revision that does not exist, or a step that cannot
            be rendered without the live database (Alembic says which).
    """
    dialect = url.get_backend_name()
    script = dialects.offline_script(dialect)
    options = context_options(metadata)
    steps: list[MigrationInfo] = []
    record = options.pop("on_version_apply")

    def on_version_apply(
        ctx: MigrationContext, step: MigrationInfo, heads: Collection[Any], run_args: Mapping[str, Any]
    ) -> None:
        steps.append(step)
        record(ctx=ctx, step=step, heads=heads, run_args=run_args)

    rendered = io.StringIO()
    destination = context.config.output_buffer
    context.configure(
        dialect_name=dialect,
        target_metadata=metadata,
        literal_binds=True,
        # The script's own statements below open and close the transaction, as the
        # schema lock needs it; Alembic adds none.
        transactional_ddl=False,
        output_buffer=rendered,
        on_version_apply=on_version_apply,
        **options,
    )
    output = context.get_context().impl.static_output
    for statement in script.begin(lock_timeout):
        output(statement)
    try:
        context.run_migrations()
        start, end = _endpoints(context, steps)
    except CommandError as error:
        # Alembic's message quotes a revision as given, and the alembic command prints it
        # on stdout, where the script goes: on one line, so that no part of it runs as SQL.
        raise CommandError(" ".join(str(error).split())) from error
    for statement in script.end:
        output(statement)
    header = _header(script, dialects.backend(dialect).display_name, start, end, lock_timeout)
    (destination or sys.stdout).write(f"{header}\n\n{rendered.getvalue()}")


def _endpoints(context: EnvironmentContext, steps: list[MigrationInfo]) -> tuple[str, str]:
    """The revisions the script goes from and to, as Alembic resolved them."""
    if steps:
        source, target = steps[0].source_revision_ids, steps[-1].destination_revision_ids
        return ", ".join(source) or "base", ", ".join(target) or "base"
    # Nothing to run (FROM is TO): resolved, so that an unknown FROM is refused.
    start = context.get_starting_revision_argument()
    found = context.script.get_revision(start) if isinstance(start, str) else None
    return (found.revision, found.revision) if found is not None else ("base", "base")


def _header(script: dialects.OfflineScript, dialect: str, start: str, end: str, lock_timeout: float) -> str:
    assumed = (
        "a database without chatledger's tables"
        if start == "base"
        else f"a database at revision {start}, as {VERSION_TABLE} records it"
    )
    lines = [
        f"chatledger {__version__}: schema migration from {start} to {end} for "
        f"{dialect}, rendered offline (--sql).",
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
    return "\n".join(f"-- {_NOT_IN_A_COMMENT.sub(' ', line)}".rstrip() for line in lines)
