"""docs/telemetry.md names every span the adapters make: each
``telemetry.operation(ledger, "<framework>", "<operation>", ...)`` in the source is the
span ``chatledger.<framework>.<operation>``, and the guide lists no span that none makes.
An operation named by a parameter of a helper (LangGraph's ``_run(call, "put", ...)``)
is each string its module passes to that helper there."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _passed_to(tree: ast.Module, call: ast.Call, parameter: str) -> set[str]:
    """The strings the module passes as ``parameter`` to the function around ``call``
    that has it."""
    helpers = [
        helper
        for helper in ast.walk(tree)
        if isinstance(helper, ast.FunctionDef | ast.AsyncFunctionDef)
        and any(node is call for node in ast.walk(helper))
        and parameter in [argument.arg for argument in helper.args.args]
    ]
    strings: set[str] = set()
    for helper in helpers:
        names = [argument.arg for argument in helper.args.args if argument.arg not in ("self", "cls")]
        index = names.index(parameter)
        for caller in ast.walk(tree):
            if not isinstance(caller, ast.Call):
                continue
            func = caller.func
            callee = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if callee != helper.name:
                continue
            given = [keyword.value for keyword in caller.keywords if keyword.arg == parameter]
            given += caller.args[index : index + 1]
            strings |= {value.value for value in given if isinstance(value, ast.Constant)}
    return strings


def spans_in_source() -> set[str]:
    found: set[str] = set()
    for path in (ROOT / "src" / "chatledger").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "operation"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "telemetry"
            ):
                framework, name = node.args[1], node.args[2]
                assert isinstance(framework, ast.Constant), path
                if isinstance(name, ast.Name):
                    operations = _passed_to(tree, node, name.id)
                    assert operations, (path, name.id)
                else:
                    assert isinstance(name, ast.Constant), path
                    operations = {name.value}
                found |= {f"chatledger.{framework.value}.{operation}" for operation in operations}
    return found


def test_the_guide_lists_every_span() -> None:
    spans = spans_in_source()
    assert {"chatledger.zett.append", "chatledger.openai.add_items", "chatledger.adk.append_event"} <= spans
    guide = (ROOT / "docs" / "telemetry.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"`(chatledger\.[a-z_]+\.[a-z_]+)`", guide))
    events = {"chatledger.retry.wait", "chatledger.settle.found", "chatledger.sequence.first"}
    assert spans - listed == set()
    adapters = {"zett", "rein", "openai", "adk", "langgraph"}
    assert {name for name in listed - spans if name.split(".")[1] in adapters} == set()
    assert not events & spans
