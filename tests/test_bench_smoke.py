"""A tiny run of the benchmark (``bench/bench.py``, :mod:`chatledger.tools.bench`) on SQLite,
so that it keeps working: every measurement runs, the report and its JSON are
complete, chatledger's concurrent appends come back clean, and nothing is left behind.
The frameworks' section (:mod:`chatledger.tools.bench.frameworks`) runs tiny on every
target. Smoke only: no assertion on a timing.
"""

from __future__ import annotations

import argparse
import io
import json
import random
from pathlib import Path

import pytest
from rich.console import Console

from chatledger.dsn import resolve_dsn
from chatledger.tools.bench import CONTENDERS, STORES, BenchReport, Sizes, configure, markdown, run_bench
from chatledger.tools.bench.frameworks import measure_frameworks
from chatledger.tools.bench.measure import _baseline_job, _in_process
from chatledger.tools.bench.report import framework_notes, framework_rows

from .conftest import Database

pytestmark = pytest.mark.dialect_only

TINY = Sizes(
    append_rounds=2,
    append_batch=5,
    warmup=1,
    tail=5,
    load_messages=(50, 200),
    load_rounds=2,
    list_sessions=(20, 60),
    list_rounds=2,
    page=20,
    processes=2,
    process_appends=4,
    agent_loads=(5, 20),
    agent_sessions=3,
    agent_appends=2,
    transfer_sessions=3,
    transfer_messages=60,
    framework_rounds=2,
    framework_items=12,
    framework_tasks=3,
    framework_writes=3,
    seen_sizes=("20", "mix"),
    seen_rounds=2,
    seen_appends=3,
    seen_tasks=(1, 3),
    seen_task_appends=2,
    seen_processes=(2,),
    seen_process_appends=3,
)


def _entries(directory: Path) -> list[Path]:
    return list(directory.iterdir())


async def test_a_tiny_run_measures_everything_and_cleans_up(tmp_path: Path) -> None:
    output = io.StringIO()
    report = await run_bench([f"sqlite:///{tmp_path}/"], TINY, Console(file=output, width=150), seed=6)

    (backend,) = report.backends
    assert backend.backend == "sqlite" and backend.server_version.startswith("SQLite")
    assert not backend.replicas.runs and "no replicas given" in backend.replicas.note
    assert "load throughput on read replicas: not measured" in output.getvalue()
    assert set(backend.append) == {*CONTENDERS, "chatledger, synchronous=NORMAL"}
    assert all(len(stats.round_per_second) == TINY.append_rounds for stats in backend.append.values())
    for stats in backend.append.values():  # every contender's breakdown, from its instrumented round
        assert stats.breakdown is not None
        assert stats.breakdown.cpu_ms > 0 and stats.breakdown.driver_ms > 0
        assert stats.breakdown.cpu_ms + stats.breakdown.waiting_ms >= stats.breakdown.wall_ms * 0.5
    assert backend.append["chatledger"].breakdown.statements == 1  # the insert (sqlite3 begins; 0007 trigger)
    assert backend.append["floor"].breakdown.statements == 2  # BEGIN, insert
    ours, floor = backend.append["chatledger"].breakdown, backend.append["floor"].breakdown
    assert (ours.round_trips, ours.hops) == (5, True) and floor.round_trips > 5, (ours, floor)
    assert "1 statements, 5 thread hops" in backend.targets[0].reason
    assert "CPU of the event loop's thread" in backend.targets[0].reason
    for store in STORES:
        assert set(backend.load[store]) == {"5", "50", "200"}
        assert set(backend.list_sessions[store]) == {"20", "60"}
        assert set(backend.concurrent[store]) == {"one session", "own sessions"}
    for run in backend.concurrent["chatledger"].values():
        assert (run.acknowledged, run.errors, run.gaps, run.duplicates, run.lost) == (8, 0, 0, 0, 0)
    assert backend.concurrent["chatledger"]["own sessions"].sessions == 2
    transfer = backend.transfer
    assert transfer is not None and (transfer.sessions, transfer.messages) == (3, 180)
    assert transfer.import_peak_mib >= transfer.baseline_peak_mib > 0 and transfer.file_mib > 0
    assert [target.name for target in backend.targets] == [
        "append_vs_floor",
        "append_vs_zett",
        "load_o_tail",
        "list_o_page",
        "warm_load_5",
        "warm_load_20",
        "cold_load_20",
    ]
    assert set(backend.agent_load) == {"5", "20"}
    for kinds in backend.agent_load.values():
        assert set(kinds) == {"cold", "cold floor", "warm", "warm floor"}
        assert all(stats.samples == TINY.agent_sessions for stats in kinds.values())
    assert all("in the driver" in target.reason for target in backend.targets[4:])
    seen = backend.seen  # the appends as users see them: every contender of every run, every round
    assert [run.label for run in seen.sizes] == ["20", "mix"]
    assert [run.label for run in seen.tasks] == ["1", "3"] and [run.label for run in seen.processes] == ["2"]
    assert 20 == seen.sizes[0].content_bytes < 1000 < seen.sizes[1].content_bytes
    assert set(seen.sizes[0].contenders) == {"chatledger", "naive floor", "tuned floor"}
    for run in [*seen.sizes, *seen.tasks, *seen.processes]:
        for stats in run.contenders.values():
            assert len(stats.round_per_second) == len(stats.round_cpu_ms) == TINY.seen_rounds
            assert stats.cpu_ms > 0 and 0 < stats.p50_ms <= stats.p99_ms
    assert set(seen.tasks[1].contenders) == {
        f"{kind}, {mode}"
        for kind in ("chatledger", "naive floor")
        for mode in ("one session", "own sessions")
    }
    assert [target.name for target in backend.seen_targets] == ["seen_size_20", "seen_size_mix"]

    printed = output.getvalue()
    assert "append throughput" in printed and "list_sessions 20 of 60" in printed
    assert "load warm 20+2, p50 / p95 ms" in printed
    assert "default/synchronous=NORMAL" in printed
    assert "appends by size" in printed and "mix (mean" in printed and "3 tasks, one session" in printed
    assert "2 processes, own sessions, appends/s" in printed and "CPU / wall per append, ms" in printed
    assert "import, 180 messages, /s" in printed and "peak memory, MiB" in printed
    assert "PASS" in printed or "MISS" in printed
    assert "frameworks" in printed and "get_items(20), /s" in printed and "SQLiteSession" in printed
    assert {store.name for store in backend.frameworks.stores} == {
        "LedgerSession",
        "SQLAlchemySession",
        "SQLiteSession",
        "LedgerSessionService",
        "DatabaseSessionService",
        "LedgerSaver",
        "AsyncSqliteSaver",
    }
    data = json.loads(json.dumps(report.to_json()))
    assert data["machine"]["cores"] and data["machine"]["python"]
    assert {"met", "value", "bound"} <= set(data["backends"][0]["targets"][0])
    assert BenchReport.from_json(data) == report
    table = markdown(report)
    assert "| 20 B, appends/s |" in table and "| 3 tasks, one session / own sessions |" in table
    assert "| append throughput, /s |" in table and "**sqlite: SQLite" in table
    assert "| OpenAI Agents add_items, 2 items, /s |" in table and "| ADK append_event, /s |" in table
    assert "| LangGraph put, /s |" in table and "| LangGraph get_tuple latest, thread of 60, /s |" in table
    assert not any(path.name.startswith("chatledger-bench-") for path in _entries(tmp_path))


#: Resident memory the parent holds while it spawns the child, MiB: far above what the
#: child's own modules take.
BALLAST_MIB = 512


async def test_a_spawned_child_reports_its_own_peak_memory() -> None:
    """The export, import and idle processes each report their own peak: not the
    parent's resident size at the fork, which Linux's ``ru_maxrss`` carries over exec."""
    ballast = bytearray(BALLAST_MIB * 2**20)
    pages = range(0, len(ballast), 4096)
    ballast[::4096] = b"\x01" * len(pages)  # every page written: resident
    peak = await _in_process(_baseline_job)
    assert 0 < peak < BALLAST_MIB / 2
    assert ballast[0] == 1  # held, resident, until the child has reported


def test_the_arguments() -> None:
    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(["--dsn", "sqlite:///x/", "--dsn", "mysql://root@h/mysql", "--quick"])
    assert args.dsn == ["sqlite:///x/", "mysql://root@h/mysql"] and args.quick
    assert args.json is None and args.markdown is None


async def test_the_frameworks_section_runs_and_reports_its_rows(database: Database, tmp_path: Path) -> None:
    """Each framework's own store and chatledger's adapter, tiny, on every backend: every
    store that could be set up is timed on every call, chatledger's come back clean
    from the concurrency round, and every row is reported."""
    admin = database.server.admin_url if database.server is not None else f"sqlite:///{tmp_path}/"
    said: list[str] = []
    result = await measure_frameworks(resolve_dsn(admin), TINY, random.Random(3), said.append)
    assert not result.note and len(said) == 3
    by_name = {store.name: store for store in result.stores}
    own = {"SQLAlchemySession", "DatabaseSessionService"} | (
        {"SQLiteSession"} if database.server is None else set()
    )
    # LangGraph: LedgerSaver and the backend's own saver (one of them).
    langgraph = [store for store in result.stores if store.framework == "LangGraph"]
    assert [store.ours for store in langgraph] == [True, False], langgraph
    assert langgraph[1].name in {"AsyncPostgresSaver", "AsyncSqliteSaver", "AIOMySQLSaver"}
    assert set(by_name) == {"LedgerSession", "LedgerSessionService", "LedgerSaver", langgraph[1].name, *own}
    openai = {"add_items, 2 items", "get_items(), 12 items", "get_items(20)"}
    adk = {"append_event", "get_session, 12 events", "get_session, newest 20"}
    saver = {
        "put",
        "put_writes, 2 writes",
        "get_tuple latest, thread of 10",
        "get_tuple latest, thread of 60",
        "get_tuple by id",
        "list(limit=10)",
    }
    assert set(langgraph[0].timings) == saver
    for store in result.stores:
        if store.note.startswith("not measured"):  # a framework's own store it could not set up
            assert not store.ours and not store.timings, store.note
            continue
        if store.framework == "LangGraph":
            assert set(store.timings) == saver and store.concurrency is None, store.name
            continue
        assert set(store.timings) == (openai if store.framework == "OpenAI Agents" else adk), store.name
        run = store.concurrency
        assert run is not None and run.attempted == 9 and run.tasks == 3
        assert run.acknowledged + run.refused + run.errors == run.attempted
    for name in ("LedgerSession", "LedgerSessionService"):
        run = by_name[name].concurrency
        assert run is not None and (run.errors, run.lost, run.duplicates) == (0, 0, 0), run
    ledger_session = by_name["LedgerSession"].concurrency
    assert ledger_session is not None and ledger_session.acknowledged == 9
    sdk = by_name["SQLAlchemySession"]
    assert sdk.timings or "cannot create tables" in sdk.note
    rows = framework_rows(result)
    # A row per chatledger call and own store measuring it; chatledger's alone where none did.
    expected = sum(
        max(
            1,
            sum(
                label in own.timings
                for own in result.stores
                if own.framework == ours.framework and not own.ours
            ),
        )
        for ours in result.stores
        if ours.ours
        for label in ours.timings
    )
    assert len([row for row in rows if row[0].endswith(", /s")]) == expected
    assert all(row[3] in by_name or row[3] == "not measured" for row in rows)
    notes = framework_notes(result)
    assert all(any(store.name in line for line in notes) for store in result.stores if store.note)


def test_the_contents_are_the_same_every_run_and_of_their_sizes() -> None:
    """The appends as users see them append generated messages: fixed sizes exactly,
    and the mix an agent transcript's turns, the same on every run."""
    from zett_agent.messages import AssistantMessage, ToolMessage, UserMessage

    from chatledger.tools.bench.seen import MIX, SIZES, contents

    for label in SIZES:
        messages = contents(label, 5)
        assert [len(message.text.encode()) for message in messages] == [int(label)] * 5
        assert len({message.text for message in messages}) == 5
    mix = contents(MIX)
    assert [m.content for m in mix] == [m.content for m in contents(MIX)]
    sizes = {
        kind: [len(m.content) for m in mix if isinstance(m, kind)] for kind in (UserMessage, AssistantMessage)
    }
    assert isinstance(mix[0], UserMessage) and all(200 <= size <= 600 for size in sizes[UserMessage])
    assert all(1_000 <= size <= 2_000 for size in sizes[AssistantMessage])
    tools = [len(m.content) for m in mix if isinstance(m, ToolMessage)]
    assert tools and all(4_000 <= size <= 40_000 for size in tools)


def test_the_sizes_refuse_what_the_appends_as_users_see_them_cannot_run() -> None:
    for bad in ({"seen_sizes": ("20", "1k")}, {"seen_tasks": (0,)}, {"seen_rounds": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            Sizes(**bad)  # type: ignore[arg-type]
