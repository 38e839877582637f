"""The library a user imports loads no tool code (the CLI, demo, benchmark, stress runner)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["chatledger", "chatledger.zett", "chatledger.rein"])
def test_library_imports_no_tool_module(module: str) -> None:
    probe = (
        f"import sys, {module}; "
        "print(sorted(name for name in sys.modules if name.startswith('chatledger.tools')))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    assert loaded.stdout.strip() == "[]"
