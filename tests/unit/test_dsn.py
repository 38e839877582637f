"""DSNs and drivers as users write them: what is refused (and how it says so without
printing the password), what maps to which async driver, and a missing driver's or
integration's extra named the same way from the library and from the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from pathlib import Path
from urllib.parse import quote

import pytest

from chatledger import SchemaNotReady
from chatledger.dsn import DSN_ENV, display, resolve_dsn
from chatledger.tools.cli import run
from chatledger.zett import LedgerSessionStorage

from ..support.throwaway import ROOT

#: Passwords a user pastes unencoded: SQLAlchemy's make_url would cut each at its first
#: "@" and take the rest for the host (or the database, or a query parameter).
AMBIGUOUS = [
    "Sekr1t@Tail99#Frag",
    "Sekr1t@Tail99",
    "Sekr1t#Tail99",
    "Sekr/1t@Tail99",
    "Sekr1t@Tail/99",
    "Sekr?1t@Tail99",
    "Sekr:1t@Tail99",
]


def _pieces(password: str) -> list[str]:
    """Every fragment of ``password`` a parser could have split off (3+ characters)."""
    fragments = {password}
    for separator in "@#/?:":
        fragments.update(part for chunk in list(fragments) for part in chunk.split(separator))
    return [fragment for fragment in fragments if len(fragment) > 2]


def _no_part_of(password: str, text: str) -> None:
    for fragment in _pieces(password):
        assert fragment not in text, (fragment, text)


@pytest.fixture(autouse=True)
def no_env_dsn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(DSN_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))


# -- passwords --------------------------------------------------------------------------


@pytest.mark.parametrize("password", AMBIGUOUS)
@pytest.mark.parametrize(
    "template", ["postgresql://root:{}@db.example:5432/chat", "mysql://root:{}@db.example/chat"]
)
def test_unencoded_password_is_refused_without_printing_it(template: str, password: str) -> None:
    dsn = template.format(password)
    with pytest.raises(ValueError, match="percent-encode the password") as caught:
        resolve_dsn(dsn)
    _no_part_of(password, "".join(traceback.format_exception(caught.value)))
    with pytest.raises(ValueError, match="percent-encode the password") as caught:
        LedgerSessionStorage(dsn)
    _no_part_of(password, "".join(traceback.format_exception(caught.value)))


@pytest.mark.parametrize("password", [*AMBIGUOUS, "plain-Sekr1t", "%41ll-@sorts#of/chars?:"])
def test_percent_encoded_password_keeps_working(password: str) -> None:
    url = resolve_dsn(f"postgresql://root:{quote(password, safe='')}@db.example/chat")
    assert url.password == password
    assert (url.host, url.database) == ("db.example", "chat")
    _no_part_of(password, display(url))
    _no_part_of(password, repr(LedgerSessionStorage(url)))


@pytest.mark.parametrize("password", ["Sekr1t@Tail99#Frag", "Sekr/1t@Tail99"])
async def test_cli_refuses_an_unencoded_password_in_one_line(
    password: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = f"mysql://root:{password}@db.example:3306/chat"
    assert await run(["check", "--dsn", dsn]) == 2
    captured = capsys.readouterr()
    assert "percent-encode the password" in captured.err and captured.err.count("\n") == 1
    _no_part_of(password, captured.out + captured.err)
    monkeypatch.setenv(DSN_ENV, dsn)  # the same from the environment
    assert await run(["current"]) == 2
    captured = capsys.readouterr()
    assert "percent-encode the password" in captured.err
    _no_part_of(password, captured.out + captured.err)


def test_at_signs_elsewhere_are_fine() -> None:
    """A user name with an @ (Azure's user@server) and an @ in a query value are not
    passwords; without a password nothing is refused for an @."""
    url = resolve_dsn("postgresql+psycopg://me@corp:pw@db.example/chat?application_name=a@b")
    assert (url.username, url.password, url.host) == ("me@corp", "pw", "db.example")
    assert url.query["application_name"] == "a@b"


# -- database names, drivers, paths -----------------------------------------------------


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://u@h",
        "postgresql://u@h/",
        "postgres://u:pw@h:5432",
        "postgresql+psycopg://u@h/",
        "mysql://root@h",
        "mariadb://root@h:3306/",
    ],
)
def test_server_dsn_without_a_database_is_refused(dsn: str) -> None:
    with pytest.raises(ValueError, match=r"names no database; add its name after the host: \w+://USER@"):
        LedgerSessionStorage(dsn)


def test_admin_dsns_naming_a_database_are_fine() -> None:
    assert resolve_dsn("postgresql://postgres@127.0.0.1/postgres").database == "postgres"
    assert resolve_dsn("mysql://root@127.0.0.1:3306/mysql").database == "mysql"


@pytest.mark.parametrize(
    ("dsn", "drivername"),
    [
        ("postgresql://u@h/db", "postgresql+asyncpg"),
        ("postgres://u@h/db", "postgresql+asyncpg"),
        ("postgresql+asyncpg://u@h/db", "postgresql+asyncpg"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg"),
        ("postgresql+psycopg_async://u@h/db", "postgresql+psycopg"),
        ("mysql://u@h/db", "mysql+aiomysql"),
        ("mariadb://u@h/db", "mysql+aiomysql"),
        ("sqlite:///x.db", "sqlite+aiosqlite"),
    ],
)
def test_schemes_map_to_async_drivers(dsn: str, drivername: str) -> None:
    assert resolve_dsn(dsn).drivername == drivername


def test_sslmode_is_each_drivers_own() -> None:
    assert resolve_dsn("postgresql://u@h/db?sslmode=require").query == {"ssl": "require"}
    assert resolve_dsn("postgresql+psycopg://u@h/db?sslmode=require").query == {"sslmode": "require"}


def test_a_parameter_asyncpg_does_not_take_is_refused_naming_it() -> None:
    dsn = "postgresql://u@h/db?options=-csearch_path%3Dchatledger"
    with pytest.raises(
        ValueError, match=r"dsn parameter 'options' is not one asyncpg takes.*postgresql\+psycopg"
    ):
        resolve_dsn(dsn)
    with pytest.raises(ValueError, match="dsn parameter 'sslrootcert_typo'"):
        resolve_dsn("postgresql://u@h/db?sslrootcert_typo=x")
    # psycopg is libpq: options is its own.
    assert resolve_dsn(dsn.replace("postgresql://", "postgresql+psycopg://")).query == {
        "options": "-csearch_path=chatledger"
    }
    assert resolve_dsn("postgresql://u@h/db?command_timeout=5&target_session_attrs=primary").query == {
        "command_timeout": "5",
        "target_session_attrs": "primary",
    }


@pytest.mark.parametrize(
    ("dsn", "use"),
    [
        ("postgresql+psycopg2://u@h/db", "use postgresql+asyncpg:// or postgresql+psycopg://"),
        ("postgresql+pg8000://u@h/db", "use postgresql+asyncpg:// or postgresql+psycopg://"),
        ("mysql+pymysql://u@h/db", "use mysql+aiomysql://"),
        ("mysql+mysqldb://u@h/db", "use mysql+aiomysql://"),
        ("mariadb+mariadbconnector://u@h/db", "use mysql+aiomysql://"),
        ("sqlite+pysqlite:///x.db", "use sqlite+aiosqlite://"),
    ],
)
def test_sync_drivers_are_refused_naming_the_async_ones(dsn: str, use: str) -> None:
    with pytest.raises(ValueError, match="async driver") as caught:
        LedgerSessionStorage(dsn)
    assert use in str(caught.value)


@pytest.mark.parametrize("path", ["./sessions.db", "/var/data/x.sqlite", "sessions.sqlite3", "~/chat.db"])
def test_bare_file_path_gets_the_sqlite_url(path: str) -> None:
    with pytest.raises(ValueError, match="file path") as caught:
        LedgerSessionStorage(path)
    assert f"sqlite:///{path}" in str(caught.value)


async def test_cli_gives_the_same_hints(capsys: pytest.CaptureFixture[str]) -> None:
    for dsn, fragment in [
        ("./sessions.db", "sqlite:///./sessions.db"),
        ("postgresql://u@127.0.0.1", "names no database"),
        ("mysql+pymysql://u@h/db", "use mysql+aiomysql://"),
    ]:
        assert await run(["current", "--dsn", dsn]) == 2
        error = capsys.readouterr().err
        assert fragment in error and error.count("\n") == 1, error


# -- missing extras ---------------------------------------------------------------------

#: Runs in a subprocess with the module ``BLOCKED`` made unimportable: prints the
#: message of the library's error, then runs the CLI (its stderr is the CLI's line).
_BLOCKED = """
import asyncio, os, sys
sys.modules[os.environ["BLOCKED"]] = None
{body}
"""
_LIBRARY_AND_CLI = """
from chatledger.engine import Ledger
from chatledger.tools.cli import main
try:
    Ledger(os.environ["DSN"])
except ImportError as error:
    print(error)
sys.exit(main(["current", "--dsn", os.environ["DSN"]]))
"""


def _blocked(module: str, body: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _BLOCKED.format(body=body)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "BLOCKED": module, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("module", "dsn", "extra"),
    [
        ("asyncpg", "postgresql://u@127.0.0.1:1/db", "postgres"),
        ("psycopg", "postgresql+psycopg://u@127.0.0.1:1/db", "psycopg"),
        ("aiomysql", "mysql://u@127.0.0.1:1/db", "mysql"),
    ],
)
def test_missing_driver_names_its_extra_from_library_and_cli(module: str, dsn: str, extra: str) -> None:
    done = _blocked(module, _LIBRARY_AND_CLI, DSN=dsn)
    expected = f"the {module} driver is missing: pip install 'chatledger[{extra}]'"
    assert done.stdout.strip() == expected, done.stderr
    assert done.returncode == 2
    assert done.stderr.strip() == f"chatledger current: {expected}"


@pytest.mark.parametrize(
    ("module", "statement", "expected"),
    [
        ("rein", "from chatledger.rein import LedgerSessionStore", "rein-agent is missing"),
        ("zett_agent", "from chatledger.zett import LedgerSessionStorage", "zett-agent is missing"),
    ],
)
def test_missing_integration_names_its_extra(module: str, statement: str, expected: str) -> None:
    extra = "rein" if module == "rein" else "zett"
    body = f"""
try:
    {statement}
except ModuleNotFoundError as error:
    print(error.name, error, sep="|")
"""
    done = _blocked(module, body)
    assert done.returncode == 0, done.stderr
    name, message = done.stdout.strip().split("|")
    assert name.split(".")[0] == module  # the module that is missing, as Python names it
    assert message == f"{expected}: pip install 'chatledger[{extra}]'"


async def test_a_database_behind_names_auto_upgrade(tmp_path: Path) -> None:
    """auto_upgrade=True is other stores' create_tables; the refusal mentions it, and
    names the database in the command it advises."""
    path = tmp_path / "empty.sqlite3"
    async with LedgerSessionStorage(f"sqlite:///{path}", auto_upgrade=False) as storage:
        with pytest.raises(SchemaNotReady, match="chatledger upgrade") as caught:
            await storage.count_messages("s-1")
        message = str(caught.value)
        assert "auto_upgrade=True (what other session stores call create_tables)" in message
        assert f"`chatledger upgrade --dsn sqlite+aiosqlite:///{path}`" in message
