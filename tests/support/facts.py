"""What the tests must know of each dialect beyond its capabilities, in one table.

A test that asserts one of two documented behaviours, or sets up a lock the way its
backend takes one, reads the fact here (``facts_of(backend).transactional_ddl``)
instead of comparing the dialect's name; a test that runs on some backends only says
so with a capability marker (:mod:`tests.support.capabilities`). A new backend adds
one row.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Facts:
    """One dialect's facts, as the tests rely on them."""

    #: A database server (else a file the process opens itself): the storage never
    #: migrates it on first use, and tests create its databases on the server.
    server: bool
    #: DDL runs inside the migration's transaction, so a failed or killed step is
    #: undone; MySQL/MariaDB commit each statement, and the next run resumes.
    transactional_ddl: bool
    #: A writer takes the whole file's write lock (``BEGIN IMMEDIATE``) rather than
    #: row locks (``SELECT .. FOR UPDATE``); the schema lock is that lock too.
    file_write_lock: bool
    #: The test servers let local logins in whatever the password (PostgreSQL's
    #: ``trust``), so a test sets a password only to see that it is never printed.
    trusts_local_logins: bool


FACTS: dict[str, Facts] = {
    "sqlite": Facts(server=False, transactional_ddl=True, file_write_lock=True, trusts_local_logins=False),
    "postgresql": Facts(server=True, transactional_ddl=True, file_write_lock=False, trusts_local_logins=True),
    "mysql": Facts(server=True, transactional_ddl=False, file_write_lock=False, trusts_local_logins=False),
}


def facts_of(dialect: str) -> Facts:
    """The facts of ``dialect`` ("sqlite", "postgresql", "mysql").

    Raises:
        KeyError: a dialect with no row here, naming the ones there are.
    """
    if dialect not in FACTS:
        raise KeyError(f"no test facts for dialect {dialect!r}; known: {sorted(FACTS)}")
    return FACTS[dialect]
