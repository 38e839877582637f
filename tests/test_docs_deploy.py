"""The deploying guide's deploy script (``docs/deploying.md``), run as a reader would
run it: with a fresh empty database of each target as the owner's DSN, it upgrades it
through the deploy API, prints what ``chatledger upgrade`` prints, and finds it usable."""

from __future__ import annotations

import asyncio
import functools
import os
import re
import subprocess
import sys
from pathlib import Path

from .conftest import Database
from .support.schema_helpers import dsn_of, fresh_database

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
