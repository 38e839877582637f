"""The conformance suites (``chatledger.testing``) are test code: the library never loads them."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "module",
    ["chatledger", "chatledger.zett", "chatledger.rein", "chatledger.openai_agents", "chatledger.adk"],
)
def test_library_imports_no_test_code(module: str) -> None:
    """The conformance suites are imported by test modules only: the library never loads
    them, nor pytest."""
    probe = (
        f"import sys, {module}; "
        "print(sorted(name for name in sys.modules if name.startswith('chatledger.testing') "
        "or name.split('.')[0] in ('pytest', '_pytest')))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    assert loaded.stdout.strip() == "[]"
