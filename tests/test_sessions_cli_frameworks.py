"""``chatledger sessions list / show`` on every backend, for the OpenAI Agents SDK's
sessions and Google ADK's beside zett's and rein's: the framework named, each
framework's items readable, one id in four frameworks shown four times, no collision."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rein.ir import Message
from rein.session import Session

from chatledger.adk import LedgerSessionService
from chatledger.dsn import DSN_ENV
from chatledger.migrate import upgrade_database
from chatledger.openai_agents import LedgerSession
from chatledger.rein import LedgerSessionStore
from chatledger.testing.adk import event
from chatledger.tools.cli import run
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.fresh import fresh_database

pytestmark = [pytest.mark.one_transaction_at_a_time, pytest.mark.dialect_only]

#: The id every framework has a session of.
SHARED = "shared-id"

ITEMS = [
    {"role": "user", "content": "weather in Zürich?"},
    {"type": "function_call", "name": "weather", "arguments": '{"city": "Zürich"}', "call_id": "c1"},
    {"type": "function_call_output", "call_id": "c1", "output": "rain, 12 °C"},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It rains."}]},
    {"role": "user", "content": "retracted question"},
]


@pytest.fixture(autouse=True)
def no_env_dsn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(DSN_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


@pytest.fixture
async def dsn(database: Database, tmp_path: Path) -> AsyncIterator[str]:
    """A fresh migrated database with a session of id :data:`SHARED` in each framework
    (two in ADK: apps ``shop`` and ``bank``), an OpenAI session ``openai-only`` and a
    cleared OpenAI session ``openai-cleared``."""
    async with fresh_database(database.server, tmp_path, prefix="chatledger_frameworks") as url:
        await upgrade_database(url)
        async with LedgerSessionStorage(url) as storage:
            await storage.create_session(session_id=SHARED)
        async with LedgerSessionStore(url) as store:
            await store.asave(SHARED, Session(messages=[Message(role="user", content="rein says hi")]))
        text = url.render_as_string(hide_password=False)
        session = LedgerSession.from_url(SHARED, url=text)
        try:
            await session.add_items(ITEMS)
            assert await session.pop_item() == ITEMS[-1]
            await LedgerSession("openai-only", ledger=session.ledger).add_items(
                [{"role": "user", "content": "x"}]
            )
            cleared = LedgerSession("openai-cleared", ledger=session.ledger)
            await cleared.add_items([{"role": "user", "content": "gone"}])
            await cleared.clear_session()
        finally:
            await session.close()
        async with LedgerSessionService(url) as service:
            for app, user in (("shop", "ann"), ("bank", "bob")):
                made = await service.create_session(
                    app_name=app,
                    user_id=user,
                    session_id=SHARED,
                    state={"step": 1, "app:theme": f"{app}-dark", "user:lang": "de", "temp:scratch": 1},
                )
                await service.append_event(made, event(f"hello {app}", {"cart": ["tea"], "temp:t": 2}))
                await service.append_event(made, event(f"welcome to {app}", author="clerk"))
        yield text


async def test_list_names_each_framework_with_its_counts(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await run(["sessions", "list", "--dsn", dsn, "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [row["id"] for row in listing["zett"]] == [SHARED]
    assert [row["id"] for row in listing["rein"]] == [SHARED]
    openai = {row["id"]: (row["items"], row["popped"]) for row in listing["openai"]}
    assert openai == {SHARED: (4, 1), "openai-only": (1, 0)}  # the cleared one is empty: not listed
    assert [row["id"] for row in listing["openai"]] == ["openai-only", SHARED]  # newest activity first
    adk = [(row["app_name"], row["user_id"], row["id"], row["events"]) for row in listing["adk"]]
    assert adk == [("bank", "bob", SHARED, 2), ("shop", "ann", SHARED, 2)]  # key order

    assert await run(["sessions", "list", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert "openai sessions, newest activity first" in out and "adk sessions, by app, user and id" in out
    assert "bank" in out and "bob" in out and "zett sessions" in out and "rein sessions" in out

    for kind in ("openai", "adk"):
        assert await run(["sessions", "list", "--dsn", dsn, "--json", "--kind", kind, "--limit", "1"]) == 0
        listing = json.loads(capsys.readouterr().out)
        assert list(listing) == [kind] and len(listing[kind]) == 1


async def test_show_prints_every_framework_of_one_id(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert await run(["sessions", "show", SHARED, "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    for heading in (
        f"zett session {SHARED}",
        f"rein session {SHARED}",
        f"openai session {SHARED}",
        f"adk session {SHARED} (app 'bank', user 'bob')",
        f"adk session {SHARED} (app 'shop', user 'ann')",
    ):
        assert out.count(heading) == 1, heading
    openai = out.split(f"openai session {SHARED}")[1].split("adk session")[0]
    assert "4 (1 popped, not shown)" in openai and "retracted question" not in openai
    assert "user       weather in Zürich?" in openai
    assert '-> weather({"city": "Zürich"})' in openai
    assert "tool       weather: rain, 12 °C" in openai  # the output named by its call
    assert "assistant  It rains." in openai
    shop = out.split("(app 'shop', user 'ann')")[1]
    state = next(line for line in shop.splitlines() if line.startswith("  state "))
    assert json.loads(state.split(None, 1)[1]) == {"step": 1, "cart": ["tea"]}  # deltas merged in
    assert 'app: state  {"app:theme": "shop-dark"}' in shop and 'user: state {"user:lang": "de"}' in shop
    assert "temp:" not in out
    assert "user       hello shop" in shop and "state delta: cart" in shop
    assert "clerk      welcome to shop" in shop and "hello bank" not in shop


async def test_show_narrows_and_limits(dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["sessions", "show", SHARED, "--dsn", dsn, "--kind", "adk", "--app", "shop", "--messages", "1"]
    assert await run(args) == 0
    out = capsys.readouterr().out
    assert "(app 'shop', user 'ann')" in out and "bank" not in out and "openai session" not in out
    assert "events (2), the last 1 (--messages N shows more)" in out and "hello shop" not in out
    assert await run([*args[:-4], "--user", "nobody"]) == 1
    assert f"no session {SHARED!r}" in capsys.readouterr().out

    assert await run(["sessions", "show", SHARED, "--dsn", dsn, "--kind", "openai", "--messages", "2"]) == 0
    out = capsys.readouterr().out
    assert "items (4), the last 2" in out and "It rains." in out and "Zürich?" not in out
    assert "zett session" not in out and "adk session" not in out
    # A cleared session has no items: it is not there, as the SDK sees it.
    assert await run(["sessions", "show", "openai-cleared", "--dsn", dsn]) == 1


@pytest.mark.parametrize(
    ("kind", "module", "note"),
    [
        ("openai", "chatledger.openai_agents", "openai-agents is not installed, so openai sessions"),
        ("adk", "chatledger.adk", "google-adk is not installed, so adk sessions"),
    ],
)
async def test_a_framework_whose_extra_is_missing_is_said_so(
    dsn: str,
    kind: str,
    module: str,
    note: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # as if the extra were not installed
    assert await run(["sessions", "list", "--dsn", dsn]) == 0
    out = capsys.readouterr().out
    assert note in out and f"{kind} sessions, " not in out and "zett sessions" in out
    assert await run(["sessions", "show", SHARED, "--dsn", dsn, "--kind", kind]) == 1
    assert note in capsys.readouterr().out
