"""Options of a store, validated by pydantic before any engine exists."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class LedgerOptions(BaseModel):
    """Keyword options accepted by every chatledger store (``**options``).

    Pool settings apply to PostgreSQL and MySQL; SQLite uses its own busy timeout.
    Unknown names raise ``pydantic.ValidationError`` (a ``ValueError``).
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
    #: Log every statement through the ``sqlalchemy.engine`` logger.
    echo: bool = False
    #: Extra arguments for the DBAPI driver's ``connect()``.
    connect_args: dict[str, Any] = Field(default_factory=dict)
    #: Upgrade the schema on first use. ``None``: yes for SQLite (embedded), no for a
    #: server database, where migrations are a deploy step.
    auto_upgrade: bool | None = None
    #: Attempts for a transaction that hits a transient failure (deadlock,
    #: serialization failure, lock timeout, busy SQLite file); 1 disables retrying.
    retry_attempts: int = Field(default=30, ge=1)
    #: First backoff between attempts in seconds; doubles per attempt, with full jitter.
    retry_backoff: float = Field(default=0.01, ge=0)
    #: Upper bound of one backoff, in seconds.
    retry_backoff_max: float = Field(default=0.5, ge=0)
    #: PostgreSQL behind PgBouncer in transaction pooling mode: no client-side pool
    #: (PgBouncer pools), no cached or reused prepared-statement names.
    pgbouncer: bool = False
    #: SQLite: milliseconds a writer waits for the file's write lock.
    sqlite_busy_timeout_ms: int = Field(default=30_000, ge=0)
