"""OpenTelemetry spans and metrics of the stores' operations (chatledger.telemetry), read
from the SDK's in-memory exporter and metric reader on every backend.

Each test installs fresh global providers (the test utilities' reset first and after,
so that none leaks into another test), as an application sets its own up; chatledger
finds them through the global API.

* Every operation (zett append, load, snapshot, delete, list; rein save, load, delete,
  list) is a span with the session id, sequences, generation and ``db.system.name``,
  and a duration measurement; no message content, title or agent name appears in any
  attribute, event or metric.
* A retry forced for real (a lock held by another connection) is an event on the
  operation's span and a count; a settle after a COMMIT dropped through the proxy
  (tests/proxy.py) too, and an outcome that stays unknown is counted.
* The rein store's spans are children of the caller's span, across its loop thread.
* SQL-level spans come from opentelemetry-instrumentation-sqlalchemy, as
  docs/telemetry.md turns it on, under chatledger's span.
* Without opentelemetry-api, the no-op path is chosen at import and the store works.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import rein
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.test.globals_test import reset_metrics_globals, reset_trace_globals
from rein import Session
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import UserMessage

from chatledger import OutcomeUnknown, telemetry
from chatledger.dsn import sqlite_file
from chatledger.rein import LedgerSessionStore
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.backends import Servers
from .support.facts import facts_of
from .support.proxy import Proxy, commit_point, running_proxy
from .support.throwaway import migrated_database, shared_server

pytestmark = pytest.mark.dialect_only

#: Seconds any single wait may take before the test fails.
TIMEOUT = 60.0


@dataclass
class Telemetry:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader

    def finished(self, name: str | None = None) -> list[ReadableSpan]:
        return [span for span in self.spans.get_finished_spans() if name is None or span.name == name]

    def points(self, metric: str) -> list[Any]:
        """The data points of one metric, every attribute set."""
        data = self.metrics.get_metrics_data()
        found: list[Any] = []
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for item in scope.metrics:
                    if item.name == metric:
                        found.extend(item.data.data_points)
        return found

    def total(self, metric: str, **attributes: Any) -> int:
        return sum(
            point.value
            for point in self.points(metric)
            if all(point.attributes.get(name) == value for name, value in attributes.items())
        )


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    """Fresh global tracer and meter providers for this test only."""
    reset_trace_globals()
    reset_metrics_globals()
    telemetry.reset()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    try:
        yield Telemetry(exporter, reader)
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()
        reset_trace_globals()
        reset_metrics_globals()
        telemetry.reset()


def _expected_system(database: Database) -> str:
    return facts_of(database.backend).db_system(database.version)


def _all_values(otel: Telemetry) -> list[str]:
    """Every span name, attribute and event value, and every metric attribute, as text."""
    values: list[str] = []
    for span in otel.finished():
        values.append(span.name)
        values.extend(str(value) for value in (span.attributes or {}).values())
        for event in span.events:
            values.append(event.name)
            values.extend(str(value) for value in (event.attributes or {}).values())
    for metric in ("chatledger.operation.duration", "chatledger.retries", "chatledger.settles"):
        for point in otel.points(metric):
            values.extend(str(value) for value in point.attributes.values())
    return values


async def test_zett_operations_are_spans_with_their_attributes_and_no_content(
    otel: Telemetry, database: Database, session_id: str
) -> None:
    secret = f"SECRET-{uuid.uuid4()}"
    async with LedgerSessionStorage(database.url) as storage:
        await storage.append(session_id, "r", UserMessage(content=f"{secret} one"), title=f"{secret} title")
        await storage.append(session_id, "r", UserMessage(content=f"{secret} two"), agent_name="agent-x")
        await storage.snapshot(session_id, CompactedMessage(content=f"{secret} summary"), 1, 0)
        await storage.append(session_id, "r", UserMessage(content=f"{secret} three"))
        view = await storage.load(session_id)
        assert [record.sequence for record in view.raw_tail] == [2, 3]
        listed = await storage.list_sessions(limit=5)
        assert await storage.delete_session(session_id)

    appends = otel.finished("chatledger.zett.append")
    assert len(appends) == 3
    system = _expected_system(database)
    for sequence, span in enumerate(appends, start=1):
        attributes = span.attributes or {}
        assert attributes["gen_ai.conversation.id"] == session_id
        assert attributes["chatledger.sequence.first"] == attributes["chatledger.sequence.last"] == sequence
        assert attributes["db.system.name"] == system and attributes["db.system"] == system
        assert attributes["db.operation.name"] == "append" and attributes["chatledger.framework"] == "zett"
        assert span.kind is trace.SpanKind.INTERNAL and span.status.is_ok
    (snapshot,) = otel.finished("chatledger.zett.snapshot")
    assert snapshot.attributes is not None
    assert snapshot.attributes["chatledger.checkpoint.version"] == 1
    assert snapshot.attributes["chatledger.sequence.last"] == 1
    (load,) = otel.finished("chatledger.zett.load")
    assert load.attributes is not None
    assert load.attributes["gen_ai.conversation.id"] == session_id
    assert load.attributes["chatledger.sequence.first"] == 2
    assert load.attributes["chatledger.sequence.last"] == 3
    assert load.attributes["chatledger.generation.base_sequence"] == 0
    (listing,) = otel.finished("chatledger.zett.list")
    assert listing.attributes is not None
    assert listing.attributes["db.response.returned_rows"] == len(listed)
    assert "gen_ai.conversation.id" not in listing.attributes
    (deleting,) = otel.finished("chatledger.zett.delete")
    assert deleting.attributes is not None and deleting.attributes["chatledger.deleted"] is True

    for operation, count in (("append", 3), ("snapshot", 1), ("load", 1), ("list", 1), ("delete", 1)):
        points = [
            point
            for point in otel.points("chatledger.operation.duration")
            if point.attributes["db.operation.name"] == operation
            and point.attributes["chatledger.framework"] == "zett"
        ]
        assert sum(point.count for point in points) == count, operation
        assert all(point.attributes["db.system.name"] == system for point in points)
        assert all(point.sum > 0 for point in points)
    values = _all_values(otel)
    assert values and not [value for value in values if secret in value or "agent-x" in value]


async def test_a_failed_operation_sets_its_error_type_only(otel: Telemetry, database: Database) -> None:
    async with LedgerSessionStorage(database.url) as storage:
        with pytest.raises(ValueError, match="no raw messages"):
            await storage.snapshot(f"none-{uuid.uuid4()}", CompactedMessage(content="SECRET-x"), 1, 0)
    (span,) = otel.finished("chatledger.zett.snapshot")
    assert span.attributes is not None and span.attributes["error.type"] == "ValueError"
    # No exception event (its message may quote stored values); the refused write settled first.
    assert not span.status.is_ok and [event.name for event in span.events] == ["chatledger.settle"]
    (point,) = otel.points("chatledger.operation.duration")
    assert point.attributes["error.type"] == "ValueError"


async def test_rein_operations_are_spans_children_of_the_callers(otel: Telemetry, database: Database) -> None:
    conv_id = f"rein-{uuid.uuid4()}"
    secret = f"SECRET-{uuid.uuid4()}"
    session = Session(messages=[rein.Message(role="user", content=secret)])
    tracer = trace.get_tracer("the-application")
    with LedgerSessionStore(database.url) as store:
        with tracer.start_as_current_span("request") as parent:
            store.save(conv_id, session)
            store.save(conv_id, session)
            assert store.load(conv_id) is not None
        assert await store.aload_versioned(conv_id) is not None
        assert [info.id for info in store.list_sessions(limit=100)].count(conv_id) == 1
        assert store.delete(conv_id)

    saves = otel.finished("chatledger.rein.save")
    assert [span.attributes["chatledger.version"] for span in saves if span.attributes] == [1, 2]
    # Across the store's own loop thread, the caller's span is the parent.
    for span in [*saves, otel.finished("chatledger.rein.load")[0]]:
        assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
        assert span.attributes is not None and span.attributes["gen_ai.conversation.id"] == conv_id
        assert span.attributes["db.system.name"] == _expected_system(database)
    assert len(otel.finished("chatledger.rein.load")) == 2
    (listing,) = otel.finished("chatledger.rein.list")
    assert listing.attributes is not None and listing.attributes["db.response.returned_rows"] >= 1
    (deleting,) = otel.finished("chatledger.rein.delete")
    assert deleting.attributes is not None and deleting.attributes["chatledger.deleted"] is True
    counted = sum(
        point.count
        for point in otel.points("chatledger.operation.duration")
        if point.attributes["chatledger.framework"] == "rein"
    )
    assert counted == 6
    assert not [value for value in _all_values(otel) if secret in value]


async def _hold_lock(database: Database, session_id: str) -> AsyncIterator[None]:
    """Hold the session's counter row lock (the SQLite file's write lock) until resumed."""
    if facts_of(database.backend).file_write_lock:
        path = sqlite_file(database.url)
        holder = sqlite3.connect(str(path), isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            yield
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        return
    engine = create_async_engine(database.url, poolclass=NullPool)
    try:
        async with engine.connect() as conn:
            await conn.execute(
                text("SELECT id FROM agent_sessions WHERE id = :id FOR UPDATE"), {"id": session_id}
            )
            yield
            await conn.rollback()
    finally:
        await engine.dispose()


async def test_a_retry_on_a_held_lock_is_an_event_and_a_count(
    otel: Telemetry, database: Database, session_id: str
) -> None:
    async with LedgerSessionStorage(database.url, retry_timeout=30, lock_timeout=1) as storage:
        assert await storage.append(session_id, "r", UserMessage(content="first")) == 1
        holding = _hold_lock(database, session_id)
        await anext(holding)
        try:
            blocked = asyncio.create_task(storage.append(session_id, "r", UserMessage(content="blocked")))
            while storage.ledger.retries == 0:  # at least one lock wait ran out and was retried
                assert not blocked.done(), blocked
                await asyncio.sleep(0.1)
        finally:
            await anext(holding, None)
        assert await asyncio.wait_for(blocked, TIMEOUT) == 2
    span = otel.finished("chatledger.zett.append")[-1]
    retries = [event for event in span.events if event.name == "chatledger.retry"]
    assert len(retries) == storage.ledger.retries >= 1
    first = retries[0].attributes or {}
    assert first["chatledger.attempt"] == 1 and first["chatledger.retry.wait"] >= 0
    assert first["db.response.status_code"]  # the backend's lock-timeout code
    assert otel.total("chatledger.retries", **{"db.system.name": _expected_system(database)}) == len(retries)
    assert span.status.is_ok and (span.attributes or {})["chatledger.sequence.last"] == 2


# -- a COMMIT dropped through the proxy (PostgreSQL, MariaDB on this machine) ---------------


@pytest.fixture(scope="module", params=["postgresql", "mysql"])
async def server_url(request: pytest.FixtureRequest, servers: Servers) -> AsyncIterator[URL]:
    async with migrated_database(shared_server(servers, request.param)) as url:
        yield url


@pytest.fixture
async def proxy(server_url: URL) -> AsyncIterator[Proxy]:
    async with running_proxy(server_url) as running:
        yield running


async def test_a_settle_after_a_dropped_commit_is_an_event_and_a_count(
    otel: Telemetry, proxy: Proxy, server_url: URL, session_id: str
) -> None:
    storage = LedgerSessionStorage(proxy.url(server_url))
    try:
        await storage.ledger.ensure_ready()  # its reads commit too: arm the proxy after them
        assert await storage.append(session_id, "r", UserMessage(content="m1")) == 1
        lost = f"m2-{uuid.uuid4().hex}"
        proxy.arm("drop-after-commit", commit_point(storage.ledger, lost))
        appended = storage.append(session_id, "r", UserMessage(content=lost))
        assert await asyncio.wait_for(appended, TIMEOUT) == 2
        assert proxy.events("commit answered"), proxy.log
    finally:
        await storage.close()
    span = otel.finished("chatledger.zett.append")[-1]
    names = [event.name for event in span.events]
    assert "chatledger.retry" in names and "chatledger.settle" in names, names
    settles = [event for event in span.events if event.name == "chatledger.settle"]
    assert (settles[-1].attributes or {})["chatledger.settle.found"] is True
    assert otel.total("chatledger.settles", **{"chatledger.settle.found": True}) >= 1
    assert otel.total("chatledger.outcomes.unknown") == 0
    assert span.status.is_ok and (span.attributes or {})["chatledger.sequence.last"] == 2


async def test_an_unknown_outcome_is_counted(
    otel: Telemetry, proxy: Proxy, server_url: URL, session_id: str
) -> None:
    storage = LedgerSessionStorage(proxy.url(server_url), retry_timeout=2)
    try:
        await storage.ledger.ensure_ready()
        proxy.arm("drop-after-commit", refuse_after=True)
        with pytest.raises(OutcomeUnknown):
            await asyncio.wait_for(storage.append(session_id, "r", UserMessage(content="m1")), TIMEOUT)
    finally:
        await storage.close()
    (span,) = otel.finished("chatledger.zett.append")
    assert (span.attributes or {})["error.type"] == "OutcomeUnknown"
    assert "chatledger.outcome_unknown" in [event.name for event in span.events]
    assert otel.total("chatledger.outcomes.unknown") == 1


# -- SQL-level spans, as docs/telemetry.md turns them on ------------------------------------


async def test_sqlalchemy_instrumentation_nests_sql_spans_under_chatledgers(
    otel: Telemetry, database: Database, session_id: str
) -> None:
    from opentelemetry.instrumentation.sqlalchemy import SQLAlchemyInstrumentor

    async with LedgerSessionStorage(database.url) as storage:
        await storage.ledger.ensure_ready()
        instrumentor = SQLAlchemyInstrumentor()
        # skip_dep_check: the instrumentation declares SQLAlchemy < 2.1 (see docs/telemetry.md)
        instrumentor.instrument(engine=storage.ledger.engine.sync_engine, skip_dep_check=True)
        try:
            await storage.append(session_id, "r", UserMessage(content="SECRET-sql"))
        finally:
            instrumentor.uninstrument()
    (append,) = otel.finished("chatledger.zett.append")
    parent_id = append.context.span_id
    children = [span for span in otel.finished() if span.parent and span.parent.span_id == parent_id]
    assert children, [span.name for span in otel.finished()]


def test_without_opentelemetry_the_no_op_path_is_chosen_at_import(tmp_path: Any) -> None:
    script = f"""
import asyncio, sys
sys.modules["opentelemetry"] = None  # as if opentelemetry-api were not installed
from chatledger import telemetry
from chatledger.zett import LedgerSessionStorage
from zett_agent.messages import UserMessage
assert telemetry.ENABLED is False and telemetry.operation is telemetry._no_operation
async def main():
    async with LedgerSessionStorage("sqlite:///{tmp_path}/plain.sqlite3") as storage:
        assert await storage.append("s", "r", UserMessage(content="x")) == 1
        assert len((await storage.load("s")).raw_tail) == 1
asyncio.run(main())
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    assert telemetry.ENABLED  # this process has it
