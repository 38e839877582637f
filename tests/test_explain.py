"""The indexes serve exactly the queries the storage makes, checked with EXPLAIN.

Load reads the raw-log tail by sequence
(``ux_raw_session_sequence``: ``WHERE session_id = ? AND sequence > ? ORDER BY
sequence``) and list_sessions reads live sessions by activity (``ix_agent_sessions_activity``:
``WHERE deleted_at IS NULL ORDER BY updated_at DESC, id DESC LIMIT ?``, past
thousands of newer tombstones). Each test captures the very statement
(SQL text and parameters) the storage sends while it runs ``load`` or
``list_sessions``, then has the server EXPLAIN it: the plan must read through that
index and must not sort (PostgreSQL: no Sort node; MySQL/MariaDB: no filesort;
SQLite: no temporary B-tree), so the cost is that of the page or the tail, not of the
table. ``chatledger check``'s search for raw messages past their session's counter row
probes ``ux_raw_session_sequence`` once per session, and reads no raw message else.

Planners rightly prefer other plans on small tables, so the tests seed enough rows
(MariaDB scans and sorts ``agent_sessions`` below a few thousand rows) and, on
PostgreSQL, switch sequential and bitmap scans off in the EXPLAIN's transaction (for a
50-row tail a bitmap scan plus a sort of those 50 rows is cheapest, and also O(tail));
what is left must show that a plain index scan serves range and order alone.

The tail test also asks the planner, with nothing switched off, how many rows it
expects to read for a 50-message tail of a session that sits beside a larger one:
PostgreSQL estimates ``sequence > boundary`` from the whole table, so without the
tail's upper bound (``sequence <= last_sequence``) it expects thousands and picks a
parallel bitmap scan plus a sort (15 ms instead of 0.06 ms in the benchmark).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from chatledger import integrity
from chatledger.tools.bench import Seeder
from chatledger.zett import LedgerSessionStorage

pytestmark = pytest.mark.one_transaction_at_a_time

#: Raw messages of the checkpointed session, its tail after the checkpoint, and the
#: raw messages of a larger session beside it.
MESSAGES, TAIL, NEIGHBOUR = 1_500, 50, 10_000
#: Sessions seeded for list_sessions (one message each), and the page read.
SESSIONS, PAGE = 6_000, 20


@dataclass(frozen=True)
class Plan:
    """What an EXPLAIN says: the indexes read, whether anything is sorted, the most
    rows the planner expects at any step (``None``: SQLite does not say), the plan text."""

    indexes: set[str]
    sorts: bool
    rows: float | None
    text: str


async def _postgresql(conn: AsyncConnection, sql: str, parameters: Any) -> Plan:
    raw = (await conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {sql}", parameters)).scalar_one()
    document = json.loads(raw) if isinstance(raw, str) else raw
    indexes: set[str] = set()
    sorts = False
    rows = 0.0

    def walk(node: dict[str, Any]) -> None:
        nonlocal sorts, rows
        if "Index Name" in node:
            indexes.add(node["Index Name"])
        sorts = sorts or node["Node Type"] in ("Sort", "Incremental Sort")
        rows = max(rows, float(node["Plan Rows"]))
        for child in node.get("Plans", []):
            walk(child)

    walk(document[0]["Plan"])
    return Plan(indexes, sorts, rows, json.dumps(document, indent=1))


async def _mysql(conn: AsyncConnection, sql: str, parameters: Any) -> Plan:
    rows = [dict(row._mapping) for row in await conn.exec_driver_sql(f"EXPLAIN {sql}", parameters)]
    return Plan(
        {row["key"] for row in rows if row["key"]},
        any("filesort" in (row["Extra"] or "") for row in rows),
        max(float(row["rows"] or 0) for row in rows),
        "\n".join(map(str, rows)),
    )


async def _sqlite(conn: AsyncConnection, sql: str, parameters: Any) -> Plan:
    details = [row[-1] for row in await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", parameters)]
    return Plan(
        {match for detail in details for match in re.findall(r"USING (?:COVERING )?INDEX (\w+)", detail)},
        any("TEMP B-TREE" in detail for detail in details),
        None,
        "\n".join(details),
    )


#: backend -> how its EXPLAIN is run and read (EXPLAIN differs on every backend).
EXPLAIN: dict[str, Callable[[AsyncConnection, str, Any], Awaitable[Plan]]] = {
    "postgresql": _postgresql,
    "mysql": _mysql,
    "sqlite": _sqlite,
}
#: backend -> settings of the EXPLAIN's transaction (see the module docstring).
SETTINGS: dict[str, tuple[str, ...]] = {
    "postgresql": ("SET LOCAL enable_seqscan = off", "SET LOCAL enable_bitmapscan = off"),
}
#: backend -> statement refreshing the planner statistics.
ANALYZE = {
    "postgresql": "ANALYZE",
    "mysql": "ANALYZE TABLE agent_sessions, raw_messages, session_snapshots",
    "sqlite": "ANALYZE",
}


@contextmanager
def captured(engine: AsyncEngine) -> Iterator[list[tuple[str, Any]]]:
    """Every ``(statement, parameters)`` the engine sends while the block runs."""
    statements: list[tuple[str, Any]] = []

    def listen(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        statements.append((statement, parameters))

    event.listen(engine.sync_engine, "before_cursor_execute", listen)
    try:
        yield statements
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", listen)


def _flat(sql: str) -> str:
    return " ".join(sql.split())


def _one(statements: list[tuple[str, Any]], *fragments: str) -> tuple[str, Any]:
    found = [(sql, params) for sql, params in statements if all(part in _flat(sql) for part in fragments)]
    assert len(found) == 1, f"expected one statement with {fragments}, got {statements}"
    return found[0]


async def _explain(
    storage: LedgerSessionStorage, backend: str, sql: str, parameters: Any, *, natural: bool = False
) -> Plan:
    """EXPLAIN in a transaction of its own; ``natural``: without :data:`SETTINGS`."""
    async with storage.ledger.engine.connect() as conn, conn.begin():
        for setting in () if natural else SETTINGS.get(backend, ()):
            await conn.execute(text(setting))
        return await EXPLAIN[backend](conn, sql, parameters)


async def test_load_reads_the_tail_through_the_sequence_index(
    storage: LedgerSessionStorage, backend: str
) -> None:
    session = f"explain-tail-{uuid.uuid4().hex}"
    seeder = Seeder("chatledger", storage.ledger.engine, datetime.now(UTC) - timedelta(days=1))
    await seeder.session(f"{session}-neighbour", NEIGHBOUR, 0, offset_ms=0)
    await seeder.session(session, MESSAGES, MESSAGES - TAIL, offset_ms=0)
    await seeder.analyze(ANALYZE[backend])

    with captured(storage.ledger.engine) as statements:
        view = await storage.load(session)
    assert len(view.raw_tail) == TAIL and view.snapshot is not None
    sql, parameters = _one(statements, "FROM raw_messages", "ORDER BY raw_messages.sequence")

    natural = await _explain(storage, backend, sql, parameters, natural=True)
    assert natural.rows is None or natural.rows <= 4 * TAIL, natural.text
    plan = await _explain(storage, backend, sql, parameters)
    assert "ux_raw_session_sequence" in plan.indexes, plan.text
    assert not plan.sorts, plan.text


async def test_list_sessions_reads_a_page_through_the_activity_index(
    storage: LedgerSessionStorage, backend: str
) -> None:
    seeder = Seeder("chatledger", storage.ledger.engine, datetime.now(UTC) - timedelta(days=2))
    prefix = f"explain-list-{uuid.uuid4().hex[:12]}"
    await seeder.many_sessions(0, SESSIONS, prefix=prefix)
    # The newer half deleted: tombstones the page must not read past (a delete keeps the
    # counter row and moves its activity to now).
    async with storage.ledger.engine.begin() as conn:
        await conn.execute(
            text("UPDATE agent_sessions SET deleted_at = updated_at WHERE id >= :first AND id LIKE :prefix"),
            {"first": f"{prefix}-{SESSIONS // 2:07d}", "prefix": f"{prefix}-%"},
        )
    await seeder.analyze(ANALYZE[backend])

    with captured(storage.ledger.engine) as statements:
        page = await storage.list_sessions(limit=PAGE)
    assert len(page) == PAGE
    sql, parameters = _one(statements, "FROM agent_sessions", "agent_sessions.updated_at DESC")

    plan = await _explain(storage, backend, sql, parameters)
    assert "ix_agent_sessions_activity" in plan.indexes, plan.text
    assert not plan.sorts, plan.text


def _postgresql_reads_raw_messages_whole(plan: Plan) -> bool:
    nodes: list[dict[str, Any]] = []

    def walk(node: dict[str, Any]) -> None:
        nodes.append(node)
        for child in node.get("Plans", []):
            walk(child)

    walk(json.loads(plan.text)[0]["Plan"])
    return any(
        node.get("Relation Name") == "raw_messages"
        and node["Node Type"] not in ("Index Scan", "Index Only Scan")
        for node in nodes
    )


def _mysql_reads_raw_messages_whole(plan: Plan) -> bool:
    return any(
        "'table': 'raw_messages'" in row and "'type': 'ref'" not in row for row in plan.text.splitlines()
    )


def _sqlite_reads_raw_messages_whole(plan: Plan) -> bool:
    return any(detail.startswith("SCAN raw_messages") for detail in plan.text.splitlines())


#: backend -> whether a plan (as its EXPLAIN reader renders it) reads ``raw_messages``
#: otherwise than by an index probe.
READS_RAW_MESSAGES_WHOLE: dict[str, Callable[[Plan], bool]] = {
    "postgresql": _postgresql_reads_raw_messages_whole,
    "mysql": _mysql_reads_raw_messages_whole,
    "sqlite": _sqlite_reads_raw_messages_whole,
}


async def test_check_probes_each_session_through_the_sequence_index(
    storage: LedgerSessionStorage, backend: str
) -> None:
    """``chatledger check``'s search for raw messages past their counter row: one probe
    of ``ux_raw_session_sequence`` per session, no scan of the raw log (whose size the
    neighbour makes far larger than the sessions')."""
    seeder = Seeder("chatledger", storage.ledger.engine, datetime.now(UTC) - timedelta(days=3))
    prefix = f"explain-check-{uuid.uuid4().hex[:12]}"
    await seeder.many_sessions(0, SESSIONS // 2, prefix=prefix)
    await seeder.session(f"{prefix}-neighbour", NEIGHBOUR, 0, offset_ms=0)
    await seeder.analyze(ANALYZE[backend])

    with captured(storage.ledger.engine) as statements:
        async with storage.ledger.engine.connect() as conn:
            found, _ = await conn.run_sync(integrity.past_counter)
    assert not [item for item in found if item.session_id.startswith(prefix)]
    sql, parameters = _one(statements, "FROM agent_sessions", "FROM raw_messages")

    plan = await _explain(storage, backend, sql, parameters, natural=True)
    assert "ux_raw_session_sequence" in plan.indexes, plan.text
    assert not READS_RAW_MESSAGES_WHOLE[backend](plan), plan.text
    assert not plan.sorts, plan.text  # the highest sequence read off the index's end, not sorted
