"""Pooled deployments: chatledger behind PgBouncer in transaction pooling mode.

asyncpg and psycopg behind PgBouncer in transaction pooling mode: the store's ``pgbouncer=True``
option (no client-side pool, no cached or reused prepared-statement names) with the
DSN pointing at PgBouncer's port. Each test starts its own ``pgbouncer`` (Debian
package ``pgbouncer``) in front of this machine's PostgreSQL, configured as
docs/pgbouncer.md says (``pool_mode = transaction``, ``server_reset_query = DISCARD ALL``,
``server_reset_query_always = 1``), with fewer server connections than clients so
that transactions of one client land on different server connections.

A missing ``pgbouncer`` binary fails the run when ``CHATLEDGER_REQUIRE_BACKENDS``
names postgresql (CI installs it), and skips otherwise.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import UserMessage

from chatledger import ConfigurationError
from chatledger.zett import LedgerSessionStorage

from .support.backends import Servers
from .support.throwaway import (
    ThrowawayPgBouncer,
    ledger_state,
    migrated_database,
    pgbouncer_missing,
    require,
    shared_server,
)

TIMEOUT = 60.0


@pytest.fixture(scope="module")
async def upstream(servers: Servers) -> AsyncIterator[URL]:
    """A fresh migrated database on this machine's PostgreSQL (migrated directly, not
    through PgBouncer, as the README says)."""
    async with migrated_database(shared_server(servers, "postgresql")) as url:
        yield url


@pytest.fixture(scope="module")
def bouncer(upstream: URL) -> Iterator[ThrowawayPgBouncer]:
    require("postgresql", pgbouncer_missing())
    started = ThrowawayPgBouncer(upstream, pool_size=2)
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
def pooled_url(bouncer: ThrowawayPgBouncer, upstream: URL) -> URL:
    assert upstream.database is not None
    return bouncer.url(upstream.database)


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
async def test_storage_works_behind_transaction_pooling(pooled_url: URL, driver: str) -> None:
    run = uuid.uuid4().hex[:8]
    shared = f"pgb-{run}-shared"
    writers, appends = 6, 12
    url = pooled_url.set(drivername=f"postgresql+{driver}")
    async with LedgerSessionStorage(url, pgbouncer=True) as storage:

        async def writer(number: int) -> list[tuple[str, int, str]]:
            acked = []
            for index in range(appends):
                for session in (shared, f"pgb-{run}-{number}"):
                    text = f"{number}:{index}"
                    sequence = await storage.append(session, "pooled", UserMessage(content=text))
                    acked.append((session, sequence, text))
                    # Reads between writes: more transactions, more server-connection switches.
                    assert await storage.count_messages(session) >= sequence
            return acked

        results = await asyncio.wait_for(asyncio.gather(*(writer(n) for n in range(writers))), TIMEOUT)
        acked = [ack for result in results for ack in result]
        assert len({(session, sequence) for session, sequence, _ in acked}) == len(acked)

        sessions = {session for session, _, _ in acked}
        for session in sessions:
            state = await ledger_state(storage, session)
            assert state.consistent, (session, state)
            stored = {
                record.sequence: record.message.content for record in await storage.list_raw_messages(session)
            }
            assert {sequence: text for s, sequence, text in acked if s == session} == stored
        assert (await ledger_state(storage, shared)).counter == writers * appends

        checkpoint = await storage.snapshot(
            shared, CompactedMessage(content="first half"), writers * appends // 2, 0
        )
        assert checkpoint.version == 1
        view = await storage.load(shared)
        assert view.snapshot is not None and view.snapshot.version == 1
        assert [record.sequence for record in view.raw_tail] == list(
            range(writers * appends // 2 + 1, writers * appends + 1)
        )
        listed = {summary.session_id for summary in await storage.list_sessions(limit=100)}
        assert sessions <= listed
        assert await storage.delete_session(shared) is True
        assert await storage.count_messages(shared) == 0


async def test_without_the_option_prepared_statements_break(pooled_url: URL) -> None:
    """The pooled tests above really run through transaction pooling: asyncpg's
    default statement cache does not survive it (``DISCARD ALL`` after every
    transaction drops the prepared statements the cache still names)."""
    session = f"pgb-{uuid.uuid4().hex[:8]}"
    engine = create_async_engine(pooled_url)  # asyncpg's and SQLAlchemy's defaults
    try:
        with pytest.raises(DBAPIError, match="prepared statement"):
            for _ in range(5):
                async with engine.connect() as conn:
                    await conn.execute(
                        text("SELECT count(*) FROM agent_sessions WHERE id = :id"), {"id": session}
                    )
                    await conn.commit()
    finally:
        await engine.dispose()


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
async def test_without_the_option_the_store_says_to_set_it(pooled_url: URL, driver: str) -> None:
    """PgBouncer refuses the store's per-connection settings (its lock timeout, sent
    with the login): a configuration error naming the option, not an outage."""
    async with LedgerSessionStorage(pooled_url.set(drivername=f"postgresql+{driver}")) as storage:
        with pytest.raises(ConfigurationError, match=r"pgbouncer=True"):
            await asyncio.wait_for(storage.count_messages("pgb"), TIMEOUT)
        assert storage.ledger.retries == 0


def test_pgbouncer_option_is_for_postgresql_only() -> None:
    with pytest.raises(ValueError, match="PostgreSQL"):
        LedgerSessionStorage("mysql://root@127.0.0.1/chatledger", pgbouncer=True)
