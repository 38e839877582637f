"""chatledger's backends, one module each, and what they share.

Everything that differs between SQLite, PostgreSQL and MySQL/MariaDB beyond what
SQLAlchemy hides is a field or hook of one :class:`Backend` per backend (and
per async driver where a dialect has two: PostgreSQL's asyncpg and psycopg), defined
in that backend's module and looked up by dialect name and driver with :func:`backend`:

- :mod:`.base`: the per-backend object and its registry, :class:`Failure` and
  :func:`classify`, and the one mapping of a database error to a chatledger error
  (:func:`database_error`);
- :mod:`.postgresql` (asyncpg, psycopg; PgBouncer), :mod:`.mysql` (MySQL and
  MariaDB; Galera), :mod:`.sqlite`;
- :mod:`.appends`: the statement parts the backends' appends share;
- :mod:`.engines`: engines of a backend;
- :mod:`.migrations`: what a migration asks its backend for.

Adding a backend: one module defining its :class:`Backend`, and one line below
registering it; ``tests/test_backend_registry.py`` then lists what it still lacks.
"""

from __future__ import annotations

from . import mysql, postgresql, sqlite
from .base import (
    TRANSACTION_ENDED,
    Appender,
    Backend,
    CollationReader,
    Collations,
    ConnectArgs,
    DropGuard,
    EngineListeners,
    Failure,
    ForeignBegin,
    ForeignCheck,
    Liveness,
    MigrationTransaction,
    OfflineScript,
    ReinSaver,
    Replication,
    RoutineCheck,
    RoutineRefused,
    SessionSetup,
    StorageSize,
    StorageSizer,
    backend,
    classify,
    configuration_error,
    configuration_hint,
    configuration_refusals,
    database_error,
    database_errors,
    error_code,
    execute_call,
    missing_table,
    no_listeners,
    register,
    registered,
)
from .engines import (
    COMMITTED,
    FOREIGN_CHECK_OPTIONS,
    adopt_engine,
    configure_engine,
    create_engine,
    merge_connect_args,
    set_characteristics,
    skips_reset,
)
from .migrations import (
    MigrationBusy,
    SchemaLockTimeout,
    TablesBusy,
    guard_drops,
    migration_transaction,
    offline_script,
)
from .mysql import GALERA_SYNC_WAIT_READS, configure_galera
from .postgresql import SCHEMA_LOCK_KEY
from .sqlite import SQLITE_WAL_LIMIT, configure_migration_engine, release_cancelled_statements

# The registry: each dialect's default driver first.
register(postgresql.ASYNCPG, postgresql.PSYCOPG)
register(mysql.AIOMYSQL)
register(sqlite.AIOSQLITE)

__all__ = [
    "COMMITTED",
    "FOREIGN_CHECK_OPTIONS",
    "GALERA_SYNC_WAIT_READS",
    "SCHEMA_LOCK_KEY",
    "SQLITE_WAL_LIMIT",
    "TRANSACTION_ENDED",
    "Appender",
    "Backend",
    "CollationReader",
    "Collations",
    "ConnectArgs",
    "DropGuard",
    "EngineListeners",
    "Failure",
    "ForeignBegin",
    "ForeignCheck",
    "Liveness",
    "MigrationBusy",
    "MigrationTransaction",
    "OfflineScript",
    "ReinSaver",
    "Replication",
    "RoutineCheck",
    "RoutineRefused",
    "SchemaLockTimeout",
    "SessionSetup",
    "StorageSize",
    "StorageSizer",
    "TablesBusy",
    "adopt_engine",
    "backend",
    "classify",
    "configuration_error",
    "configuration_hint",
    "configuration_refusals",
    "configure_engine",
    "configure_galera",
    "configure_migration_engine",
    "create_engine",
    "database_error",
    "database_errors",
    "error_code",
    "execute_call",
    "guard_drops",
    "merge_connect_args",
    "migration_transaction",
    "missing_table",
    "no_listeners",
    "offline_script",
    "register",
    "registered",
    "release_cancelled_statements",
    "set_characteristics",
    "skips_reset",
]
