"""One parametrized fixture runs the whole suite on every test target (server).

Each test session creates a fresh database per target (a temporary SQLite file, a
new PostgreSQL / MySQL database on the target's server), migrates it with the
shipped Alembic revisions, drops it afterwards, and disposes of every engine it
made. The targets and where their servers come from: ``tests/support/backends.py``; what
the targets differ in: ``tests/support/capabilities.py``.

The hooks below:

- check a target's server once, before its first test (starting its container),
  and skip every test of a target that cannot run with ONE reason; when
  ``CHATLEDGER_REQUIRE_BACKENDS`` names the target the run fails at the end, once;
- skip a test marked ``@pytest.mark.requires(capability, ...)`` on targets lacking it;
- deselect the tests of a module marked ``dialect_only`` on the variant targets
  (another driver, another server version: ``Target.varies``);
- put each container target's tests in one pytest-xdist group (``-n 2 --dist
  loadgroup``), so one worker starts its container, once; the tests of the other
  targets spread over the workers one by one, each worker making its own database;
- summarise, per target, its server and how its tests ended, with skip reasons
  counted instead of repeated.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from chatledger.migrate import upgrade_database
from chatledger.zett import LedgerSessionStorage

from .support.backends import TARGETS, Server, Servers, Target, fresh_name, is_required
from .support.capabilities import missing
from .support.facts import facts_of

SERVERS = pytest.StashKey[Servers]()
#: ``user_properties`` names that carry target facts from xdist workers to the controller.
TARGET_PROPERTY = "chatledger_target"
SERVER_PROPERTY = "chatledger_server"
UNAVAILABLE_PROPERTY = "chatledger_unavailable"


def target_of(item: pytest.Item) -> Target | None:
    """The target a test runs on (its ``database`` parameter), or ``None``."""
    callspec = getattr(item, "callspec", None)
    name = callspec.params.get("database") if callspec is not None else None
    return TARGETS.get(name) if isinstance(name, str) else None


def pytest_configure(config: pytest.Config) -> None:
    global _tally
    config.stash[SERVERS] = Servers()
    _tally = Tally()


def pytest_unconfigure(config: pytest.Config) -> None:
    if SERVERS in config.stash:
        config.stash[SERVERS].close()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    variants = [item for item in items if _variant_of_dialect_only(item)]
    if variants:
        config.hook.pytest_deselected(items=variants)
        left_out = set(map(id, variants))
        items[:] = [item for item in items if id(item) not in left_out]
    for item in items:
        target = target_of(item)
        if target is not None:
            if target.container is not None:
                item.add_marker(pytest.mark.xdist_group(target.name))
            item.user_properties.append((TARGET_PROPERTY, target.name))


def _variant_of_dialect_only(item: pytest.Item) -> bool:
    target = target_of(item)
    return target is not None and target.varies and item.get_closest_marker("dialect_only") is not None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    target = target_of(item)
    if target is None:
        return
    found = item.config.stash[SERVERS].resolve(target)
    item.user_properties.append((SERVER_PROPERTY, found.version))
    if found.server is None and facts_of(target.dialect).server:
        item.user_properties.append((UNAVAILABLE_PROPERTY, found.reason))
        pytest.skip(f"{target.name} unavailable: {found.reason}")
    lacking = missing(
        [str(arg) for mark in item.iter_markers("requires") for arg in mark.args], target, found.version
    )
    if lacking:
        pytest.skip(lacking)


# -- the per-target summary -------------------------------------------------------------


@dataclass
class TargetTally:
    server: str = ""
    outcomes: dict[str, str] = field(default_factory=dict)  # nodeid -> outcome
    skips: Counter[str] = field(default_factory=Counter)
    unavailable: str = ""


@dataclass
class Tally:
    targets: dict[str, TargetTally] = field(default_factory=lambda: defaultdict(TargetTally))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    properties = dict(report.user_properties)
    name = properties.get(TARGET_PROPERTY)
    if not isinstance(name, str):
        return
    # Under xdist the reports of every worker reach the controller's hook.
    if _tally is None:
        return
    entry = _tally.targets[name]
    entry.server = str(properties.get(SERVER_PROPERTY) or entry.server)
    if UNAVAILABLE_PROPERTY in properties:
        entry.unavailable = str(properties[UNAVAILABLE_PROPERTY])
    previous = entry.outcomes.get(report.nodeid)
    if report.failed:
        entry.outcomes[report.nodeid] = "failed" if report.when == "call" else "error"
    elif report.skipped:
        entry.outcomes[report.nodeid] = "skipped"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        entry.skips[reason.removeprefix("Skipped: ")] += 1
    elif report.when == "call" and previous is None:
        entry.outcomes[report.nodeid] = "passed"


#: This process's tally (set by ``pytest_configure``).
_tally: Tally | None = None


def _missing_required(tally: Tally) -> dict[str, str]:
    return {
        name: entry.unavailable
        for name, entry in tally.targets.items()
        if entry.unavailable and name in TARGETS and is_required(TARGETS[name])
    }


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _tally is not None and _missing_required(_tally) and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _tally is None or not _tally.targets:
        return
    write = terminalreporter.write_line
    terminalreporter.section("chatledger test targets")
    unavailable = [name for name in TARGETS if name in _tally.targets and _tally.targets[name].unavailable]
    for name in [name for name in TARGETS if name in _tally.targets]:
        entry = _tally.targets[name]
        counts = Counter(entry.outcomes.values())
        server = entry.server or "-"
        if not facts_of(TARGETS[name].dialect).server:
            server = f"SQLite {sqlite3.sqlite_version}"
        summary = ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items()))
        write(f"{name:<20} {server:<44} {TARGETS[name].source}: {summary}")
        if not unavailable:  # with part of the matrix missing, the one line below instead
            for reason, count in entry.skips.most_common():
                write(f"{'':<20} {count:>5} skipped: {reason}")
    if unavailable:
        # pytest's own list of skips (-ra) would repeat the missing targets' reasons.
        terminalreporter.reportchars = terminalreporter.reportchars.replace("s", "")
        write(
            f"{', '.join(unavailable)} not run: `make test` with a Docker engine running builds the test "
            "servers and runs every target (.ci/run sets CHATLEDGER_TEST_POSTGRES_DSN and "
            "CHATLEDGER_TEST_MYSQL_DSN for the rest)",
            yellow=True,
        )
    for name, reason in _missing_required(_tally).items():
        terminalreporter.write_line(
            f"FAILED: {name} is required by CHATLEDGER_REQUIRE_BACKENDS but unavailable: {reason}",
            red=True,
            bold=True,
        )


# -- fixtures ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def servers(pytestconfig: pytest.Config) -> Servers:
    return pytestconfig.stash[SERVERS]


@dataclass
class Database:
    """A fresh, migrated database of one target for this test session."""

    backend: str
    url: URL
    #: The server it lives on (``None`` for SQLite), for tests that need more databases.
    server: Server | None
    #: The target's name (the test id), e.g. ``postgresql-17``.
    target: str = ""
    #: The server's version string (SQLite's library version for SQLite).
    version: str = ""


@pytest.fixture(scope="session", params=list(TARGETS))
async def database(
    request: pytest.FixtureRequest, servers: Servers, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Database]:
    target = TARGETS[request.param]
    if not facts_of(target.dialect).server:
        path: Path = tmp_path_factory.mktemp("sqlite") / "ledger.sqlite3"
        url = URL.create("sqlite+aiosqlite", database=str(path))
        await upgrade_database(url)
        yield Database("sqlite", url, None, target.name, sqlite3.sqlite_version)
        return
    found = servers.resolve(target)
    if found.server is None:  # the setup hook skipped the test already
        pytest.skip(f"{target.name} unavailable: {found.reason}")
    server = found.server
    name = fresh_name()
    url = await server.create_database(name)
    try:
        await server.default_to_serializable(name)
        await upgrade_database(url)
        yield Database(target.dialect, url, server, target.name, found.version)
    finally:
        await server.drop_database(name)


@pytest.fixture
def backend(database: Database) -> str:
    """The dialect name of the test's target: "sqlite", "postgresql" or "mysql"."""
    return database.backend


@pytest.fixture
async def storage(database: Database) -> AsyncIterator[LedgerSessionStorage]:
    async with LedgerSessionStorage(database.url) as opened:
        yield opened


@pytest.fixture
def session_id() -> str:
    """A session id no other test uses (tests share one database per target)."""
    return f"s-{uuid.uuid4()}"
