"""Options of a store, validated by pydantic before any engine exists."""

from __future__ import annotations

import warnings
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

#: Longest ``lock_timeout`` in seconds: PostgreSQL's ``lock_timeout`` is a 32-bit count
#: of milliseconds (at most 2,147,483,647: "invalid value for parameter" past it), the
#: smallest of the backends' limits (SQLite's busy timeout is one too).
MAX_LOCK_TIMEOUT = 2_147_483.0


class LedgerOptions(BaseModel):
    """Keyword options accepted by every chatledger store (``**options``).

    Pool settings apply to PostgreSQL and MySQL. Unknown names raise
    ``pydantic.ValidationError`` (a ``ValueError``).

    **Retries.** A call is retried whole while it fails for a reason that left nothing
    committed (a deadlock, a serialization failure, a lock wait past ``lock_timeout``,
    a busy SQLite file, a lost or refused connection), for at most ``retry_timeout``
    seconds from its start; a lock wait counts against that budget, so a call ends
    within about ``retry_timeout + lock_timeout`` seconds. On a server database each
    attempt has a deadline inside the budget (a third of ``retry_timeout``, never less
    than ``lock_timeout`` + 1 s; :mod:`chatledger.deadlines`): an attempt whose server
    session is quiet past it (the server stopped answering) is abandoned, its
    connection closed, and the call retried; a statement still running is let run
    until the budget's end.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Connections kept open per store (server databases).
    pool_size: int = Field(default=5, ge=1)
    #: Connections opened beyond ``pool_size`` under load.
    max_overflow: int = Field(default=10, ge=0)
    #: Seconds to wait for a free pooled connection before ``StorageUnavailable``.
    pool_timeout: float = Field(default=30.0, gt=0)
    #: Seconds after which a pooled connection is replaced (server idle timeouts).
    pool_recycle: int = Field(default=1800, ge=-1)
    #: Test every pooled connection with a round trip before each call (SQLAlchemy's
    #: ``pool_pre_ping``). Off by default: a connection the server dropped fails its
    #: first statement, before any COMMIT, and the call is retried on a new one.
    pool_pre_ping: bool = False
    #: Log every statement through the ``sqlalchemy.engine`` logger.
    echo: bool = False
    #: Extra arguments for the DBAPI driver's ``connect()``.
    connect_args: dict[str, Any] = Field(default_factory=dict)
    #: Upgrade the schema on first use. ``None``: yes for SQLite (embedded), no for a
    #: server database, where migrations are a deploy step.
    auto_upgrade: bool | None = None
    #: Seconds a call keeps retrying transient failures (deadlocks, serialization
    #: failures, lock timeouts, busy SQLite files, lost or refused connections), counted
    #: from its start; 0 makes one attempt. No attempt starts after the budget is spent.
    retry_timeout: float = Field(default=20.0, ge=0)
    #: First backoff between attempts in seconds; grows exponentially, with full jitter.
    retry_backoff: float = Field(default=0.01, ge=0)
    #: Upper bound of one backoff, in seconds.
    retry_backoff_max: float = Field(default=0.5, ge=0)
    #: Seconds one statement waits for a row or table lock another transaction holds
    #: before it fails and its transaction is retried (within ``retry_timeout``).
    #: Applied to every connection: PostgreSQL ``lock_timeout``, MySQL/MariaDB
    #: ``innodb_lock_wait_timeout`` (whole seconds, rounded up), SQLite ``busy_timeout``.
    lock_timeout: float = Field(default=5.0, gt=0, le=MAX_LOCK_TIMEOUT)
    #: PostgreSQL behind PgBouncer in transaction pooling mode: no client-side pool
    #: (PgBouncer pools), no cached or reused prepared-statement names, and no
    #: per-connection settings (PgBouncer refuses them; set ``lock_timeout`` on the role).
    pgbouncer: bool = False
    #: SQLite's ``synchronous`` pragma (the database runs in WAL mode). ``FULL``: every
    #: acknowledged commit survives a power loss or OS crash. ``NORMAL``: faster
    #: commits, but a power loss or OS crash may lose the last commits acknowledged
    #: before it (never corrupting the file; a crash of the process alone loses
    #: nothing). SQLite's documentation, "PRAGMA synchronous" and "WAL mode".
    sqlite_synchronous: Literal["FULL", "NORMAL"] = "FULL"

    #: Read replicas (one DSN, or several: each read takes the next), which serve the
    #: stores' ``load``, ``list`` and ``get`` reads: PostgreSQL streaming standbys,
    #: MariaDB replicas with GTIDs; refused for SQLite. See :mod:`chatledger.replicas`.
    read_dsn: str | list[str] | None = None
    #: Seconds a replica read of a session this process wrote waits for the replica to
    #: apply that write, before it reads on the primary instead (0: never waits).
    replica_wait: float = Field(default=1.0, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not ({"retry_attempts", "sqlite_busy_timeout_ms"} & data.keys()):
            return data
        data = dict(data)
        if "retry_attempts" in data:
            raise ValueError(
                "retry_attempts was replaced by retry_timeout: the retry budget in seconds (default 20)"
            )
        busy_ms = data.pop("sqlite_busy_timeout_ms")
        warnings.warn(
            "sqlite_busy_timeout_ms is deprecated: use lock_timeout (seconds, every backend)",
            DeprecationWarning,
            stacklevel=2,
        )
        if "lock_timeout" not in data and isinstance(busy_ms, int | float) and busy_ms > 0:
            data["lock_timeout"] = busy_ms / 1000
        return data
