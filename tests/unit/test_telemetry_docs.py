"""docs/telemetry.md names every span the adapters make: each
``telemetry.operation(ledger, "<framework>", "<operation>", ...)`` in the source is the
span ``chatledger.<framework>.<operation>``, and the guide lists no span that none makes."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def spans_in_source() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "src" / "chatledger").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "operation"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "telemetry"
            ):
                framework, name = node.args[1], node.args[2]
                assert isinstance(framework, ast.Constant) and isinstance(name, ast.Constant), path
                found.add(f"chatledger.{framework.value}.{name.value}")
    return found


def test_the_guide_lists_every_span() -> None:
    spans = spans_in_source()
    assert {"chatledger.zett.append", "chatledger.openai.add_items", "chatledger.adk.append_event"} <= spans
    guide = (ROOT / "docs" / "telemetry.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"`(chatledger\.[a-z_]+\.[a-z_]+)`", guide))
    events = {"chatledger.retry.wait", "chatledger.settle.found", "chatledger.sequence.first"}
    assert spans - listed == set()
    assert {
        name for name in listed - spans if name.split(".")[1] in {"zett", "rein", "openai", "adk"}
    } == set()
    assert not events & spans
