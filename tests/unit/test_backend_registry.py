"""The backend registry (:mod:`chatledger.dialects`): every registered backend provides
every hook and field it must, the registry agrees with the test targets, the golden
DDL files and the benchmark, and no code outside ``chatledger/dialects/`` compares a
dialect (or driver, or scheme) name -- it asks the backend object instead.

A stub fourth backend, one small module registered with one line, makes
:func:`gaps` list exactly what it still lacks: the checklist of adding a backend.
No database is needed.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Iterable, Iterator
from dataclasses import fields, replace
from pathlib import Path
from types import ModuleType

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, UniqueConstraint
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

import chatledger
from chatledger import dialects
from chatledger.dialects import base
from chatledger.schema import metadata
from chatledger.tools.adopt import CONVERSIONS

from ..support.backends import ALL_TARGETS, DIALECTS, Target

PACKAGE = Path(chatledger.__file__).parent
ROOT = PACKAGE.parents[1]
GOLDEN = Path(__file__).parents[1] / "golden"
#: Where no comparison with a dialect name may appear: the library and tools,
#: Alembic's env.py and the scripts in bench/. Not chatledger/dialects/, where each
#: backend is defined; not the frozen revisions (migrations/versions/*.py), which tests/test_revisions.py pins
#: byte for byte and which import nothing of chatledger, so cannot ask a backend:
#: they stay as they were recorded.
CHECKED = [
    *(path for path in sorted(PACKAGE.rglob("*.py")) if PACKAGE / "dialects" not in path.parents),
    ROOT / "migrations" / "env.py",
    *sorted((ROOT / "bench").glob("*.py")),
]


def _names(backends: Iterable[dialects.Backend]) -> frozenset[str]:
    """Every name a backend goes by: dialect, driver, DSN schemes, driver aliases."""
    return frozenset(
        name
        for known in backends
        for name in (known.name, known.driver, *known.schemes, *known.driver_aliases)
        if name
    )


def _golden_dialects() -> dict[str, set[str]]:
    """Revision -> the dialects it has a golden DDL file of (``ddl_<revision>_<dialect>.sql``)."""
    found: dict[str, set[str]] = {}
    for path in GOLDEN.glob("ddl_*.sql"):
        _, revision, dialect = path.stem.split("_", 2)
        found.setdefault(revision, set()).add(dialect)
    return found


def gaps(
    backends: Iterable[dialects.Backend],
    targets: Iterable[Target] = ALL_TARGETS,
    golden: dict[str, set[str]] | None = None,
) -> dict[str, list[str]]:
    """What each backend still lacks, by ``dialect+driver``; one empty list each when the
    registry is complete. A missing entry would otherwise fail only when its path runs
    (``--sql``, a downgrade, an adoption, the bench)."""
    golden = _golden_dialects() if golden is None else golden
    targets = list(targets)
    missing: dict[str, list[str]] = {}
    for known in backends:
        lacks = [f"field {name}" for name in known.lacking()]
        if known.adoption and known.adoption not in CONVERSIONS:
            lacks.append(f"adopt's conversion {known.adoption!r} (chatledger.tools.adopt.CONVERSIONS)")
        if known.zett_driver and known.zett_driver.partition("+")[0] not in known.schemes:
            lacks.append(f"a zett driver of its own dialect (not {known.zett_driver})")
        default = dialects.backend(known.name).driver
        if not any(
            target.dialect == known.name and (target.driver or default) == known.driver for target in targets
        ):
            lacks.append("a test target (tests/support/backends.py ALL_TARGETS)")
        if known.driver == default:
            if known.name not in DIALECTS:
                lacks.append("a dialect of the test matrix (tests/support/backends.py DIALECTS)")
            lacks += [
                f"golden DDL of revision {revision} (tests/golden/ddl_{revision}_{known.name}.sql)"
                for revision, have in sorted(golden.items())
                if known.name not in have
            ]
        missing[f"{known.name}+{known.driver}"] = lacks
    return missing


def test_every_registered_backend_provides_every_hook() -> None:
    registered = dialects.registered()
    assert {f"{known.name}+{known.driver}" for known in registered} == {
        "postgresql+asyncpg",
        "postgresql+psycopg",
        "mysql+aiomysql",
        "sqlite+aiosqlite",
    }
    assert gaps(registered) == {f"{known.name}+{known.driver}": [] for known in registered}


def test_the_registry_agrees_with_the_targets_golden_files_and_bench() -> None:
    registered = dialects.registered()
    dialect_names = {known.name for known in registered}
    assert dialect_names == set(DIALECTS) == {target.dialect for target in ALL_TARGETS}
    assert all(have == dialect_names for have in _golden_dialects().values()), _golden_dialects()
    # Every target runs a registered driver.
    for target in ALL_TARGETS:
        assert dialects.backend(target.dialect, target.driver).name == target.dialect
    # The bench measures zett-agent through a driver the DSN rules know.
    for known in registered:
        scheme, _, driver = known.zett_driver.partition("+")
        assert scheme in known.schemes
        assert dialects.backend(known.name, driver).name == known.name


# -- no dialect name compared outside chatledger/dialects/ ----------------------------


def _strings(node: ast.AST, named: dict[str, set[str]]) -> set[str]:
    """The string constants ``node`` stands for: a constant, a tuple/list/set of them,
    or a module-level name bound to one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return set().union(*(_strings(element, named) for element in node.elts))
    if isinstance(node, ast.Name):
        return named.get(node.id, set())
    return set()


def comparisons(source: str, names: frozenset[str], *, tests: bool = False) -> list[str]:
    """Each comparison (``==``, ``!=``, ``in``, ``not in``, ``match`` cases) with one of
    ``names`` in ``source``, and each dict literal keyed by two or more of them (a
    registry keyed by dialect name), as ``line: code``.

    ``tests``: the rules of a test module. A dict keyed by dialect is allowed there (a
    test's own table of per-backend statements: a backend without a row fails with a
    ``KeyError`` naming it, where a branch would silently give it another backend's
    case), and so is a comparison inside an ``assert`` (an outcome checked, such as a
    report naming its backend, not a branch taken)."""
    tree = ast.parse(source)
    asserted = (
        {
            id(node)
            for statement in ast.walk(tree)
            if isinstance(statement, ast.Assert)
            for node in ast.walk(statement)
        }
        if tests
        else set()
    )
    named: dict[str, set[str]] = {}
    for statement in tree.body:
        targets = statement.targets if isinstance(statement, ast.Assign) else []
        if isinstance(statement, ast.AnnAssign):
            targets = [statement.target]
        for target in targets:
            value = statement.value
            if isinstance(target, ast.Name) and value is not None and (found := _strings(value, {}) & names):
                named[target.id] = found
    hits: list[str] = []
    for node in ast.walk(tree):
        operands: list[ast.AST] = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.MatchValue):
            operands = [node.value]
        elif isinstance(node, ast.Dict):
            if tests:
                continue
            keys = [key for key in node.keys if key is not None]
            if len(set().union(*(_strings(key, {}) for key in keys)) & names) >= 2:
                hits.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
            continue
        if id(node) not in asserted and any(_strings(operand, named) & names for operand in operands):
            hits.append(f"{getattr(node, 'lineno', '?')}: {ast.unparse(node)[:80]}")
    return hits


def test_the_check_finds_comparisons() -> None:
    names = _names(dialects.registered())
    source = """
KINDS = ("postgresql", "mysql")
if dialect.name == "mysql": pass
if url.get_driver_name() != "asyncpg": pass
if backend in KINDS: pass
if scheme not in ("postgres", "mariadb"): pass
REGISTRY = {"postgresql": 1, "sqlite": 2}
match dialect:
    case "sqlite": pass
ok = backend.server and name == "chatledger"
"""
    assert [hit.split(":")[0] for hit in comparisons(source, names)] == ["3", "4", "5", "6", "7", "9"]


def test_the_check_of_tests_allows_tables_and_asserted_outcomes() -> None:
    names = _names(dialects.registered())
    source = """
LOCKS = {"postgresql": "SELECT 1", "mysql": "SELECT 2"}
assert report.backend == "sqlite"
if database.backend == "mysql": pass
timeout = "connect_timeout" if url.get_driver_name() == "psycopg" else "timeout"
"""
    assert [hit.split(":")[0] for hit in comparisons(source, names, tests=True)] == ["4", "5"]


def test_no_test_compares_a_dialect_name() -> None:
    """A test that runs on some backends says so with a capability marker
    (``tests/support/capabilities.py``); one that must know how its backend (or driver)
    behaves reads a fact (``tests/support/facts.py``): a new backend then gets a skip
    naming what it lacks, or a ``KeyError`` naming the row it needs, never another
    backend's branch. Only ``tests/support/`` defines the targets by their names."""
    tests = Path(__file__).parents[1]
    names = _names(dialects.registered())
    found = {
        str(path.relative_to(ROOT)): hits
        for path in sorted(tests.rglob("*.py"))
        if tests / "support" not in path.parents
        and (hits := comparisons(path.read_text(), names, tests=True))
    }
    assert found == {}, "ask a capability marker or a fact (tests/support/) instead"


@pytest.mark.parametrize("path", CHECKED, ids=lambda path: str(path.relative_to(ROOT)))
def test_no_dialect_name_is_compared_outside_the_dialects_package(path: Path) -> None:
    assert comparisons(path.read_text(), _names(dialects.registered())) == [], (
        f"{path.relative_to(ROOT)} compares dialect names: ask the backend object "
        "(chatledger.dialects.backend(...)) for a field instead"
    )


# -- a stub fourth backend -----------------------------------------------------------

#: The whole of a fourth backend's first module: a name, a driver and DSN scheme, and
#: one statement borrowed from PostgreSQL. The registry test then lists the rest.
STUB_MODULE = '''
"""CockroachDB: a stub, registered to see what a fourth backend still lacks."""

from chatledger.dialects.base import Backend
from chatledger.dialects.postgresql import ASYNCPG

BACKEND = Backend(
    name="cockroachdb",
    driver="asyncpg",
    display_name="CockroachDB",
    schemes=("cockroachdb",),
    append_message=ASYNCPG.append_message,
)
'''


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The registry as it is, restored after the test (a stub registered in between)."""
    monkeypatch.setattr(base, "_REGISTRY", {name: list(same) for name, same in base._REGISTRY.items()})
    yield


def _stub_module(tmp_path: Path) -> ModuleType:
    path = tmp_path / "chatledger_stub_backend.py"
    path.write_text(STUB_MODULE)
    spec = importlib.util.spec_from_file_location("chatledger_stub_backend", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules.pop("chatledger_stub_backend", None)
    return module


def test_a_stub_fourth_backend_lists_exactly_what_it_lacks(registry: None, tmp_path: Path) -> None:
    stub = _stub_module(tmp_path)
    dialects.register(stub.BACKEND)  # the one registry line

    assert dialects.backend("cockroachdb") is stub.BACKEND
    missing = gaps(dialects.registered())
    assert {name: lacks for name, lacks in missing.items() if lacks} == {
        "cockroachdb+asyncpg": [
            "field merge_insert",
            "field save_rein_session",
            "field greatest",
            "field transient_codes",
            "field transaction_open",
            "field storage_size",
            "field db_system",
            "field resolve_dsn",
            "field migration_transaction",
            "field offline_script",
            "field drop_guard",
            "field add_listeners",
            "field adoption",
            "field char_length",
            "field zett_driver",
            "field create_database",
            "field drop_database",
            "field analyze",
            "field server_version",
            "a test target (tests/support/backends.py ALL_TARGETS)",
            "a dialect of the test matrix (tests/support/backends.py DIALECTS)",
            "golden DDL of revision 0001 (tests/golden/ddl_0001_cockroachdb.sql)",
            "golden DDL of revision 0003 (tests/golden/ddl_0003_cockroachdb.sql)",
            "golden DDL of revision 0004 (tests/golden/ddl_0004_cockroachdb.sql)",
            "golden DDL of revision 0005 (tests/golden/ddl_0005_cockroachdb.sql)",
            "golden DDL of revision 0006 (tests/golden/ddl_0006_cockroachdb.sql)",
            "golden DDL of revision 0007 (tests/golden/ddl_0007_cockroachdb.sql)",
            "golden DDL of revision 0008 (tests/golden/ddl_0008_cockroachdb.sql)",
            "golden DDL of revision 0009 (tests/golden/ddl_0009_cockroachdb.sql)",
            "golden DDL of revision 0010 (tests/golden/ddl_0010_cockroachdb.sql)",
            "golden DDL of revision 0011 (tests/golden/ddl_0011_cockroachdb.sql)",
        ]
    }
    # A path it lacks fails by name, not with a KeyError.
    with pytest.raises(NotImplementedError, match="no migration_transaction"):
        stub.BACKEND.migration_transaction(None, 1.0)


async def test_engine_listeners_are_a_hook_every_backend_provides(registry: None, tmp_path: Path) -> None:
    """A ledger's own engines and its view of the caller's (``adopt_engine``) get their
    listeners from the backend (SQLite's reset of a cancelled statement), never from one
    backend's helper called by name. (Creating the engine opens no connection.)"""
    required = {known.name for known in fields(base.Backend) if known.metadata.get("required")}
    assert "add_listeners" in required
    for known in dialects.registered():
        assert "add_listeners" not in known.lacking(), known.name
    given: list[AsyncEngine] = []
    base._REGISTRY["sqlite"] = [replace(dialects.backend("sqlite"), add_listeners=given.append)]
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'never-opened.db'}")
    try:
        view, found = dialects.adopt_engine(engine)
        assert given == [view] and view is not engine and found is dialects.backend("sqlite")
    finally:
        await engine.dispose()


def test_a_backend_registered_twice_is_refused(registry: None) -> None:
    with pytest.raises(ValueError, match="registered already"):
        dialects.register(dialects.backend("sqlite"))


def test_merge_insert_refuses_a_table_with_another_unique_key() -> None:
    """MySQL's ``ON DUPLICATE KEY UPDATE`` meets any unique key, ``ON CONFLICT`` the
    primary key only: every backend's ``merge_insert`` refuses a table with another, and
    builds the LangGraph tables' statements."""
    table = Table(
        "merged",
        MetaData(),
        Column("id", Integer, primary_key=True),
        Column("name", String(20)),
        UniqueConstraint("name", name="uq_merged_name"),
    )
    for backend in dialects.registered():
        with pytest.raises(ValueError, match=r"merged: .*uq_merged_name"):
            backend.merge_insert(table, ())
        for name in ("langgraph_checkpoints", "langgraph_blobs", "langgraph_writes"):
            backend.merge_insert(metadata.tables[name], ())
