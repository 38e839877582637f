"""The deploy API: ``chatledger.migrate.upgrade``, ``check``, ``current`` and
``downgrade`` do what the commands of those names do (the CLI calls them), and run
from an installed package's layout, with no repository checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy.engine import URL
from zett_agent.messages import UserMessage

from chatledger import DowngradeRefused, SchemaNotReady, migrate
from chatledger.dsn import DSN_ENV, as_argument, display
from chatledger.tools.cli import run
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.facts import facts_of
from .support.schema_helpers import MIGRATIONS, REPO_ROOT, dsn_of, fresh_database

pytestmark = pytest.mark.one_transaction_at_a_time

HEAD = migrate.head_revision()
ALL = migrate.revisions().order


@pytest.fixture(autouse=True)
def no_env_dsn(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DSN_ENV, raising=False)


@pytest.fixture
async def empty(database: Database, tmp_path: Path) -> AsyncIterator[URL]:
    async with fresh_database(database, tmp_path, "api") as url:
        yield url


async def test_the_deploy_calls_do_what_the_commands_do(
    empty: URL, session_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    shown, dsn = display(empty), dsn_of(empty)
    done = await migrate.upgrade(empty)
    assert done.applied == ALL and done.after.revision == HEAD
    assert done.summary == f"applied {', '.join(ALL)} to {shown}: now at head ({HEAD})"
    again = await migrate.upgrade(dsn)
    assert again.applied == () and again.summary == f"{shown} is already at head ({HEAD}): nothing to apply"
    assert await run(["upgrade", "--dsn", dsn]) == 0
    assert capsys.readouterr().out.strip() == again.summary

    found = await migrate.current(dsn)
    assert found.standing is migrate.Standing.AT_HEAD and found.remedy is None
    assert found.lines[:2] == [f"database  {shown}", f"current   {HEAD}"]
    assert await run(["current", "--dsn", dsn]) == 0
    assert capsys.readouterr().out.splitlines() == found.lines

    checked = await migrate.check(dsn)
    assert (checked.status, checked.message) == (0, f"database {shown} is at head ({HEAD})")
    assert checked.past_counter == () and checked.app_version_tables == ()

    async with LedgerSessionStorage(empty) as storage:
        await storage.append(session_id, "r", UserMessage(content="keep me"))
    with pytest.raises(DowngradeRefused) as refused:
        await migrate.downgrade(dsn, "base")
    assert refused.value.tables == {"raw_messages": 1, "agent_sessions": 1}
    assert await migrate.downgrade(dsn, "base", drop_rows=True) is None

    behind = await migrate.check(dsn)
    assert behind.status == 1 and behind.standing is migrate.Standing.BEHIND
    assert await run(["check", "--dsn", dsn]) == 1
    assert capsys.readouterr().err.strip() == f"chatledger check: {behind.message}".replace(
        f"--dsn {as_argument(empty)}", f"--dsn {dsn}"
    )
    assert (await migrate.current(dsn)).remedy == f"upgrade it {migrate.upgrade_advice(empty)}"


@pytest.mark.parametrize("call", ["current", "check", "downgrade"])
async def test_a_missing_sqlite_file_is_refused_and_not_created(call: str, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "ledger.sqlite3"
    dsn = f"sqlite:///{missing}"
    with pytest.raises(ValueError, match=f"no such file: {missing}"):
        await (migrate.downgrade(dsn, "base") if call == "downgrade" else getattr(migrate, call)(dsn))
    assert not missing.parent.exists()


def test_the_deploy_api_runs_from_a_wheels_layout(tmp_path: Path) -> None:
    """The package as the wheel lays it out (``pyproject.toml``'s force-include puts
    ``migrations/`` at ``chatledger/migrations``), imported from elsewhere than a checkout."""
    site = tmp_path / "site"
    shutil.copytree(
        REPO_ROOT / "src" / "chatledger", site / "chatledger", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copytree(
        MIGRATIONS, site / "chatledger" / "migrations", ignore=shutil.ignore_patterns("__pycache__")
    )
    deploy = textwrap.dedent(
        f"""
        import asyncio, sys
        import chatledger.migrate as migrate

        dsn = sys.argv[1]
        print(migrate.script_location().relative_to({str(site)!r}))
        print(asyncio.run(migrate.upgrade(dsn)).summary)
        print(asyncio.run(migrate.check(dsn)).status)
        """
    )
    work = tmp_path / "deploy"
    work.mkdir()
    (work / "deploy.py").write_text(deploy)
    database = tmp_path / "app.sqlite3"
    env = {key: value for key, value in os.environ.items() if key != DSN_ENV}
    env["PYTHONPATH"] = str(site)
    done = subprocess.run(
        [sys.executable, "deploy.py", f"sqlite:///{database}"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.splitlines() == [
        "chatledger/migrations",
        f"applied {', '.join(ALL)} to sqlite+aiosqlite:///{database}: now at head ({HEAD})",
        "0",
    ]


def test_the_readmes_deploy_section_shows_the_api_and_the_hooks() -> None:
    """The README's deploy section, in brief since the docs site: the deploy API calls and
    the app's Alembic hooks; the whole script is docs/deploying.md's, run on every target
    by tests/test_docs_deploy.py."""
    from .unit.test_readme import code_blocks, section

    deploying = section("Deploying: migrations")
    (example,) = [text for language, text in code_blocks(deploying) if "await migrate.upgrade(" in text]
    assert "from chatledger import migrate" in example and "await migrate.check(" in example
    (hooks,) = [text for language, text in code_blocks(deploying) if "include_object=include_object" in text]
    assert hooks.splitlines()[0] == "from chatledger.migrate import include_name, include_object"


async def test_a_database_behind_names_the_owners_dsn_not_a_masked_password(
    empty: URL, database: Database
) -> None:
    """The runtime role meets the database behind: the advice is the command with the
    schema owner's DSN, not this role's DSN with its password masked (which cannot work)."""
    if database.server is None:
        pytest.skip("a SQLite file has no roles (and upgrades itself on first use)")
    if facts_of(database.backend).trusts_local_logins:  # any password does
        empty = empty.set(password="pw-Sekr1t-do-not-print")
    async with LedgerSessionStorage(empty) as storage:
        with pytest.raises(SchemaNotReady) as caught:
            await storage.count_messages("s-1")
    message = str(caught.value)
    assert "upgrade it with the schema owner's DSN: `chatledger upgrade --dsn OWNER_DSN`" in message
    assert "`chatledger.migrate.upgrade(OWNER_DSN)`" in message
    # The database is named, password masked; no command names this role's DSN.
    assert f"database {display(empty)} is at revision <none>" in message
    assert f"--dsn {database.backend}" not in message and "pw-Sekr1t" not in message
