"""What the test targets differ in, declared once (as SQLAlchemy's ``requirements.py``
does for its dialects).

A test that needs a feature some backend lacks says so with a marker,
``@pytest.mark.requires("lock_wait_timeout")``, instead of a skip in its body; the
conftest skips it on the targets without the capability, naming the target and the
reason, and counts the skips per target in the run's summary. A capability is a
predicate over the target and its server's version string.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .backends import Target, serializable_postgres


@dataclass(frozen=True)
class Capability:
    """A feature a target has when ``applies(target, server_version)``; ``lacking`` says
    why a target without it cannot run the test."""

    applies: Callable[[Target, str], bool]
    lacking: str


def only_on(*dialects: str, lacking: str) -> Capability:
    return Capability(lambda target, _version: target.dialect in dialects, lacking)


def _mariadb_at_least(major: int, minor: int) -> Callable[[Target, str], bool]:
    def applies(target: Target, version: str) -> bool:
        if target.dialect != "mysql" or "mariadb" not in version.lower():
            return False
        found = tuple(int(part) for part in version.split("-")[0].split(".")[:2])
        return found >= (major, minor)

    return applies


CAPABILITIES: dict[str, Capability] = {
    "read_replicas": only_on("postgresql", "mysql", lacking="SQLite has no read replicas (read_dsn)"),
    "lock_wait_timeout": only_on(
        "mysql",
        lacking="InnoDB lock-wait timeouts (error 1205) are MySQL's; PostgreSQL waits, "
        "SQLite has its busy timeout",
    ),
    "session_lock_timeout": only_on(
        "postgresql",
        lacking="lock_timeout is PostgreSQL's session setting; MySQL's --sql script leaves the session's "
        "lock_wait_timeout alone, SQLite has its busy timeout",
    ),
    "counter_trigger": only_on(
        "sqlite",
        lacking="revision 0007's counter trigger is SQLite's; PostgreSQL's append is one statement "
        "without it, MySQL/MariaDB's one CALL of revision 0008's procedure",
    ),
    "append_procedure": only_on(
        "mysql",
        lacking="revision 0008's append procedure is MySQL/MariaDB's; PostgreSQL and SQLite append "
        "in one statement without it",
    ),
    "get_lock": only_on(
        "mysql", lacking="GET_LOCK is MySQL's schema lock; PostgreSQL and SQLite lock otherwise"
    ),
    "max_allowed_packet": only_on(
        "mysql", lacking="max_allowed_packet is MySQL's; the other backends' limit is 1 GB"
    ),
    # A driver in pure Python over a socket: a fork taken while another thread is inside
    # a call leaves the child no C-level lock to wait on. SQLite's own mutexes, held by
    # aiosqlite's thread at the fork, can leave the child waiting forever.
    "fork_during_calls": only_on(
        "postgresql",
        "mysql",
        lacking="SQLite's mutexes may be held by another thread at the fork (fork before starting threads)",
    ),
    "serializable_default": Capability(
        lambda target, _version: target.dialect == "postgresql" and serializable_postgres(),
        lacking="runs in the SERIALIZABLE PostgreSQL pass only (CHATLEDGER_TEST_PG_SERIALIZABLE=1)",
    ),
    # MariaDB 11.8 turns innodb_snapshot_isolation on by default: a locking read of a
    # row changed after the transaction's snapshot fails with error 1020.
    "snapshot_isolation_default": Capability(
        _mariadb_at_least(11, 8), lacking="innodb_snapshot_isolation is on by default from MariaDB 11.8"
    ),
    # -- what a test's body used to skip on by the dialect's name ---------------------------
    "case_folding_collations": only_on("mysql", lacking="case-folding collations are MySQL's"),
    "schemas": only_on("postgresql", lacking="schemas within one database: PostgreSQL"),
    "insert_returning": only_on(
        "sqlite",
        "postgresql",
        lacking="MySQL has no INSERT .. RETURNING; the store tests above cover it",
    ),
    "default_transaction_read_only": only_on(
        "postgresql", lacking="PostgreSQL's default_transaction_read_only"
    ),
    "session_read_only": only_on("mysql", lacking="a MySQL/MariaDB read-only transaction"),
    "statement_time_limit": only_on("postgresql", "mysql", lacking="SQLite has no statement time limit"),
    "transactional_ddl": only_on(
        "sqlite",
        "postgresql",
        lacking="MySQL/MariaDB have no transactional DDL: see test_mysql_failed_revision_is_not_undone",
    ),
    "ddl_commits_each_statement": only_on(
        "mysql", lacking="the transactional backends undo a failed revision"
    ),
    "language_collations": only_on(
        "postgresql",
        lacking="a PostgreSQL column may carry a language's collation; the other backends' ids are binary",
    ),
    "connection_collations": only_on("sqlite", lacking="SQLite's column collations"),
    "langgraph_postgres_saver": only_on(
        "postgresql", lacking="AsyncPostgresSaver (langgraph-checkpoint-postgres) writes PostgreSQL only"
    ),
    "langgraph_mysql_saver": only_on(
        "mysql", lacking="langgraph-checkpoint-mysql's savers write MySQL/MariaDB only"
    ),
    "catalog_read_after_lock_wait": only_on(
        "postgresql",
        lacking="the listing and the read share one snapshot on SQLite; MySQL's move commits its DDL",
    ),
}


def missing(names: list[str], target: Target, version: str) -> str | None:
    """Why ``target`` lacks one of the capabilities ``names``, or ``None``.

    Raises:
        KeyError: a name no capability has (a typo in a marker).
    """
    for name in names:
        if name not in CAPABILITIES:
            raise KeyError(f"unknown capability {name!r}; declared: {sorted(CAPABILITIES)}")
        capability = CAPABILITIES[name]
        if not capability.applies(target, version):
            return capability.lacking
    return None
