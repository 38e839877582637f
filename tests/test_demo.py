"""``chatledger demo``: a real zett Agent on every backend, with compaction and a restart."""

from __future__ import annotations

import io
import re
import shlex
from pathlib import Path

import pytest
from rich.console import Console
from zett_agent.messages import AssistantMessage, ToolMessage

from chatledger.dsn import DSN_ENV
from chatledger.tools.cli import run
from chatledger.tools.demo import FIRST_STEPS, SECOND_STEPS, record_demo, render_demo

from .conftest import Database

pytestmark = [pytest.mark.one_transaction_at_a_time, pytest.mark.dialect_only]


async def test_demo_persists_compacts_and_restores(database: Database) -> None:
    demo = await record_demo(database.url)

    operations = [entry.operation for entry in demo.trace]
    assert {"load", "append:user", "append:assistant", "append:tool", "snapshot"} <= set(operations)
    assert operations.count("snapshot") == 1
    # One load per request: three before the restart, one after.
    assert [entry.run for entry in demo.trace if entry.operation == "load"] == [1, 1, 1, 2]

    # The raw log keeps every message, in sequence, including the compacted ones.
    assert [record.sequence for record in demo.raw] == list(range(1, len(demo.raw) + 1))
    assert demo.message_count == len(demo.raw)
    tool_results = [record.message for record in demo.raw if isinstance(record.message, ToolMessage)]
    assert [result.name for result in tool_results] == ["weather"] and "21 °C" in tool_results[0].text
    answers = [record.message for record in demo.raw if isinstance(record.message, AssistantMessage)]
    assert any(answer.tool_calls for answer in answers)

    # The checkpoint replaced the first two turns; the restart loaded it and the tail after it.
    assert demo.checkpoint is not None and demo.checkpoint.version == 1
    boundary = demo.checkpoint.compacted_through_sequence
    assert demo.restored is not None and demo.restored.snapshot is not None
    assert demo.restored.snapshot.version == 1
    assert demo.restored.snapshot.compacted_through_sequence == boundary
    assert demo.restored.raw_tail[0].sequence == boundary + 1
    assert FIRST_STEPS[-1].user in [record.message.text for record in demo.restored.raw_tail
                                    if record.message.role.value == "user"]  # fmt: skip

    # The compaction is told by the checkpoint's own boundary, a raw-log sequence (not
    # zett's context positions), so it matches the restored view and the trace.
    compactions = [text for speaker, text in demo.transcript if speaker == "compaction"]
    assert compactions == [
        f"raw messages 1..{boundary} replaced by checkpoint v1 in the model's context "
        "(the raw log keeps them)"
    ]
    tail_end = demo.restored.raw_tail[-1].sequence
    assert ("restored", f"checkpoint v1 through #{boundary}, tail #{boundary + 1}..#{tail_end}") in (
        demo.transcript
    )

    # The model after the restart was given the checkpoint, not the raw prefix.
    assert demo.transcript[-1][0] == "assistant"
    assert demo.transcript[-1][1].startswith("Restored a checkpoint")
    assert ("user", SECOND_STEPS[0].user) in demo.transcript

    assert demo.session_id in [summary.session_id for summary in demo.sessions]
    mine = next(summary for summary in demo.sessions if summary.session_id == demo.session_id)
    assert mine.title == "chatledger demo" and mine.message_count == len(demo.raw)

    output = io.StringIO()
    render_demo(demo, Console(file=output, width=100, color_system=None))
    text = " ".join(output.getvalue().split())  # as read, whatever rich wrapped
    for fragment in ("raw log", "storage trace", f"compacted_through_sequence={boundary}", demo.session_id,
                     f"snapshot v1 through #{boundary}", f"raw messages 1..{boundary}"):  # fmt: skip
        assert fragment in text
    # Nothing only a terminal's colours would explain.
    assert "dim rows" not in text and "context messages" not in text


async def cli(argv: list[str]) -> tuple[int, str]:
    """``chatledger ARGV``: its exit status and what it printed (wide enough for whole ids)."""
    console = Console(file=io.StringIO(), width=200, color_system=None)
    status = await run(argv, console)
    return status, console.file.getvalue()  # type: ignore[attr-defined]


async def test_demo_command_on_each_backend(database: Database) -> None:
    """Through the CLI, on a database the previous test already used (repeated runs share it).
    The demo ends with the command lines that show, list and remove what it stored: run
    as printed, they work."""
    dsn = database.url.render_as_string(hide_password=False)
    status, text = await cli(["demo", "--dsn", dsn])
    assert status == 0
    assert "restored" in text and "checkpoint v1" in text
    if database.url.password:
        assert str(database.url.password) not in text
        return  # the printed lines mask it, so they cannot be run as they are
    session_id = re.search(r"^session +(demo-\S+)$", text, re.MULTILINE)
    assert session_id is not None
    demo_id = session_id.group(1)
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith("chatledger sessions ")]
    assert lines == [
        f"chatledger sessions show {demo_id} --dsn {shlex.quote(dsn)}",
        f"chatledger sessions list --dsn {shlex.quote(dsn)}",
        f"chatledger sessions delete {demo_id} --dsn {shlex.quote(dsn)}",
        f"chatledger sessions purge --prefix demo- --dsn {shlex.quote(dsn)}",
    ]
    show, listing, delete, purge = (shlex.split(line)[1:] for line in lines)
    status, shown = await cli(show)
    assert status == 0 and f"zett session {demo_id}" in shown and "checkpoint version 1" in shown
    status, listed = await cli(listing)
    assert status == 0 and demo_id in listed
    status, counted = await cli([*purge, "--dry-run"])
    assert status == 0 and "demo-" in counted
    status, _ = await cli([*delete, "--yes"])
    assert status == 0
    assert (await cli(show))[0] == 1  # gone


async def test_demo_without_arguments_uses_embedded_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(DSN_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert await run(["demo"]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "chatledger" / "chatledger.sqlite3") in out
    assert "snapshot v1" in out
    # The follow-up commands need no --dsn: they find the same embedded default.
    assert "  chatledger sessions list\n" in out and "--dsn" not in out
