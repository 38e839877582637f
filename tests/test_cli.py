"""The ``chatledger`` command: upgrade / current / check / downgrade, errors, masking."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from chatledger.dsn import DSN_ENV
from chatledger.migrate import head_revision, revisions
from chatledger.tools.cli import CLOSED_PIPE, run

from .conftest import Database
from .support.backends import fresh_name

pytestmark = pytest.mark.dialect_only

PASSWORD = "pw-Sekr1t-do-not-print"


def dsn_of(url: URL) -> str:
    """The URL as a DSN string, password included (what a user would type)."""
    return url.render_as_string(hide_password=False)


@pytest.fixture
async def empty_dsn(database: Database, tmp_path: Path) -> AsyncIterator[str]:
    """A DSN of an empty (never migrated) database of the backend, dropped afterwards."""
    if database.server is None:
        (tmp_path / "empty.sqlite3").touch()  # an empty database (a missing one is an error)
        yield f"sqlite:///{tmp_path / 'empty.sqlite3'}"
        return
    name = fresh_name("chatledger_cli")
    url = await database.server.create_database(name)
    try:
        yield dsn_of(url)
    finally:
        await database.server.drop_database(name)


@pytest.fixture(autouse=True)
def no_env_dsn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No test reads a developer's CHATLEDGER_DSN or writes the real default database."""
    monkeypatch.delenv(DSN_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


async def test_check_upgrade_current_downgrade_on_empty_database(
    empty_dsn: str, database: Database, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await run(["check", "--dsn", empty_dsn]) == 1
    error = capsys.readouterr().err
    assert "<none>" in error and "chatledger upgrade" in error

    assert await run(["current", "--dsn", empty_dsn]) == 0
    out = capsys.readouterr().out
    assert "current   no chatledger schema: upgrade it with " in out and "`chatledger upgrade --dsn " in out
    assert f"head      {head_revision()}" in out

    if database.server is not None:  # a server database is never upgraded by the demo
        assert await run(["demo", "--dsn", empty_dsn]) == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and "chatledger upgrade" in error and "Traceback" not in error

    assert await run(["upgrade", "--dsn", empty_dsn]) == 0
    assert f"now at head ({head_revision()})" in capsys.readouterr().out
    assert await run(["check", "--dsn", empty_dsn]) == 0
    assert "is at head" in capsys.readouterr().out
    assert await run(["current", "--dsn", empty_dsn]) == 0
    out = capsys.readouterr().out
    assert f"current   {head_revision()}" in out
    compatible = revisions().compatible_from[head_revision()]
    assert f"usable by chatledger code of revisions {compatible} to {head_revision()}" in out

    assert await run(["downgrade", "--dsn", empty_dsn, "base"]) == 0
    assert "is at revision <none>" in capsys.readouterr().out
    assert await run(["check", "--dsn", empty_dsn]) == 1


async def test_check_on_migrated_database_and_env_dsn(
    database: Database, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await run(["check", "--dsn", dsn_of(database.url)]) == 0
    monkeypatch.setenv(DSN_ENV, dsn_of(database.url))
    assert await run(["check"]) == 0
    assert database.url.database is not None
    assert database.url.database in capsys.readouterr().out


async def test_default_is_embedded_sqlite_and_check_does_not_create_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    default = tmp_path / "xdg" / "chatledger" / "chatledger.sqlite3"
    assert await run(["check"]) == 2
    assert await run(["current"]) == 2
    assert f"no such file: {default}" in capsys.readouterr().err
    assert not default.exists()
    assert await run(["upgrade"]) == 0
    assert default.exists()
    assert await run(["check"]) == 0
    assert await run(["current"]) == 0
    assert str(default) in capsys.readouterr().out


@pytest.mark.parametrize(
    ("dsn", "expected"),
    [
        (
            f"postgresql://someone:{PASSWORD}@127.0.0.1:1/nothing",
            "postgresql+asyncpg://someone:***@127.0.0.1:1",
        ),
        (f"mysql://someone:{PASSWORD}@127.0.0.1:1/nothing", "mysql+aiomysql://someone:***@127.0.0.1:1"),
    ],
)
@pytest.mark.parametrize("command", ["check", "current", "upgrade", "demo"])
async def test_unreachable_server_masks_password(
    command: str, dsn: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await run([command, "--dsn", dsn]) == 2
    captured = capsys.readouterr()
    assert PASSWORD not in captured.out + captured.err
    *notice, error = captured.err.splitlines()
    assert error.startswith(f"chatledger {command}: ") and expected in error
    # A command that retries says so once, before its error (chatledger.interactive).
    assert len(notice) <= 1 and all("retrying for up to" in line for line in notice)


async def test_password_from_environment_is_masked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(DSN_ENV, f"postgresql://someone:{PASSWORD}@127.0.0.1:1/nothing")
    assert await run(["current"]) == 2
    captured = capsys.readouterr()
    assert PASSWORD not in captured.out + captured.err and "***" in captured.err


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["check", "--dsn", "oracle://u@h/db"], "scheme 'oracle' is not supported"),
        (["current", "--dsn", "not a url"], "not a valid database URL"),
        (["check", "--dsn", "postgresql+psycopg2://u@h/db"], "use postgresql+asyncpg"),
    ],
)
async def test_bad_dsn_is_one_line(
    argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await run(argv) == 2
    error = capsys.readouterr().err
    assert fragment in error and error.count("\n") == 1


async def test_unknown_revision_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dsn = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    assert await run(["upgrade", "--dsn", dsn, "--revision", "nonesuch"]) == 2
    assert "nonesuch" in capsys.readouterr().err


def test_console_script_exit_status(tmp_path: Path) -> None:
    """The installed entry point: exit 1 and one stderr line for a database behind head."""
    (tmp_path / "script.sqlite3").touch()
    dsn = f"sqlite:///{tmp_path / 'script.sqlite3'}"
    command = [sys.executable, "-c", "import sys; from chatledger.tools.cli import main; sys.exit(main())"]
    done = subprocess.run([*command, "check", "--dsn", dsn], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert "chatledger upgrade" in done.stderr and "Traceback" not in done.stderr
    done = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("chatledger ")


@pytest.mark.parametrize("mistake", ["database", "user"])
async def test_schema_commands_word_a_refused_configuration_as_the_stores_do(
    database: Database, mistake: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No such database, or a login the server refuses: every command says what to
    fix in the same words (the stores' ConfigurationError), not the bare server error."""
    if database.server is None:
        pytest.skip("a SQLite file has no server to refuse a database or a login")
    suffix = fresh_name("x")
    url = (
        database.url.set(database=f"chatledger_missing_{suffix}")
        if mistake == "database"
        else database.url.set(username=f"nobody_{suffix}")
    )
    dsn = dsn_of(url)
    assert await run(["sessions", "list", "--dsn", dsn]) == 2
    expected = capsys.readouterr().err.removeprefix("chatledger sessions list: ")
    assert ("create it" if mistake == "database" else "check the user/password in the DSN") in expected
    assert "The server said: " in expected
    for command in (["upgrade"], ["check"], ["current"], ["downgrade", "base"], ["adopt"]):
        assert await run([*command, "--dsn", dsn]) == 2
        assert capsys.readouterr().err == f"chatledger {command[0]}: {expected}"


@pytest.mark.parametrize(
    "argv",
    [["upgrade", "--sql"], ["export"], ["sessions", "list"], ["current"]],
    ids=["upgrade-sql", "export", "sessions-list", "current"],
)
def test_a_closed_stdout_ends_the_command_quietly(argv: list[str], tmp_path: Path) -> None:
    """``chatledger ... | head``: once the reader has gone, the command ends as git
    does, with the status of SIGPIPE and no message (Python's would be a traceback)."""
    dsn = f"sqlite:///{tmp_path / 'ledger.sqlite3'}"
    environment = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "xdg")}
    environment.pop(DSN_ENV, None)
    subprocess.run(
        [sys.executable, "-m", "chatledger.tools.cli", "upgrade", "--dsn", dsn], check=True, env=environment
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "chatledger.tools.cli", *argv, "--dsn", dsn],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=environment,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader is gone before the command writes a byte
    error = process.stderr.read().decode()
    assert process.wait(timeout=60) == CLOSED_PIPE == 141
    assert error == ""


@pytest.mark.parametrize("name", ["backup.jsonl", "backup.jsonl.gz"])
async def test_a_failed_export_leaves_the_file_it_would_replace(tmp_path: Path, name: str) -> None:
    """The file is opened at the export's first write, after the database was checked:
    an export refused there (here a database never migrated) leaves yesterday's
    export whole."""
    kept = tmp_path / name
    kept.write_bytes(b"yesterday's export")
    never_migrated = f"sqlite:///{tmp_path / 'empty.sqlite3'}"
    assert await run(["export", "--dsn", never_migrated, "-o", str(kept)]) == 2
    assert kept.read_bytes() == b"yesterday's export"
