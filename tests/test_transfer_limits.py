"""What an import or copy meets at the target's edges (issue 17, fault 6, and the
importer's errors): rows larger than the target takes, a connection lost or a COMMIT
whose answer is lost, a schema changed by hand.

A row over the target's statement limit (MySQL's ``max_allowed_packet``) used to reach
MariaDB, which dropped the connection: the import stopped at it with "Lost
connection" (``copy`` naming the *source*), and no session after it was copied. Now
each row is checked against the limit before it is sent, as ``append`` checks it: the
session is named with the row's size, the rest goes on, and the command exits 1.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from rein.ir import Message
from rein.session import Session
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool
from zett_agent.messages import UserMessage

from chatledger.dsn import as_argument, display
from chatledger.engine import Ledger
from chatledger.errors import SchemaNotReady
from chatledger.migrate import upgrade_database
from chatledger.rein import LedgerSessionStore
from chatledger.tools import importer, transfer
from chatledger.tools.bench import Seeder
from chatledger.tools.cli import run
from chatledger.tools.importer import Importer, read_records
from chatledger.tools.rows import Record
from chatledger.tools.transfer import copy, import_file
from chatledger.zett import LedgerSessionStorage

from .conftest import Database
from .support.backends import Server
from .support.fresh import fresh_database
from .support.proxy import running_proxy
from .support.schema_helpers import execute
from .support.throwaway import ThrowawayMariaDB, require
from .test_transfer import dsn_of, export_of, fill, source, write_file

pytestmark = pytest.mark.one_transaction_at_a_time

__all__ = ["source"]  # a fixture, used by name

#: The statement limit the tests give the target: a quarter MiB.
LIMIT = 256 * 1024
BIG_MESSAGE = "big-message"
BIG_REIN = "big-rein"
#: Sorted after the big ones: a session the import reaches after them.
AFTER = "many-small"


async def sources_with_big_rows(url: URL) -> list[str]:
    """fill's sessions, a zett session with one message over :data:`LIMIT` between two
    small ones, a rein session over it, and (after them) a session of many small
    messages that together exceed it: the ids that fit."""
    ids = await fill(url)
    async with LedgerSessionStorage(url) as storage:
        for text in ("before", "x" * (LIMIT + 1000), "after"):
            await storage.append(BIG_MESSAGE, "r", UserMessage(content=text))
    async with LedgerSessionStore(url) as store:
        await store.asave(BIG_REIN, Session(messages=[Message(role="user", content="y" * (LIMIT + 1000))]))
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        await Seeder("chatledger", engine, datetime(2026, 1, 1, tzinfo=UTC)).session(AFTER, 1500, 0, 0)
    finally:
        await engine.dispose()
    return [*ids, AFTER]


def without_big(export: dict[str, Any]) -> dict[str, Any]:
    return {
        "sessions": {key: value for key, value in export["sessions"].items() if key != BIG_MESSAGE},
        "rein": {key: value for key, value in export["rein"].items() if key != BIG_REIN},
    }


@contextlib.contextmanager
def target_limit(monkeypatch: pytest.MonkeyPatch, limit: int) -> Iterator[None]:
    """Every ledger's statement limit at most ``limit``, as a server's would be."""
    original = Ledger.ensure_ready

    async def ensure_ready(self: Ledger) -> None:
        await original(self)
        self.statement_limit = min(self.statement_limit, limit)

    with monkeypatch.context() as patch:
        patch.setattr(Ledger, "ensure_ready", ensure_ready)
        yield


def assert_named_and_rest_imported(out: str, limit: int) -> None:
    assert f"zett session {BIG_MESSAGE!r}: its message 2 needs up to" in out, out
    assert f"rein session {BIG_REIN!r}: its rein row needs up to" in out, out
    assert f"statement limit of {limit:,} bytes" in out and out.count("; not imported") == 2, out
    assert "0 differ from the database's and 2 were refused" in out, out
    assert "Lost connection" not in out


async def test_rows_over_the_statement_limit_are_named_and_the_rest_imported(
    source: URL,
    database: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every backend, the target's limit lowered: the sessions with a row over it are
    named with the row's size and not imported, every other one is (those after them,
    and one whose many small messages together exceed the limit, in batches within
    it), and the command exits 1."""
    await sources_with_big_rows(source)
    path = tmp_path / "sessions.jsonl"
    await write_file(source, path)
    async with fresh_database(database.server, tmp_path, prefix="chatledger_dst") as target:
        await upgrade_database(target)
        with target_limit(monkeypatch, LIMIT):
            assert await run(["import", "--dsn", dsn_of(target), str(path)]) == 1
        assert_named_and_rest_imported(capsys.readouterr().out, LIMIT)
        assert without_big(await export_of(target)) == without_big(await export_of(source))

        report = await import_file(target, str(path))  # the limit as it is: the rest arrives
        assert report.clean and report.imported == 2


class SmallPacketMariaDB(ThrowawayMariaDB):
    """A throwaway MariaDB whose ``max_allowed_packet`` is :data:`LIMIT` (server-wide,
    so never set on the shared server)."""

    def _command(self) -> list[str]:
        return [*super()._command(), f"--max-allowed-packet={LIMIT}"]


@pytest.fixture
async def small_packet_target(database: Database) -> AsyncIterator[URL]:
    """A fresh migrated database on a MariaDB with a small ``max_allowed_packet``."""
    require("mysql", SmallPacketMariaDB.missing())
    server = SmallPacketMariaDB()
    try:
        server.start()
        name = "chatledger_small_packet"
        url = await Server("mysql", server.admin_url).create_database(name)
        await upgrade_database(url)
        yield url
    finally:
        server.close()


@pytest.mark.requires("max_allowed_packet")
async def test_copy_into_mariadb_checks_max_allowed_packet_for_real(
    source: URL, small_packet_target: URL, capsys: pytest.CaptureFixture[str]
) -> None:
    """For real: ``copy`` into a MariaDB with ``max_allowed_packet`` = 256 KiB names the
    two sessions with a row over it and their sizes, copies every other one (the many
    small messages in statements within the limit), and exits 1; no lost connection."""
    await sources_with_big_rows(source)
    command = ["copy", "--from", dsn_of(source), "--to", dsn_of(small_packet_target)]
    assert await run(command) == 1
    captured = capsys.readouterr()
    assert_named_and_rest_imported(captured.out, LIMIT)
    assert captured.err == ""
    assert without_big(await export_of(small_packet_target)) == without_big(await export_of(source))


async def test_an_import_into_a_database_missing_a_column_names_it(
    source: URL, database: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A target whose schema lost a column (changed by hand): ``SchemaNotReady`` naming
    the target and ``chatledger check``, not the driver's error; the CLI says it in one
    line and exits 2."""
    await fill(source)
    path = tmp_path / "sessions.jsonl"
    await write_file(source, path)
    async with fresh_database(database.server, tmp_path, prefix="chatledger_dst") as target:
        await upgrade_database(target)
        await execute(target, "ALTER TABLE raw_messages DROP COLUMN tags_json")
        with pytest.raises(SchemaNotReady, match="tags_json") as raised:
            await import_file(target, str(path))
        assert f"`chatledger check --dsn {as_argument(target)}`" in str(raised.value)
        assert isinstance(raised.value.__cause__, DBAPIError)

        assert await run(["copy", "--from", dsn_of(source), "--to", dsn_of(target)]) == 2
        error = capsys.readouterr().err
        assert error.startswith("chatledger copy: database ") and "lacks a table or column" in error
        assert dsn_of(source) not in error


async def records_of(path: Path) -> AsyncIterator[Record]:
    with path.open("rb") as stream:
        for record in read_records(stream):
            yield record


async def test_a_lost_commit_answer_is_settled_by_comparing(
    source: URL, database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Server backends: the connection drops after a session's COMMIT reached the
    server, before its answer: the import retries, finds the session there, identical,
    and counts it imported, once. Then a connection dropped in the middle of a session
    (at a rein session's INSERT) is retried from its rows. (Every session's rows are
    kept in a temporary file here, as a large session's are.)"""
    if database.server is None:
        pytest.skip("a SQLite file has no connection to lose")
    monkeypatch.setattr(importer, "SPOOL_BYTES", 0)
    await fill(source)
    path = tmp_path / "sessions.jsonl"
    await write_file(source, path)
    async with (
        fresh_database(database.server, tmp_path, prefix="chatledger_dst") as target,
        running_proxy(target) as proxy,
    ):
        await upgrade_database(target)
        ledger = Ledger(proxy.url(target))
        try:
            await ledger.ensure_ready()  # its own COMMITs before the import's
            proxy.arm("drop-after-commit")
            report = await Importer(ledger).run(records_of(path))
        finally:
            await ledger.close()
        assert proxy.events("commit answered") and not proxy.armed
        assert report.clean and (report.imported, report.identical) == (7, 0), report
        assert await export_of(target) == await export_of(source)

    async with (
        fresh_database(database.server, tmp_path, prefix="chatledger_dst") as target,
        running_proxy(target) as proxy,
    ):
        await upgrade_database(target)
        proxy.arm("drop-before", b"weather in Z")  # a rein session's row, in its INSERT
        report = await copy(source, proxy.url(target))
        assert proxy.events("dropped before")
        assert report.clean and (report.imported, report.identical) == (7, 0), report
        assert await export_of(target) == await export_of(source)


async def test_a_target_lost_for_good_is_named_not_the_source(
    source: URL,
    database: Database,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The target becomes unreachable in the middle of a copy: after the retry budget,
    one line naming the TARGET (``StorageUnavailable``), exit 2; a rerun completes it."""
    if database.server is None:
        pytest.skip("a SQLite file has no connection to lose")
    await fill(source)
    monkeypatch.setattr(transfer, "Ledger", functools.partial(Ledger, retry_timeout=1))
    async with (
        fresh_database(database.server, tmp_path, prefix="chatledger_dst") as target,
        running_proxy(target) as proxy,
    ):
        await upgrade_database(target)
        proxied = proxy.url(target)
        act = proxy._act

        async def and_refuse(*args: Any) -> None:  # from then on, the target is unreachable
            await act(*args)
            proxy.refuse()
            proxy.sever()

        monkeypatch.setattr(proxy, "_act", and_refuse)
        proxy.arm("drop-before", b"chat-alpha")  # the first session, read by the import
        assert await run(["copy", "--from", dsn_of(source), "--to", dsn_of(proxied)]) == 2
        error = capsys.readouterr().err
        assert error.startswith(f"chatledger copy: {display(proxied)} could not be reached"), error
        assert "retry budget" in error and error.count("\n") == 1

        report = await copy(source, target)
        assert report.clean and report.imported == 7
        assert await export_of(target) == await export_of(source)
