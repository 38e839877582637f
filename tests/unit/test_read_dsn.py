"""``read_dsn`` without a database: what is refused, and the positions a replica read
waits for (:mod:`chatledger.replicas`)."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from chatledger import dialects
from chatledger.engine import Ledger
from chatledger.replicas import KEPT, ReadPositions
from chatledger.zett import LedgerSessionStorage

PG = "postgresql://u@127.0.0.1:1/db"


def test_sqlite_has_no_replicas() -> None:
    with pytest.raises(ValueError, match="SQLite has no read replicas"):
        LedgerSessionStorage("sqlite:///chat.sqlite3", read_dsn="sqlite:///other.sqlite3")


def test_the_framework_adapters_refuse_read_dsn() -> None:
    """The OpenAI Agents session and the ADK service read on the primary only (docs/dsn.md)."""
    from chatledger.adk import LedgerSessionService
    from chatledger.openai_agents import LedgerSession

    with pytest.raises(ValueError, match="LedgerSession reads on the primary only"):
        LedgerSession.from_url("s", url=PG, read_dsn=PG)
    with pytest.raises(ValueError, match="LedgerSessionService reads on the primary only"):
        LedgerSessionService(PG, read_dsn=PG)


def test_a_replica_of_another_dialect_is_refused() -> None:
    with pytest.raises(ValueError, match="is not a PostgreSQL DSN"):
        Ledger(PG, read_dsn=["mysql://u@127.0.0.1:1/db"])


def test_read_dsn_needs_a_primary_dsn() -> None:
    engine = create_async_engine(
        PG.replace("postgresql:", "postgresql+asyncpg:")
    )  # a driver SQLAlchemy 2.0 has too
    with pytest.raises(ValueError, match="read_dsn needs a DSN for the primary"):
        Ledger(engine=engine, read_dsn=PG)


def test_bad_read_dsn_and_replica_wait() -> None:
    with pytest.raises(ValueError, match="read_dsn"):
        Ledger(PG, read_dsn=42)
    with pytest.raises(ValueError, match="replica_wait"):
        Ledger(PG, read_dsn=PG, replica_wait=-1)


def test_one_or_several_replicas() -> None:
    assert len(Ledger(PG, read_dsn=PG).connections.replicas) == 1
    ledger = Ledger(PG, read_dsn=[PG, "postgresql+psycopg://u@127.0.0.1:2/db"])
    assert [replica.backend.driver for replica in ledger.connections.replicas] == ["asyncpg", "psycopg"]
    assert Ledger(PG).write_position("s") is None  # no replicas: nothing remembered


def _later(backend: str) -> ReadPositions:
    replication = dialects.backend(backend).replication
    assert replication is not None
    return ReadPositions(replication.later)


def test_a_session_waits_for_its_latest_write() -> None:
    positions = _later("postgresql")
    positions.wrote("a", "0/3000100")
    positions.wrote("a", "0/30000F0")  # a concurrent write acknowledged later, at an earlier position
    positions.wrote("b", "1/0")
    assert positions.needed("a") == (False, "0/3000100")
    assert positions.needed(None) == (False, "1/0")  # a list waits for every write
    assert positions.needed("never written") == (False, None)


def test_a_lost_position_sends_the_session_to_the_primary() -> None:
    positions = _later("postgresql")
    positions.wrote("a", None)
    positions.wrote("a", "0/1")
    assert positions.needed("a") == (True, None)
    # A list goes to the primary too: the later position may predate the lost one.
    assert positions.needed(None) == (True, None)
    assert positions.needed("b") == (False, None)  # other sessions are not affected


def test_a_lost_position_evicted_sends_sessions_not_kept_to_the_primary() -> None:
    positions = _later("postgresql")
    positions.wrote("lost", None)
    for index in range(KEPT):
        positions.wrote(f"s{index}", f"0/{index + 1:X}")
    assert "lost" not in positions._sessions
    assert positions.needed("lost") == (True, None)
    assert positions.needed("s0") == (False, "0/1")


def test_sessions_no_longer_kept_wait_for_the_floor() -> None:
    positions = _later("postgresql")
    for index in range(KEPT + 1):
        positions.wrote(f"s{index}", f"0/{index + 1:X}")
    assert positions.floor == "0/1"
    assert positions.needed("s0") == (False, "0/1")
    assert positions.needed("some other") == (False, "0/1")


def test_gtid_positions_merge_per_domain() -> None:
    replication = dialects.backend("mysql").replication
    assert replication is not None
    assert replication.later("0-1-10,1-2-5", "0-1-9,1-3-7") == "0-1-10,1-3-7"
    assert replication.later("", "0-1-3") == "0-1-3"
