"""``chatledger export``, ``import`` and ``copy`` of OpenAI Agents SDK and ADK sessions,
between every pair of backends: written through the adapters (a pop, a clear, ADK's
``app:``/``user:`` state and a deleted session), carried exactly (the target's export
is the source's, row for row), read back the same by the adapters, numbered on after
the import, and idempotent (a re-import is all identical; a differing one is counted).
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import URL

from chatledger.adk import LedgerSessionService
from chatledger.engine import Ledger
from chatledger.migrate import upgrade_database
from chatledger.openai_agents import LedgerSession
from chatledger.testing.adk import event
from chatledger.tools import export as exporting
from chatledger.tools import importer
from chatledger.tools.cli import run
from chatledger.tools.transfer import FormatError, copy, export, import_file

from .conftest import Database
from .support.backends import BACKENDS, Servers
from .support.facts import facts_of
from .support.fresh import fresh_database

pytestmark = pytest.mark.dialect_only

OPENAI_IDS = ["oa-popped", "oa-cleared", "oa-again"]
APP = "shop"
#: (user, session id) of the ADK sessions that stay; "gone" is deleted.
ADK_KEYS = [("u1", "s-one"), ("u2", "s-two")]


def dsn_of(url: URL) -> str:
    return url.render_as_string(hide_password=False)


@pytest.fixture
async def source(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    async with fresh_database(database.server, tmp_path, prefix="chatledger_src") as url:
        await upgrade_database(url)
        yield url


@pytest.fixture(params=BACKENDS)
async def target(request: pytest.FixtureRequest, servers: Servers, tmp_path: Path) -> AsyncIterator[URL]:
    backend: str = request.param
    server = None
    if facts_of(backend).server:
        found = servers.get(backend)
        if isinstance(found, str):
            pytest.skip(f"{backend} unavailable: {found}")
        server = found
    async with fresh_database(server, tmp_path, prefix="chatledger_dst") as url:
        await upgrade_database(url)
        yield url


@pytest.fixture
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages, cursor fetches and insert batches of a few rows: every boundary is crossed."""
    monkeypatch.setattr(exporting, "PAGE", 1)
    monkeypatch.setattr(exporting, "YIELD_PER", 2)
    monkeypatch.setattr(importer, "BATCH_ROWS", 2)
    monkeypatch.setattr(importer, "CHUNK", 3)


async def fill(url: URL) -> None:
    """OpenAI sessions with a pop, a clear, and a clear then an add; ADK sessions with
    session, ``app:``, ``user:`` and ``temp:`` state, and one deleted."""
    ledger = Ledger(url)
    try:
        popped, cleared, again = (LedgerSession(id, ledger=ledger) for id in OPENAI_IDS)
        await popped.add_items([{"role": "user", "content": f"turn {n} 🌦"} for n in range(3)])
        assert (await popped.pop_item()) == {"role": "user", "content": "turn 2 🌦"}
        await popped.add_items([{"role": "assistant", "content": "Zürich: 12 °C"}])
        await cleared.add_items([{"role": "user", "content": "forget me"}])
        await cleared.clear_session()
        await again.add_items([{"role": "user", "content": "first"}, {"role": "user", "content": "second"}])
        await again.clear_session()
        await again.add_items([{"role": "user", "content": "after the clear"}])
    finally:
        await ledger.close()
    async with LedgerSessionService(url) as service:
        one = await service.create_session(
            app_name=APP, user_id="u1", session_id="s-one", state={"k": 1, "app:theme": "dark"}
        )
        await service.append_event(one, event("hello", {"user:lang": "de", "temp:scratch": 1}))
        await service.append_event(one, event("cart", {"user:cart": ["tea"], "step": 2}, author="shop"))
        two = await service.create_session(app_name=APP, user_id="u2", session_id="s-two")
        await service.append_event(
            two, event("hi", {"app:motd": "sale", "user:name": "Bo"}, timestamp=1_700_000_000.25)
        )
        gone = await service.create_session(app_name=APP, user_id="u1", session_id="gone")
        await service.append_event(gone, event("bye"))
        await service.delete_session(app_name=APP, user_id="u1", session_id="gone")


async def read_back(url: URL) -> dict[str, Any]:
    """What the adapters read: every OpenAI session's items, every ADK session's events,
    state and marker, the listing."""
    ledger = Ledger(url)
    try:
        items = {id: await LedgerSession(id, ledger=ledger).get_items() for id in OPENAI_IDS}
    finally:
        await ledger.close()
    async with LedgerSessionService(url) as service:
        sessions = {}
        for user, id in ADK_KEYS:
            found = await service.get_session(app_name=APP, user_id=user, session_id=id)
            assert found is not None
            sessions[id] = (
                [item.model_dump(mode="json") for item in found.events],
                found.state,
                found.last_update_time,
            )
        assert await service.get_session(app_name=APP, user_id="u1", session_id="gone") is None
        listed = await service.list_sessions(app_name=APP)
    return {
        "items": items,
        "adk": sessions,
        "listed": sorted((item.user_id, item.id) for item in listed.sessions),
    }


async def export_of(url: URL) -> list[Any]:
    """The export's records without the header's per-run fields."""
    output = io.StringIO()
    await export(url, output)
    lines = [json.loads(line) for line in output.getvalue().splitlines()]
    header = {key: value for key, value in lines[0].items() if key not in ("exported_at", "backend")}
    # Each backend orders ids its own way (bytes, collation): compare as a multiset of records.
    return [header, *sorted(lines[1:], key=lambda record: json.dumps(record, sort_keys=True))]


async def write_file(url: URL, directory: Path) -> Path:
    output = io.StringIO()
    await export(url, output)
    path = directory / "frameworks.jsonl"
    path.write_text(output.getvalue(), encoding="utf-8")
    return path


@pytest.mark.usefixtures("small_pages")
async def test_framework_sessions_travel_exactly_and_number_on(
    source: URL, target: URL, tmp_path: Path
) -> None:
    await fill(source)
    original = await export_of(source)
    ends = [record for record in original if record.get("type") == "end"]
    assert ends and {key: ends[0][key] for key in ("openai_sessions", "openai_items")} == {
        "openai_sessions": 3,
        "openai_items": 5,  # 4 of the popped one (one retracted) and 1 after the clear
    }
    assert (ends[0]["adk_sessions"], ends[0]["adk_events"], ends[0]["adk_states"]) == (3, 3, 3)
    path = await write_file(source, tmp_path)

    report = await import_file(target, str(path))
    assert report.clean and report.imported == 6
    openai, adk = report.frameworks["OpenAI Agents"], report.frameworks["ADK"]
    assert (openai.imported, openai.entries, openai.tombstones) == (3, 5, 1)
    assert (adk.imported, adk.entries, adk.tombstones, adk.states) == (3, 3, 1, 3)
    assert await export_of(target) == original
    assert await read_back(target) == await read_back(source)

    # The adapters carry on in the target as in the source: the next sequence, the pop
    # of the newest live item, a Session object's marker.
    ledger = Ledger(target)
    try:
        popped = LedgerSession(OPENAI_IDS[0], ledger=ledger)
        assert await popped.pop_item() == {"role": "assistant", "content": "Zürich: 12 °C"}
        assert await popped.pop_item() == {"role": "user", "content": "turn 1 🌦"}
        await popped.add_items([{"role": "user", "content": "next"}])
        cleared = LedgerSession(OPENAI_IDS[1], ledger=ledger)
        assert await cleared.get_items() == []
        await cleared.add_items([{"role": "user", "content": "new generation"}])
        assert await cleared.get_items() == [{"role": "user", "content": "new generation"}]
    finally:
        await ledger.close()
    async with LedgerSessionService(target) as service:
        one = await service.get_session(app_name=APP, user_id="u1", session_id="s-one")
        assert one is not None and one.state["user:cart"] == ["tea"] and "temp:scratch" not in one.state
        await service.append_event(one, event("more", {"user:cart": ["tea", "milk"]}))
        again = await service.get_session(app_name=APP, user_id="u1", session_id="s-one")
        assert again is not None and len(again.events) == 3 and again.state["user:cart"] == ["tea", "milk"]


async def test_a_reimport_is_identical_and_a_differing_one_is_counted(
    source: URL, database: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await fill(source)
    path = await write_file(source, tmp_path)
    async with fresh_database(database.server, tmp_path, prefix="chatledger_dst") as target:
        await upgrade_database(target)
        assert (await import_file(target, str(path))).clean

        report = await import_file(target, str(path))
        assert report.clean and report.imported == 0 and report.identical == 6
        adk = report.frameworks["ADK"]
        assert (adk.identical, adk.states, adk.states_identical) == (3, 0, 3)

        # Written in the target since: an OpenAI item and ADK app: state of a new session.
        ledger = Ledger(target)
        try:
            await LedgerSession(OPENAI_IDS[2], ledger=ledger).add_items([{"role": "user", "content": "x"}])
        finally:
            await ledger.close()
        async with LedgerSessionService(target) as service:
            await service.create_session(app_name=APP, user_id="u3", state={"app:theme": "light"})
        changed = await export_of(target)

        report = await import_file(target, str(path))
        assert (report.imported, report.identical, report.differing, report.failed) == (0, 5, 2, 0)
        assert report.frameworks["OpenAI Agents"].differing == 1
        assert report.frameworks["ADK"].differing == 1
        assert any(
            f"OpenAI Agents session {OPENAI_IDS[2]!r}: its counter row differs in last_sequence" in line
            for line in report.problems
        )
        assert any("ADK app: state of app 'shop': differs in state_json" in line for line in report.problems)
        assert await export_of(target) == changed  # nothing overwritten

        assert await run(["import", "--dsn", dsn_of(target), str(path)]) == 1
        out = " ".join(capsys.readouterr().out.split())
        assert "OpenAI Agents: imported 0 sessions (0 items), 2 identical, 1 differing, 0 refused" in out
        assert "2 differ from the database's and 0 were refused" in out


async def test_copy_command_between_backends_and_its_rerun(
    source: URL, target: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    await fill(source)
    command = ["copy", "--from", dsn_of(source), "--to", dsn_of(target)]
    assert await run(command) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "copied 6 sessions (2 of them deleted, copied as tombstones; 0 messages, 0 checkpoints)" in out
    assert (
        "OpenAI Agents: copied 3 sessions (5 items; 1 deleted or cleared, as tombstones), 0 identical" in out
    )
    assert "ADK: copied 3 sessions (3 events; 1 deleted or cleared, as tombstones; 3 app:/user: state" in out
    assert await read_back(target) == await read_back(source)

    assert await run(command) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "copied 0 sessions" in out and "6 already there and identical" in out
    assert "0 app:/user: state rows, 3 of them already there and identical" in out
    assert await export_of(target) == await export_of(source)
    assert (await copy(source, target, ids=[OPENAI_IDS[0], "s-two"])).identical == 2


async def test_an_export_of_chosen_sessions_carries_their_state(source: URL, database: Database) -> None:
    await fill(source)
    output = io.StringIO()
    await export(source, output, ids=["s-two", OPENAI_IDS[1]])
    records = [json.loads(line) for line in output.getvalue().splitlines()]
    kinds = [record.get("type") for record in records[1:]]
    assert kinds == [
        "openai_session",
        "openai_session_end",
        "adk_session",
        "adk_event",
        "adk_session_end",
        "adk_app_state",
        "adk_user_state",
        "end",
    ]
    assert records[-3]["row"]["app_name"] == APP and records[-2]["row"]["user_id"] == "u2"
    assert records[0]["counts"]["adk_states"] == 2


async def test_numbering_the_adapters_cannot_keep_is_refused(source: URL, tmp_path: Path) -> None:
    await fill(source)
    path = await write_file(source, tmp_path)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)

    def variant(name: str, content: list[str]) -> str:
        bad = tmp_path / f"{name}.jsonl"
        bad.write_text("".join(content), encoding="utf-8")
        return str(bad)

    def block(id: str) -> tuple[int, list[int], int]:
        """The lines of an OpenAI session's counter row, items and end."""
        start = next(
            n
            for n, line in enumerate(lines)
            if line.startswith('{"type":"openai_session","row":{"id":"' + id)
        )
        end = next(n for n in range(start, len(lines)) if '"type":"openai_session_end"' in lines[n])
        return start, list(range(start + 1, end)), end

    # An item left out (its end record's count fixed): a gap in the numbering.
    _, items, end = block(OPENAI_IDS[0])
    closing = json.loads(lines[end])
    closing["items"] -= 1
    gap = [*lines[: items[1]], *lines[items[1] + 1 : end], json.dumps(closing) + "\n", *lines[end + 1 :]]
    # The counter row behind its items: the next add would take a sequence in use.
    start, _, _ = block(OPENAI_IDS[2])
    behind = json.loads(lines[start])
    behind["row"]["last_sequence"] -= 1
    cases = [
        (variant("gap", gap), "openai_item sequence 3, but its items must run gap-free from base_sequence"),
        (
            variant("behind", [*lines[:start], json.dumps(behind) + "\n", *lines[start + 1 :]]),
            r"openai_item sequence 3, .* \(3\) to last_sequence \(2\)",
        ),
    ]
    # A framework's record under a header that lists no such table.
    header = json.loads(lines[0])
    del header["tables"]["openai_items"]
    cases.append(
        (variant("no-table", [json.dumps(header) + "\n", *lines[1:]]), "header lists no openai_items")
    )
    for bad, fragment in cases:
        with pytest.raises(FormatError, match=fragment):
            await import_file(source, bad)


async def test_an_export_from_before_the_frameworks_still_imports(
    source: URL, database: Database, tmp_path: Path
) -> None:
    """A version 1 file written before the OpenAI and ADK records travelled: no such
    tables in its header, no such records, no such counts."""
    await fill(source)
    output = io.StringIO()
    await export(source, output)
    lines = [json.loads(line) for line in output.getvalue().splitlines()]
    framework = ("openai_", "adk_")
    header = lines[0]
    header["tables"] = {
        name: columns for name, columns in header["tables"].items() if not name.startswith(framework)
    }
    header["counts"] = {
        name: count for name, count in header["counts"].items() if not name.startswith(framework)
    }
    old = [header, *(record for record in lines[1:] if not str(record.get("type")).startswith(framework))]
    old[-1] = {key: value for key, value in old[-1].items() if not key.startswith(framework)}
    path = tmp_path / "old.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in old), encoding="utf-8")
    async with fresh_database(database.server, tmp_path, prefix="chatledger_dst") as target:
        await upgrade_database(target)
        report = await import_file(target, str(path))
        assert report.clean and report.imported == 0 and report.frameworks == {}


async def test_imports_of_one_file_at_once_insert_each_session_once(
    source: URL, database: Database, tmp_path: Path
) -> None:
    """Three imports of one file at once: each ends clean (a session or state row
    another committed first is compared, a deadlock or serialization failure retried),
    and each session and state row is inserted by exactly one of them."""
    await fill(source)
    path = await write_file(source, tmp_path)
    async with fresh_database(database.server, tmp_path, prefix="chatledger_dst") as target:
        if database.server is not None:
            await database.server.default_to_serializable(str(target.database))
        await upgrade_database(target)
        reports = await asyncio.gather(*(import_file(target, str(path)) for _ in range(3)))
        for report in reports:
            assert report.clean, report.problems
            assert report.imported + report.identical == 6
        assert sum(report.imported for report in reports) == 6
        states = [report.frameworks["ADK"] for report in reports]
        assert sum(counts.states for counts in states) == 3
        assert all(counts.states + counts.states_identical == 3 for counts in states)
        assert await export_of(target) == await export_of(source)
        assert await read_back(target) == await read_back(source)
