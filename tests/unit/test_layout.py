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


#: The adapter packages and the frameworks they load: what the parser and the core never import.
ADAPTERS = ("chatledger.zett", "chatledger.rein", "chatledger.openai_agents", "chatledger.adk")
FRAMEWORKS = ("zett_agent", "rein", "agents", "google.adk")


def _loaded(modules: str) -> list[str]:
    probe = (
        f"import sys, {modules}; "
        f"adapters = {ADAPTERS + FRAMEWORKS!r}; "
        "print(sorted(name for name in sys.modules if name.startswith(adapters)))"
    )
    found = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    return [name for name in found.stdout.strip().strip("[]").split(", ") if name]


def test_the_command_lines_parser_loads_no_adapter_or_framework() -> None:
    """``chatledger --help`` stays cheap: the registry of session kinds is data, and each
    kind's operations are imported only when a command first needs them."""
    assert _loaded("chatledger.tools.cli; chatledger.tools.cli.build_parser()") == []


@pytest.mark.parametrize("module", ["chatledger.kinds", "chatledger.stats", "chatledger.retention"])
def test_the_core_imports_no_adapter(module: str) -> None:
    """The core knows no framework: stats, retention and the registry reach the adapters
    only through the registry, at run time."""
    assert _loaded(module) == []
