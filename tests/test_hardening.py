"""Found by trying to break the store: each case refuses cleanly or recovers."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import UserMessage

from chatledger import StorageUnavailable
from chatledger.dsn import display, resolve_dsn
from chatledger.validate import MAX_BIGINT, MAX_JSON_DEPTH
from chatledger.zett import LedgerSessionStorage

from .conftest import Database


@pytest.mark.requires("lock_wait_timeout")
async def test_mysql_lock_wait_timeout_is_retried(database: Database, session_id: str) -> None:
    """ER_LOCK_WAIT_TIMEOUT (1205) rolls back and is retried; only when the retry budget
    runs out does the caller see StorageUnavailable, and nothing was written."""
    async with LedgerSessionStorage(database.url) as storage:
        await storage.append(session_id, "r", UserMessage(content="first"))
    holder = create_async_engine(database.url, poolclass=NullPool)
    options = {"lock_timeout": 1, "retry_timeout": 1.5}
    try:
        async with holder.connect() as lock, LedgerSessionStorage(database.url, **options) as storage:
            await lock.execute(
                text("SELECT id FROM agent_sessions WHERE id = :id FOR UPDATE"), {"id": session_id}
            )
            with pytest.raises(StorageUnavailable, match=r"retry budget \(retry_timeout=1.5 s"):
                await storage.append(session_id, "r", UserMessage(content="blocked"))
            assert storage.ledger.retries >= 1
            await lock.rollback()
            assert await storage.append(session_id, "r", UserMessage(content="after")) == 2
    finally:
        await holder.dispose()


@pytest.mark.parametrize("dsn", ["sqlite://", "sqlite:///:memory:", "sqlite+aiosqlite:///:memory:"])
def test_in_memory_sqlite_is_refused(dsn: str) -> None:
    """Concurrent calls would share one connection's transaction and lose acknowledged writes."""
    with pytest.raises(ValueError, match="in-memory"):
        LedgerSessionStorage(dsn)


@pytest.mark.parametrize("charset", ["utf8", "latin1"])
def test_mysql_charset_other_than_utf8mb4_is_refused(charset: str) -> None:
    with pytest.raises(ValueError, match="charset"):
        resolve_dsn(f"mysql://root@127.0.0.1/db?charset={charset}")


def test_password_given_as_query_parameter_is_masked() -> None:
    url = resolve_dsn("postgresql://app@127.0.0.1/db?password=S3cretPW")
    assert url.password == "S3cretPW"
    assert "S3cretPW" not in display(url)
    assert "S3cretPW" not in repr(LedgerSessionStorage(url))


def test_bad_ports_and_home_paths() -> None:
    with pytest.raises(ValueError, match="port"):
        resolve_dsn("postgresql://app@127.0.0.1:99999/db")
    assert "~" not in str(resolve_dsn("sqlite:///~/ledger.db").database)
    assert resolve_dsn("postgresql://app@h/db?sslmode=require").query == {"ssl": "require"}


async def test_expected_version_whose_successor_overflows_is_refused(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    await storage.append(session_id, "r", UserMessage(content="m"))
    with pytest.raises(ValueError, match="expected_version"):
        await storage.snapshot(session_id, CompactedMessage(content="s"), 1, MAX_BIGINT)
    assert (await storage.load(session_id)).snapshot is None


async def test_metadata_nested_too_deep_is_refused_and_nothing_written(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    deep: object = "leaf"
    for _ in range(MAX_JSON_DEPTH + 5):
        deep = [deep]
    with pytest.raises(ValueError, match="metadata is nested deeper"):
        await storage.append(session_id, "r", UserMessage(content="m"), metadata={"deep": deep})  # type: ignore[dict-item]
    assert await storage.get_session(session_id) is None


async def test_closed_storage_refuses_calls(database: Database, session_id: str) -> None:
    storage = LedgerSessionStorage(database.url)
    await storage.append(session_id, "r", UserMessage(content="m"))
    await storage.close()
    with pytest.raises(RuntimeError, match="closed"):
        await storage.load(session_id)


async def test_update_without_version_racing_recreation_never_reports_a_conflict(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    """Without expected_version an update never raises VersionConflict, even while the
    session is deleted and created again under it."""
    await storage.create_session(session_id=session_id, title="t")

    async def churn() -> None:
        for _ in range(15):
            await storage.delete_session(session_id)
            await storage.create_session(session_id=session_id, title="t")

    async def update() -> None:
        for index in range(30):
            await storage.update_session(session_id, title=f"u{index}")

    await asyncio.gather(churn(), update())
