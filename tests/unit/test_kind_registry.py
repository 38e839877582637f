"""The registry of session kinds (:mod:`chatledger.kinds`): every registered kind gives
every datum and operation it must, and has its revision's golden DDL, its extra, its
contract in ``chatledger.testing``, a test running that contract, its kind driver
(``chatledger.testing.kinds``) and its docs page;
and no code outside the adapter packages and the registry compares a kind's name --
it asks the kind object instead.

A stub sixth kind, one small package registered with one line, makes :func:`gaps`
list exactly what it still lacks: the checklist of adding a framework
(docs/architecture.md, "Adding a framework"). No database is needed.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

import chatledger
from chatledger import kinds
from chatledger.kinds import SessionKind, base
from chatledger.schema import metadata
from chatledger.testing import CONTRACTS
from chatledger.testing.kinds import driver_of

from .test_backend_registry import comparisons

PACKAGE = Path(chatledger.__file__).parent
ROOT = PACKAGE.parents[1]
TESTS = ROOT / "tests"
GOLDEN = TESTS / "golden"
DOCS = ROOT / "docs"


def _names(registered: Iterable[SessionKind]) -> frozenset[str]:
    """Every name a kind goes by: its name, its label in reports, its extra."""
    return frozenset(name for kind in registered for name in (kind.name, kind.label, kind.extra))


def _own(kind: SessionKind) -> Path | None:
    """The kind's adapter package's folder, if it is chatledger's."""
    top, _, rest = kind.package.partition(".")
    return PACKAGE.joinpath(*rest.split(".")) if top == "chatledger" and rest else None


def checked() -> list[Path]:
    """Where no kind's name may be compared: the library and tools but the adapter
    packages and the registry (chatledger/kinds/), Alembic's env.py, bench/."""
    exempt = [PACKAGE / "kinds", *(own for kind in kinds.registered() if (own := _own(kind)) is not None)]
    return [
        *(
            path
            for path in sorted(PACKAGE.rglob("*.py"))
            if not any(folder == path.parent or folder in path.parents for folder in exempt)
        ),
        ROOT / "migrations" / "env.py",
        *sorted((ROOT / "bench").glob("*.py")),
    ]


def _extras() -> tuple[set[str], str]:
    """The extras pyproject.toml declares, and what its ``dev`` extra installs."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return set(extras), " ".join(extras.get("dev", []))


def _created_tables() -> dict[str, set[str]]:
    """Dialect -> the tables some golden DDL file creates (a frozen revision's)."""
    found: dict[str, set[str]] = {}
    for path in GOLDEN.glob("ddl_*.sql"):
        dialect = path.stem.split("_", 2)[2]
        for line in path.read_text().splitlines():
            if line.startswith("CREATE TABLE "):
                found.setdefault(dialect, set()).add(line.split()[2].strip('`"'))
    return found


def _contract(kind: SessionKind) -> str | None:
    """The name of the kind's contract class in ``chatledger.testing``, if it has one."""
    module = f"chatledger.testing.{kind.package.rsplit('.', 1)[-1]}"
    return next((name for name, where in CONTRACTS.items() if where == module), None)


def _runs(contract: str) -> bool:
    """Whether a test module subclasses ``contract`` (runs it on a store)."""
    for path in TESTS.glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(parent, ast.Name) and parent.id == contract for parent in node.bases
            ):
                return True
    return False


def gaps(registered: Iterable[SessionKind]) -> dict[str, list[str]]:
    """What each kind still lacks, by name; one empty list each when the registry is
    complete. A missing part would otherwise fail only when its path runs (a
    ``sessions`` command, retention, an export of a database holding its sessions)."""
    extras, dev = _extras()
    created = _created_tables()
    schema_tables = set(metadata.tables.values())
    missing: dict[str, list[str]] = {}
    for kind in registered:
        lacks = [f"datum {name} (chatledger.kinds.SessionKind)" for name in kind.lacking()]
        lacks += kinds.missing_operations(kind)
        if kind.extra not in extras:
            lacks.append(f"its extra {kind.extra!r} (pyproject.toml [project.optional-dependencies])")
        elif kind.extra not in dev:
            lacks.append(f"its extra {kind.extra!r} in the dev extra (the test suite installs it)")
        if not kind.tables:
            lacks.append(
                "a revision creating its tables (migrations/versions/), with their golden DDL (tests/golden/)"
            )
        for table in kind.tables:
            if table not in schema_tables:
                lacks.append(f"its table {table.name} in chatledger.schema")
            for dialect, tables in sorted(created.items()):
                if table.name not in tables:
                    lacks.append(
                        f"golden DDL creating {table.name} on {dialect} (a revision's, tests/golden/)"
                    )
        contract = _contract(kind)
        module = f"chatledger.testing.{kind.package.rsplit('.', 1)[-1]}"
        if contract is None:
            lacks.append(f"its contract in chatledger.testing ({module}, listed in CONTRACTS)")
        if contract is None or not _runs(contract):
            lacks.append("a test module running its contract on its store (tests/test_*.py)")
        if contract is None or driver_of(kind) is None:
            lacks.append(f"its kind driver ({module}.driver(), chatledger.testing.kinds)")
        if not (DOCS / f"{kind.extra}.md").is_file():
            lacks.append(f"its docs page (docs/{kind.extra}.md)")
        missing[kind.name] = lacks
    return missing


def test_every_registered_kind_gives_everything() -> None:
    registered = kinds.registered()
    assert [kind.name for kind in registered] == ["zett", "rein", "openai", "adk", "langgraph"]
    assert gaps(registered) == {kind.name: [] for kind in registered}


def test_langgraph_lacks_nothing() -> None:
    """LangGraph, the fifth kind, touches only its own package, its registration, its
    revision and golden DDL, its contract and its docs: the gap check lists nothing."""
    assert gaps([kinds.LANGGRAPH]) == {"langgraph": []}
    assert kinds.lookup("langgraph") is kinds.LANGGRAPH and kinds.installed(kinds.LANGGRAPH)
    assert kinds.missing_operations(kinds.LANGGRAPH) == []


def test_every_kind_states_its_own_tables_and_records() -> None:
    """Each table of the schema a kind's records travel in is one of that kind's tables,
    and no table is two kinds'."""
    owners: dict[str, str] = {}
    for kind in kinds.registered():
        own = {table.name for table in kind.tables}
        assert kind.tombstone_rows().table.name in own, kind.name
        for layout in kind.records:
            assert {table.name for table in kinds.record_tables(layout).values()} <= own, kind.name
        for name in own:
            assert owners.setdefault(name, kind.name) == kind.name, name
    stores = [kind.mark_store for kind in kinds.registered()]
    assert len(set(stores)) == len(stores), stores  # a mark store each


def test_choosing_kinds() -> None:
    assert kinds.chosen(None) == kinds.registered()
    assert kinds.chosen(["adk", "openai"]) == (kinds.OPENAI, kinds.ADK)  # registry order, once each
    assert kinds.chosen(["openai", "all"]) == kinds.registered()
    assert kinds.chosen([], [kinds.ZETT]) == (kinds.ZETT,)
    with pytest.raises(ValueError, match="kinds must name some of zett, rein, openai, adk, langgraph"):
        kinds.chosen(["crew"])


# -- no kind's name compared outside the adapters and the registry ----------------------


def test_the_check_counts_framework_name_comparisons() -> None:
    names = _names(kinds.registered())
    source = """
if kind == "zett": pass
if "adk" in kinds: pass
if label != "OpenAI Agents": pass
EXTRAS = {"openai": "openai-agents", "adk": "adk"}
match kind:
    case "rein": pass
ok = kinds.lookup("adk") and name == "chatledger"
"""
    assert [hit.split(":")[0] for hit in comparisons(source, names)] == ["2", "3", "4", "5", "7"]


def test_the_registry_and_adapters_are_the_only_places_exempt() -> None:
    paths = checked()
    assert PACKAGE / "retention.py" in paths and PACKAGE / "tools" / "sessions.py" in paths
    assert not any(PACKAGE / "kinds" in path.parents or PACKAGE / "adk" in path.parents for path in paths)


@pytest.mark.parametrize("path", checked(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_framework_name_is_compared_outside_the_adapters_and_the_registry(path: Path) -> None:
    assert comparisons(path.read_text(), _names(kinds.registered())) == [], (
        f"{path.relative_to(ROOT)} compares a kind's name: ask the kind object "
        "(chatledger.kinds.lookup(...), or loop over chatledger.kinds.registered()) instead"
    )


# -- a stub sixth kind --------------------------------------------------------------------

#: The whole of a sixth framework's first adapter package: its ``kind`` module, with the
#: first of its operations. The registry test then lists the rest.
STUB_KIND = '''
"""CrewAI's sessions as the tools handle them: a stub, to see what a sixth kind lacks."""

from chatledger.kinds import Listing


class Operations:
    def __init__(self, url, options):
        self.url = url

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info):
        return None

    async def listing(self, limit):
        return Listing("crew sessions", (), [])
'''


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The registry as it is, restored after the test (a stub registered in between)."""
    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    yield


@pytest.fixture
def stub_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    package = tmp_path / "chatledger_stub_crew"
    package.mkdir()
    (package / "__init__.py").write_text('"""A stub adapter package."""\n')
    (package / "kind.py").write_text(STUB_KIND)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield package.name
    for name in [name for name in sys.modules if name.startswith(package.name)]:
        del sys.modules[name]


def test_a_stub_sixth_kind_lists_exactly_what_it_lacks(registry: None, stub_package: str) -> None:
    kinds.register(SessionKind("crew", "CrewAI", "crewai", "crewai", stub_package))  # the line

    assert kinds.lookup("crew").package == stub_package
    assert kinds.names()[-1] == "crew" and kinds.chosen(["all"])[-1].name == "crew"
    missing = gaps(kinds.registered())
    assert {name: lacks for name, lacks in missing.items() if lacks} == {
        "crew": [
            "datum tables (chatledger.kinds.SessionKind)",
            "datum tombstones (chatledger.kinds.SessionKind)",
            "datum records (chatledger.kinds.SessionKind)",
            "datum counters (chatledger.kinds.SessionKind)",
            "operation show",
            "operation find",
            "operation delete",
            "operation purge",
            "its extra 'crewai' (pyproject.toml [project.optional-dependencies])",
            "a revision creating its tables (migrations/versions/), with their golden DDL (tests/golden/)",
            "its contract in chatledger.testing (chatledger.testing.chatledger_stub_crew, listed in "
            "CONTRACTS)",
            "a test module running its contract on its store (tests/test_*.py)",
            "its kind driver (chatledger.testing.chatledger_stub_crew.driver(), chatledger.testing.kinds)",
            "its docs page (docs/crewai.md)",
        ]
    }
    # A path it lacks fails by name, not with an AttributeError or a KeyError.
    with pytest.raises(LookupError, match="'crew' states no tombstones"):
        kinds.lookup("crew").tombstone_rows()


def test_a_kind_without_its_adapter_lacks_every_operation(registry: None) -> None:
    kinds.register(SessionKind("crew", "CrewAI", "crewai", "crewai", "chatledger_no_such_package"))
    assert kinds.missing_operations(kinds.lookup("crew")) == [
        "its operations module chatledger_no_such_package.kind (class Operations)"
    ]
    assert not kinds.installed(kinds.lookup("crew"))


def test_a_kind_registered_twice_or_named_all_is_refused(registry: None) -> None:
    with pytest.raises(ValueError, match="registered already"):
        kinds.register(kinds.ZETT)
    with pytest.raises(ValueError, match="reserved"):
        kinds.register(SessionKind("all", "All", "all", "all", "chatledger.all"))
