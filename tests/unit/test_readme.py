"""The README and the documentation site (``docs/``) hold: their links and section
references resolve, the CLI reference and troubleshooting pages cover every command
and error class, the API reference names every public class, and the README's
getting-started, zett and rein examples (which the site includes) print what they
say they print (run as a reader would, on SQLite). The deploying guide's script runs
on every target in test_docs_deploy.py."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import chatledger
from chatledger.tools.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = sorted((ROOT / "docs").glob("*.md"))


def page(name: str) -> str:
    """The site's page ``docs/NAME``."""
    return (ROOT / "docs" / name).read_text()


def headings(markdown: str) -> list[str]:
    """The headings' text, outside fenced code blocks."""
    found, fenced = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6} (.+)", line)):
            found.append(match.group(1).strip())
    return found


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def section(title: str, markdown: str = README) -> str:
    """The ``## title`` section of ``markdown`` (the README's by default), up to the next ``## ``."""
    start = markdown.index(f"\n## {title}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start : end if end != -1 else None]


def code_blocks(markdown: str) -> list[tuple[str, str]]:
    """Every fenced block: (its language, its text)."""
    return re.findall(r"^```(\w*)\n(.*?)^```$", markdown, re.MULTILINE | re.DOTALL)


@pytest.mark.parametrize("path", [ROOT / "README.md", *DOCS], ids=lambda path: path.name)
def test_links_resolve(path: Path) -> None:
    text = path.read_text()
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        file, _, fragment = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        assert linked.exists(), f"{path.name}: {target} names no file"
        if fragment:
            assert fragment in {anchor(h) for h in headings(linked.read_text())}, f"{path.name}: {target}"


def test_quoted_sections_exist() -> None:
    """Messages and docs that send a reader to a README section by name ("Two roles: owner
    and runtime"), or to a page's (docs/deploying.md, "Two roles: owner and runtime"),
    name one that exists; a page's ``see "…"`` names a section of its own
    (one on another page is a link, which test_links_resolve checks)."""
    names = set(headings(README))
    sources = [*(ROOT / "src").rglob("*.py"), *DOCS]
    for source in sources:
        for name in re.findall(r"README(?:'s)?,? \"([^\"]+)\"", source.read_text()):
            assert any(heading.startswith(name) for heading in names), f"{source.name}: no README {name!r}"
        # A message naming a section of a page: (docs/deploying.md, "Two roles: owner and runtime").
        for file, name in re.findall(r"(docs/[\w-]+\.md),? \"([^\"]+)\"", source.read_text()):
            target = ROOT / file
            assert target.exists(), f"{source.name}: no {file}"
            found = headings(target.read_text())
            assert any(h.startswith(name) for h in found), f"{source.name}: no {file} {name!r}"
    for path in [ROOT / "README.md", *DOCS]:
        own = headings(path.read_text())
        for quoted in re.findall(r'see "([^"]+)"', path.read_text()):
            name = " ".join(quoted.split())  # a name may wrap across lines
            assert any(heading.startswith(name) for heading in own), (
                f"{path.name} refers to a missing {name!r}"
            )


@pytest.mark.parametrize("path", DOCS, ids=lambda path: path.name)
def test_included_readme_parts_exist(path: Path) -> None:
    """The site includes the README's quick start and examples between markers: each
    marker is in the README once, and the part between them holds no link (a link
    relative to the README would break on the site)."""
    for start, end in re.findall(r"^:start-after: (.+)\n:end-before: (.+)$", path.read_text(), re.MULTILINE):
        assert README.count(start) == 1 and README.count(end) == 1, (path.name, start, end)
        part = README.split(start, 1)[1].split(end, 1)[0]
        assert "](" not in part, f"{start}: a link in an included part"


def test_readme_is_a_quick_start() -> None:
    """The README stays short and keeps its two commands and the demo."""
    assert len(README.splitlines()) <= 300
    for shown in ("make demo", "make test", "$ chatledger demo", "hello.py"):
        assert shown in README, shown


def test_api_reference_names_every_public_class() -> None:
    import chatledger.rein
    import chatledger.zett

    reference = page("api.md")
    for name in chatledger.__all__:
        assert f":: chatledger.{name}\n" in reference, name
    for module in (chatledger.zett, chatledger.rein):
        for name in module.__all__:
            documented = f":: {module.__name__}.{name}\n" in reference
            assert documented or name in chatledger.__all__, f"{module.__name__}.{name}"
    for name in ("upgrade", "check", "current", "downgrade", "include_name", "include_object", "app_hooks"):
        assert f":: chatledger.migrate.{name}\n" in reference, name


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The subparsers of ``parser``, by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_cli_reference_lists_every_command() -> None:
    reference = page("cli.md")
    assert ":func: build_parser" in reference  # and the generated listing of every option
    for command in COMMANDS:
        assert f"| `chatledger {command.name}" in reference, command.name
    sessions = subcommands(subcommands(build_parser())["sessions"])
    assert sessions
    for action in sessions:
        assert f"| `chatledger sessions {action}" in reference, action


def test_troubleshooting_covers_every_error_class() -> None:
    troubleshooting = page("troubleshooting.md")
    for name in chatledger.__all__:
        assert f"`{name}`" in troubleshooting or f"`chatledger.{name}`" in troubleshooting, name


def console_runs(block: str) -> list[tuple[str, str]]:
    """A ``console`` block as (command, its output) pairs."""
    runs: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            runs.append((line[2:], []))
        else:
            runs[-1][1].append(line)
    return [(command, "\n".join(output)) for command, output in runs]


def run_example(source: str, output: str, script: str, cwd: Path) -> None:
    """Write ``source`` as ``script`` in ``cwd``, run the console block ``output`` there
    (``python SCRIPT`` lines), and compare what each run printed."""
    (cwd / script).write_text(source)
    env = {key: value for key, value in os.environ.items() if key != "CHATLEDGER_DSN"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    for command, expected in console_runs(output):
        assert command == f"python {script}"
        printed = subprocess.run(
            [sys.executable, script], cwd=cwd, env=env, capture_output=True, text=True, check=True
        ).stdout
        assert printed.rstrip("\n") == expected


def example(title: str, opening: str) -> tuple[str, str]:
    """The ``python`` block of the README's section ``title`` that starts with
    ``opening``, and the ``console`` block right after it."""
    blocks = code_blocks(section(title))
    for index, (language, text) in enumerate(blocks):
        if language == "python" and text.startswith(opening):
            follower = blocks[index + 1]
            assert follower[0] == "console"
            return text, follower[1]
    raise AssertionError(f"no python block starting with {opening!r} in {title!r}")


def test_getting_started_example_prints_what_it_says(tmp_path: Path) -> None:
    source, output = example("Getting started", "import asyncio")
    assert len(source.strip().splitlines()) <= 12
    run_example(source, output, "hello.py", tmp_path)


def test_rein_example_prints_what_it_says(tmp_path: Path) -> None:
    source, output = example("Using it with rein-agent", "from rein import")
    run_example(source, output, "chat.py", tmp_path)


def test_zett_agent_example_prints_what_it_says(tmp_path: Path) -> None:
    source, output = example("Using it with zett-agent", "import asyncio")
    run_example(source, output, "agent.py", tmp_path)
