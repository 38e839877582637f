"""Guides' scripts run as a reader would run them, on each target: the deploying guide's
deploy script (``docs/deploying.md``), with a fresh empty database as the owner's DSN,
upgrades it through the deploy API, prints what ``chatledger upgrade`` prints, and finds
it usable; the OpenAI Agents guide's offline ``Runner`` example
(``docs/openai-agents.md``) prints what its console block says, on its own SQLite file
and with ``CHATLEDGER_DSN`` naming a fresh server database."""

from __future__ import annotations

import asyncio
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import Database
from .support.schema_helpers import dsn_of, fresh_database

pytestmark = [pytest.mark.one_transaction_at_a_time, pytest.mark.dialect_only]

ROOT = Path(__file__).resolve().parent.parent


def deploy_script() -> str:
    """The guide's ``python`` block that defines ``deploy``."""
    guide = (ROOT / "docs" / "deploying.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```$", guide, re.MULTILINE | re.DOTALL)
    return next(block for block in blocks if "async def deploy" in block)


async def test_deploy_script_runs(database: Database, tmp_path: Path) -> None:
    """The deploying guide's deploy script, with a fresh empty database of each target
    as the owner's DSN: it upgrades it, says so, and finds it usable."""
    (tmp_path / "deploy.py").write_text(deploy_script())
    env = {key: value for key, value in os.environ.items() if key != "CHATLEDGER_DSN"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    async with fresh_database(database, tmp_path, "deployed") as url:
        env["OWNER_DSN"] = dsn_of(url)
        command = [sys.executable, "deploy.py"]
        run = functools.partial(subprocess.run, cwd=tmp_path, env=env, capture_output=True, text=True)
        done = await asyncio.to_thread(run, command)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("applied 0001"), done.stdout


def guide_example(guide: str, marker: str) -> tuple[str, str, str]:
    """The guide's ``python`` block containing ``marker``, and the ``console`` block
    right after it: ``(source, the command, what it prints)``."""
    text = (ROOT / "docs" / guide).read_text()
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)
    index = next(i for i, (language, block) in enumerate(blocks) if language == "python" and marker in block)
    language, console = blocks[index + 1]
    assert language == "console"
    command, _, printed = console.partition("\n")
    return blocks[index][1], command.removeprefix("$ "), printed


async def test_openai_agents_offline_example_prints_what_it_says(database: Database, tmp_path: Path) -> None:
    """The SDK's ``Runner`` on a ``LedgerSession`` with the guide's scripted model: no
    network, the history read back from the session, what the guide shows."""
    source, command, expected = guide_example("openai-agents.md", "class CannedModel(Model)")
    assert command == "python agent.py"
    (tmp_path / "agent.py").write_text(source)
    env = {key: value for key, value in os.environ.items() if key not in ("CHATLEDGER_DSN", "OPENAI_API_KEY")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    run = functools.partial(subprocess.run, cwd=tmp_path, env=env, capture_output=True, text=True)
    if database.server is None:  # as the reader runs it: its own sqlite:///agent.sqlite3
        done = await asyncio.to_thread(run, [sys.executable, "agent.py"])
        assert (tmp_path / "agent.sqlite3").exists()
    else:
        async with fresh_database(database, tmp_path, "agent") as url:
            env["CHATLEDGER_DSN"] = dsn_of(url)
            done = await asyncio.to_thread(run, [sys.executable, "agent.py"])
    assert done.returncode == 0, done.stderr
    assert done.stdout == expected
