"""The command line's smaller stumbles (issue 21): a wrong port says it retries, once,
and gives up sooner than a service; Ctrl-C during an import says what was committed
and that running it again resumes."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chatledger import interactive
from chatledger.options import LedgerOptions

CHATLEDGER = [sys.executable, "-m", "chatledger.tools.cli"]


def closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_wrong_port_says_it_retries_once_and_gives_up_within_the_cli_budget() -> None:
    dsn = f"postgresql://postgres@127.0.0.1:{closed_port()}/nothing"
    done = subprocess.run(
        [*CHATLEDGER, "sessions", "list", "--dsn", dsn], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    retrying = [line for line in lines if "retrying for up to" in line]
    assert len(retrying) == 1, done.stderr
    assert retrying[0].startswith("chatledger: postgresql+asyncpg://postgres@127.0.0.1:")
    assert f"retrying for up to {interactive.RETRY_TIMEOUT:g} s" in retrying[0]
    assert f"retry_timeout={interactive.RETRY_TIMEOUT:g} s" in lines[-1]


def test_the_library_keeps_its_budget_and_the_cli_budget_yields_to_a_given_one() -> None:
    """What ``Ledger.__init__`` builds its options from (``interactive.options``)."""
    default = LedgerOptions().retry_timeout
    assert default > interactive.RETRY_TIMEOUT
    assert LedgerOptions(**interactive.options({})).retry_timeout == default
    with interactive.command():
        assert LedgerOptions(**interactive.options({})).retry_timeout == interactive.RETRY_TIMEOUT
        assert LedgerOptions(**interactive.options({"retry_timeout": 30})).retry_timeout == 30
    assert LedgerOptions(**interactive.options({})).retry_timeout == default


async def test_retention_run_from_cron_keeps_a_service_budget(capsys: pytest.CaptureFixture[str]) -> None:
    """A retention run has no one waiting: a failover halfway through should not stop it
    after the interactive 5 s. Its budget is the library's, or --retry-timeout."""
    from chatledger.tools import cli

    args = cli.build_parser().parse_args(["retention", "--tombstones-after", "30d"])
    assert args.retry_timeout == LedgerOptions().retry_timeout > interactive.RETRY_TIMEOUT
    dsn = f"postgresql://postgres@127.0.0.1:{closed_port()}/nothing"
    given = ["retention", "--dsn", dsn, "--tombstones-after", "30d", "--retry-timeout", "0.5"]
    assert await cli.run(given) == 2
    err = capsys.readouterr().err
    assert "retrying for up to 0.5 s" in err and "retry_timeout=0.5 s" in err
    assert await cli.run([*given[:-1], "-1"]) == 2
    assert "--retry-timeout must not be negative" in capsys.readouterr().err


@pytest.fixture
def big_export(tmp_path: Path) -> tuple[Path, int]:
    """A real export (of a one-session database) with its session repeated under many ids."""
    source = tmp_path / "source.sqlite3"
    script = (
        "import asyncio\n"
        "from zett_agent.messages import UserMessage\n"
        "from chatledger.zett import LedgerSessionStorage\n"
        "async def main():\n"
        f"    async with LedgerSessionStorage('sqlite:///{source}') as s:\n"
        "        await s.append('s', 'r', UserMessage(content='hello'))\n"
        "asyncio.run(main())\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    one = tmp_path / "one.jsonl"
    subprocess.run(
        [*CHATLEDGER, "export", "--dsn", f"sqlite:///{source}", "-o", str(one)], check=True, timeout=300
    )
    header, session, message, end_of_session, _end = (
        json.loads(line) for line in one.read_text().splitlines()
    )
    count = 4000
    lines = [json.dumps(header)]
    for number in range(count):
        session["row"]["id"] = message["row"]["session_id"] = end_of_session["id"] = f"s{number}"
        message["row"]["id"] = f"m{number}"
        lines += [json.dumps(session), json.dumps(message), json.dumps(end_of_session)]
    lines.append(
        json.dumps({"type": "end", "sessions": count, "messages": count, "snapshots": 0, "rein_sessions": 0})
    )
    many = tmp_path / "many.jsonl"
    many.write_text("\n".join(lines) + "\n")
    return many, count


def imported(path: Path) -> int:
    try:
        with sqlite3.connect(path) as conn:
            return int(conn.execute("SELECT count(*) FROM agent_sessions").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet, or busy
        return 0


def _sigint_as_at_a_terminal() -> None:
    # The child starts with SIGINT's default action, and not blocked, as a command at a
    # terminal does: one started with SIGINT ignored (inherited from this test process,
    # as it can be in a full run) keeps it ignored, and Python then installs no
    # KeyboardInterrupt; a blocked one (the mask is inherited too) is never delivered.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_ctrl_c_during_an_import_says_what_was_committed_and_that_a_re_run_resumes(
    tmp_path: Path, big_export: tuple[Path, int]
) -> None:
    export, count = big_export
    target = tmp_path / "target.sqlite3"
    dsn = f"sqlite:///{target}"
    running = subprocess.Popen(
        [*CHATLEDGER, "import", "--dsn", dsn, str(export)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # faulthandler: a SIGABRT prints every thread's stack, should it not end.
        env={**os.environ, "COLUMNS": "120", "PYTHONFAULTHANDLER": "1"},
        preexec_fn=_sigint_as_at_a_terminal,
    )
    try:
        deadline = time.monotonic() + 240
        while imported(target) < 10 and running.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        # Hold the file's write lock (taken between two of the import's transactions):
        # the import waits on it, so it is still running, mid-import, when Ctrl-C comes.
        holder = sqlite3.connect(target, timeout=60, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            assert running.poll() is None, "the import ended before it could be interrupted"
            running.send_signal(signal.SIGINT)
            time.sleep(1)  # then let go: the lock was there to keep the import running
        finally:
            holder.close()  # rolls back: it wrote nothing
        try:
            _, stderr = running.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            running.send_signal(signal.SIGABRT)
            _, stderr = running.communicate(timeout=30)
            pytest.fail(f"the import did not end within 120 s of Ctrl-C; its threads:\n{stderr[-8000:]}")
    finally:
        running.kill()
    assert running.returncode == 130, f"SIGINT here: {signal.getsignal(signal.SIGINT)}; {stderr[-2000:]}"
    line = stderr.strip().splitlines()[-1]
    said = re.fullmatch(
        r"chatledger: interrupted; ([\d,]+) sessions \(([\d,]+) messages\) were committed .*", line
    )
    assert said is not None, stderr
    committed = imported(target)
    # The session whose COMMIT was under way may be committed and not yet counted.
    assert 10 <= committed < count and int(said[1].replace(",", "")) in (committed, committed - 1)
    assert "Run the same import again: it skips the sessions committed" in line

    again = subprocess.run(
        [*CHATLEDGER, "import", "--dsn", dsn, str(export)], capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, again.stderr
    assert imported(target) == count
