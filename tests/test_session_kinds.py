"""Every registered kind of session (:mod:`chatledger.kinds`), named by every tool, on
every backend: ``stats`` counts each kind's sessions and tables and sizes chatledger's
own tables only (on a database shared with another application too), ``retention``
takes ``--kind`` repeated or ``all``, and ``stats``, ``sessions list``, a retention dry
run and an export name each kind."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from rein.ir import Message
from rein.session import Session
from sqlalchemy import Column, Integer, MetaData, Table, Text
from sqlalchemy.engine import URL, Connection
from zett_agent.messages import UserMessage

from chatledger import kinds, retention
from chatledger.adk import LedgerSessionService
from chatledger.dsn import DSN_ENV
from chatledger.engine import Ledger
from chatledger.langgraph import LedgerSaver
from chatledger.migrate import run_on_connection, upgrade_database
from chatledger.openai_agents import LedgerSession
from chatledger.openai_agents import items as openai_items
from chatledger.rein import LedgerSessionStore
from chatledger.stats import SessionSize, read_stats
from chatledger.testing.adk import event
from chatledger.tools.cli import run
from chatledger.tools.transfer import export
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.langgraph_graphs import agent, config, question
from .support.schema_helpers import fresh_database

#: Another application's table in the same database: never chatledger's to count or size.
FOREIGN = Table(
    "other_app_notes",
    MetaData(),
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("body", Text),
)


@pytest.fixture(autouse=True)
def no_env_dsn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(DSN_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


@pytest.fixture
async def filled(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    """A fresh database at head holding a session of every kind: zett ``z`` (2 messages),
    rein ``r``; OpenAI ``o`` (3 items, one popped) and ``gone`` (deleted); ADK ``a`` of
    app ``shop``, user ``ann`` (2 events, ``app:`` and ``user:`` state) and ``gone``
    (deleted); LangGraph thread ``g`` (5 checkpoints) and ``gone`` (deleted); and
    another application's table with rows of its own."""
    async with fresh_database(database, tmp_path, "kinds") as url:
        await upgrade_database(url)
        async with LedgerSessionStorage(url) as storage:
            for text in ("hello", "again"):
                await storage.append("z", "r", UserMessage(content=text))
        async with LedgerSessionStore(url) as store:
            await store.asave("r", Session(messages=[Message(role="user", content="hi")]))
        ledger = Ledger(url)
        try:
            openai = LedgerSession("o", ledger=ledger)
            await openai.add_items([{"role": "user", "content": f"item {n}"} for n in range(3)])
            await openai.pop_item()
            await LedgerSession("gone", ledger=ledger).add_items([{"role": "user", "content": "x"}])
            assert await openai_items.delete_session(ledger, "gone")
        finally:
            await ledger.close()
        async with LedgerSessionService(url) as service:
            made = await service.create_session(
                app_name="shop", user_id="ann", session_id="a", state={"app:theme": "dark", "user:lang": "de"}
            )
            await service.append_event(made, event("hello"))
            await service.append_event(made, event("again", {"cart": 1}))
            await service.create_session(app_name="shop", user_id="ann", session_id="gone")
            await service.delete_session(app_name="shop", user_id="ann", session_id="gone")

        async with LedgerSaver.from_url(url) as saver:
            await agent(saver).ainvoke(question(1, 2), config("g"))
            await agent(saver).ainvoke(question(2, 2), config("gone"))
            await saver.adelete_thread("gone")

        def other_application(connection: Connection) -> None:
            FOREIGN.create(connection)
            connection.execute(FOREIGN.insert(), [{"id": n, "body": "x" * 2000} for n in range(1, 201)])

        await run_on_connection(url, other_application)
        yield url


async def test_stats_counts_every_kind_and_sizes_only_chatledgers_tables(filled: URL) -> None:
    """Fault 10: ``stats`` left out the OpenAI Agents and ADK sessions and tables, and its
    total summed the tables it listed (or, on SQLite without ``dbstat``, the whole file)
    without saying what it covered."""
    stats = await read_stats(filled, largest=1)
    assert [found.name for found in stats.frameworks] == list(kinds.names())
    openai, adk = stats.framework("openai"), stats.framework("adk")
    assert openai.counts == {"sessions": 1, "deleted": 1, "items": 2, "popped": 1}
    assert openai.tables == ["openai_sessions", "openai_items"]
    assert openai.largest == [SessionSize("o", 3)] and "popped" in openai.largest_by
    assert adk.counts == {"sessions": 1, "deleted": 1, "events": 2, "app_states": 1, "user_states": 1}
    assert adk.tables == ["adk_sessions", "adk_events", "adk_app_states", "adk_user_states"]
    assert adk.largest == [SessionSize("shop/ann/a", 2)] and adk.largest_by == "events"
    assert stats.framework("zett").counts["raw_messages"] == 2
    assert stats.framework("rein").counts["sessions"] == 1
    langgraph = stats.framework("langgraph")
    assert {name: langgraph.counts[name] for name in ("sessions", "deleted", "checkpoints", "writes")} == {
        "sessions": 1,
        "deleted": 1,
        "checkpoints": 5,
        "writes": langgraph.counts["writes"],
    }
    assert langgraph.counts["blobs"] > 0 and langgraph.counts["writes"] > 0
    assert langgraph.tables == [
        "langgraph_threads",
        "langgraph_checkpoints",
        "langgraph_blobs",
        "langgraph_writes",
    ]
    if stats.size.tables:  # every backend here but a SQLite built without dbstat
        every = {table.name for kind in kinds.registered() for table in kind.tables}
        assert every <= set(stats.size.tables) and "high_water_marks" in stats.size.tables
        assert FOREIGN.name not in stats.size.tables
        assert stats.size.total == sum(stats.size.tables.values())
        assert stats.total_covers.startswith(f"chatledger's {len(stats.size.tables)} tables")
    else:
        assert "whole database file" in stats.total_covers


async def test_the_stats_command_names_every_kind_and_what_its_total_covers(
    filled: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = filled.render_as_string(hide_password=False)
    assert await run(["stats", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    for kind in kinds.registered():
        assert kind.name in out, kind.name
    for line in (
        "largest openai sessions, by items",
        "largest adk sessions, by events",
        "openai_items",
        "total",
    ):
        assert line in out, line
    assert "chatledger's" in out or "whole database file" in out
    assert FOREIGN.name not in out


async def test_retention_takes_kind_repeated_and_all(filled: URL, capsys: pytest.CaptureFixture[str]) -> None:
    """Fault 11: ``retention --kind openai --kind adk`` kept only the last kind, and no
    word named every kind."""
    dsn = filled.render_as_string(hide_password=False)
    purge = ["retention", "--dsn", dsn, "--tombstones-after", "0s", "--dry-run", "--json"]
    assert await run([*purge, "--kind", "openai", "--kind", "adk"]) == 0
    assert json.loads(capsys.readouterr().out)["tombstones"] == {"openai": 1, "adk": 1}
    assert await run([*purge, "--kind", "all"]) == 0
    assert json.loads(capsys.readouterr().out)["tombstones"] == {
        "zett": 0,
        "rein": 0,
        "openai": 1,
        "adk": 1,
        "langgraph": 1,
    }
    assert await run([*purge]) == 0  # unless named: the kinds retained by default
    assert json.loads(capsys.readouterr().out)["tombstones"] == {"zett": 0, "rein": 0}
    with pytest.raises(SystemExit):
        await run([*purge, "--kind", "crew"])
    assert "invalid choice: 'crew'" in capsys.readouterr().err

    policy = retention.Policy(tombstones_after=timedelta(0))
    done = await retention.apply(filled, policy, kinds=["openai", "adk", "openai"])
    assert done.tombstones == {"openai": 1, "adk": 1}
    with pytest.raises(ValueError, match="kinds must name some of"):
        await retention.apply(filled, policy, kinds=[])


async def test_every_tool_names_every_kind(
    filled: URL, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``stats``, ``sessions list``, a retention dry run and an export each name every
    registered kind."""
    dsn = filled.render_as_string(hide_password=False)
    names = list(kinds.names())

    assert await run(["stats", "--dsn", dsn, "--json"]) == 0
    assert list(json.loads(capsys.readouterr().out)["frameworks"]) == names

    assert await run(["sessions", "list", "--dsn", dsn, "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert list(listing) == names and all(listing[name] for name in names)
    assert await run(["sessions", "list", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert all(f"{name} sessions" in out for name in names)
    assert await run(["sessions", "list", "--dsn", dsn, "--json", "--kind", "adk", "--kind", "zett"]) == 0
    assert list(json.loads(capsys.readouterr().out)) == ["zett", "adk"]

    assert await run(["retention", "--dsn", dsn, "--idle", "0s", "--kind", "all", "--dry-run", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert set(said["sessions"]) == set(names) and all(said["sessions"][name] >= 1 for name in names)
    assert await run(["retention", "--dsn", dsn, "--idle", "0s", "--kind", "all", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert all(f"{name}: would delete" in out for name in names)

    output = io.StringIO()
    counts = await export(filled, output)
    lines = [json.loads(line) for line in output.getvalue().splitlines()]
    types = {str(record.get("type")) for record in lines[1:]}
    for kind in kinds.registered():
        travelling = {
            record: table for layout in kind.records for record, table in kinds.record_tables(layout).items()
        }
        assert {table.name for table in travelling.values()} <= set(lines[0]["tables"]), kind.name
        assert set(travelling) & types, kind.name
    assert counts["openai_sessions"] == 2 and counts["adk_sessions"] == 2 and counts["adk_states"] == 2
    assert counts["langgraph_threads"] == 2 and counts["langgraph_checkpoints"] == 5
    assert await run(["export", "--dsn", dsn, "-o", str(tmp_path / "kinds.jsonl")]) == 0
    summary = capsys.readouterr().out
    assert all(f"{kind.label} session" in summary for kind in kinds.registered()), summary
