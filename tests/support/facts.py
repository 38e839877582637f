"""What the tests must know of each dialect (and of each async driver) beyond its
capabilities, in one table each.

A test that asserts one of two documented behaviours, or sets up a lock the way its
backend takes one, reads the fact here (``facts_of(backend).transactional_ddl``)
instead of comparing the dialect's name; a test that runs on some backends only says
so with a capability marker (:mod:`tests.support.capabilities`). A new backend adds
one row (and one per driver). Tests compare no dialect or driver name themselves
(``tests/unit/test_backend_registry.py`` checks it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection


@dataclass(frozen=True)
class Logins:
    """How a test makes and drops a login (a PostgreSQL role, a MySQL user) on a server:
    SQL templates with ``{name}``, ``{password}`` and ``{database}``."""

    create: str
    drop: str
    #: Reading (only) every table of the database.
    grant_select: str
    #: Run on the login's database before :attr:`drop` (PostgreSQL: the grants there
    #: keep the role from being dropped); ``None``: nothing to run.
    drop_owned: str | None = None


def _mysql_db_system(version: str) -> str:
    return "mariadb" if "mariadb" in version.lower() else "mysql"


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
    #: OpenTelemetry's ``db.system.name`` of a server of this dialect, given its
    #: version string (MariaDB is a system of its own).
    db_system: Callable[[str], str]
    #: Revision 0002's id columns compared with PAD SPACE (MySQL's ``VARCHAR`` under a
    #: ``_bin`` collation): 0003 made them ``VARBINARY``, and its downgrade refuses ids
    #: that differ only by trailing spaces. Elsewhere 0002's ids were byte-exact already.
    pad_space_ids_at_0002: bool = False
    #: zett-agent's own store can still write to a database chatledger adopted; not on
    #: MySQL/MariaDB, where it passes the binary ids it reads back to aiomysql, which
    #: fails on bytes parameters (PyMySQL 2.2).
    zett_writes_adopted: bool = True
    #: The statement whose second column is a table's DDL as the server keeps it
    #: (``{name}``: MySQL's ``SHOW CREATE TABLE``), compared where the inspector's
    #: view misses what it shows (charsets, collations); ``None`` where there is none.
    show_create_table: str | None = None
    #: A table the login has no privilege on is still listed (PostgreSQL); MySQL/MariaDB
    #: hide it, so a revision the login cannot read reads as absent.
    lists_unreadable_tables: bool = False
    #: Logins on the server; ``None`` for a file.
    logins: Logins | None = None
    #: From revision 0007 a trigger moves a live session's counter row along with a raw
    #: message inserted right after it (SQLite, whose append is then one statement):
    #: another writer numbering by ``MAX(sequence) + 1`` keeps the counter in step.
    counter_follows_raw_log: bool = False
    #: A statement the server runs for ``{seconds}`` seconds; ``None`` for a file.
    sleep: str | None = None
    #: How many sessions run the statement ``:q`` now; ``None`` for a file.
    running: str | None = None


FACTS: dict[str, Facts] = {
    "sqlite": Facts(
        server=False,
        transactional_ddl=True,
        file_write_lock=True,
        trusts_local_logins=False,
        db_system=lambda _version: "sqlite",
        counter_follows_raw_log=True,
    ),
    "postgresql": Facts(
        server=True,
        transactional_ddl=True,
        file_write_lock=False,
        trusts_local_logins=True,
        db_system=lambda _version: "postgresql",
        lists_unreadable_tables=True,
        sleep="SELECT pg_sleep({seconds})",
        running="SELECT count(*) FROM pg_stat_activity WHERE query = :q AND state = 'active'",
        logins=Logins(
            create="CREATE ROLE {name} LOGIN PASSWORD '{password}'",
            drop="DROP ROLE IF EXISTS {name}",
            grant_select="GRANT SELECT ON ALL TABLES IN SCHEMA public TO {name}",
            drop_owned="DROP OWNED BY {name}",
        ),
    ),
    "mysql": Facts(
        server=True,
        transactional_ddl=False,
        file_write_lock=False,
        trusts_local_logins=False,
        db_system=_mysql_db_system,
        pad_space_ids_at_0002=True,
        zett_writes_adopted=False,
        show_create_table="SHOW CREATE TABLE {name}",
        sleep="SELECT SLEEP({seconds})",
        running="SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = :q",
        logins=Logins(
            create="CREATE USER '{name}'@'%' IDENTIFIED BY '{password}'",
            drop="DROP USER IF EXISTS '{name}'@'%'",
            grant_select="GRANT SELECT ON `{database}`.* TO '{name}'@'%'",
        ),
    ),
}


def facts_of(dialect: str) -> Facts:
    """The facts of ``dialect`` ("sqlite", "postgresql", "mysql").

    Raises:
        KeyError: a dialect with no row here, naming the ones there are.
    """
    if dialect not in FACTS:
        raise KeyError(f"no test facts for dialect {dialect!r}; known: {sorted(FACTS)}")
    return FACTS[dialect]


def logins_of(dialect: str) -> Logins:
    """The logins of a server dialect; ``KeyError`` for a file's."""
    logins = facts_of(dialect).logins
    if logins is None:
        raise KeyError(f"{dialect} has no logins (a file)")
    return logins


@dataclass(frozen=True)
class DriverFacts:
    """One async driver's facts, as the tests rely on them."""

    #: The ``connect()`` argument of the connect timeout, in seconds (libpq's name
    #: under psycopg).
    timeout_argument: str = "timeout"
    #: The ``connect()`` arguments that make the server end a statement after the
    #: given seconds; ``None``: no statement time limit (SQLite).
    statement_time_limit: Callable[[float], dict[str, Any]] | None = None
    #: ``autocommit=True`` is a ``connect()`` argument of the driver.
    autocommit_argument: bool = False
    #: Puts an open connection in autocommit mode, as a caller might behind the
    #: store's back; ``None`` where the driver has no such mode.
    set_autocommit: Callable[[AsyncConnection], Awaitable[None]] | None = None
    #: Every transaction after a read-only one begins ``READ WRITE`` (SQLAlchemy resets
    #: psycopg's ``read_only``), overriding a database's ``default_transaction_read_only``.
    begins_read_write: bool = False


async def _mysql_set_autocommit(conn: AsyncConnection) -> None:
    await conn.exec_driver_sql("SET autocommit = 1")


async def _psycopg_set_autocommit(conn: AsyncConnection) -> None:
    raw = await conn.get_raw_connection()
    await raw.driver_connection.set_autocommit(True)  # type: ignore[union-attr]


DRIVERS: dict[str, DriverFacts] = {
    "aiosqlite": DriverFacts(),
    "asyncpg": DriverFacts(
        statement_time_limit=lambda seconds: {
            "server_settings": {"statement_timeout": str(round(seconds * 1000))}
        },
    ),
    "psycopg": DriverFacts(
        timeout_argument="connect_timeout",
        statement_time_limit=lambda seconds: {"options": f"-c statement_timeout={round(seconds * 1000)}"},
        autocommit_argument=True,
        set_autocommit=_psycopg_set_autocommit,
        begins_read_write=True,
    ),
    "aiomysql": DriverFacts(
        statement_time_limit=lambda seconds: {"init_command": f"SET SESSION max_statement_time = {seconds}"},
        autocommit_argument=True,
        set_autocommit=_mysql_set_autocommit,
    ),
}


def driver_facts(driver: str) -> DriverFacts:
    """The facts of an async driver (SQLAlchemy's driver name, ``url.get_driver_name()``).

    Raises:
        KeyError: a driver with no row here, naming the ones there are.
    """
    if driver not in DRIVERS:
        raise KeyError(f"no test facts for driver {driver!r}; known: {sorted(DRIVERS)}")
    return DRIVERS[driver]
