"""The stores' purge on every backend, zett and rein sessions: a conditional delete that
the deleting transaction decides, and id prefixes matched literally and byte for byte."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from rein import Message, Session
from sqlalchemy import Column, MetaData, String, Table, select, text, update
from sqlalchemy.engine import URL, Connection
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.messages import UserMessage

from chatledger import SessionDeleted, SnapshotConflict
from chatledger.dialects import backend
from chatledger.migrate import run_on_connection
from chatledger.rein import LedgerSessionStore
from chatledger.schema import rein_sessions_table, sessions_table
from chatledger.selection import Selection, id_prefix, prefix_upper_bound
from chatledger.zett import LedgerSessionStorage

from .conftest import Database


@pytest.fixture
def store(database: Database) -> Iterator[LedgerSessionStore]:
    with LedgerSessionStore(database.url) as opened:
        yield opened


@pytest.fixture
def base() -> str:
    """A prefix no other test's ids start with (tests share one database per target);
    its ``/`` is SQLAlchemy's LIKE escape character, so it is escaped too."""
    return f"purge-{uuid.uuid4().hex[:12]}/"


async def set_idle(url: URL, table: Table, ages: dict[str, int]) -> None:
    """Makes each session last active ``ages[id]`` days ago (on a connection of its own:
    the rein store's engine serves its own loop)."""

    def work(connection: Connection) -> None:
        for session_id, days in ages.items():
            at = datetime.now(UTC) - timedelta(days=days)
            connection.execute(update(table).where(table.c.id == session_id).values(updated_at=at))

    await run_on_connection(url, work)


def rein_session(text: str) -> Session:
    return Session(messages=[Message(role="user", content=text)])


# -- fault 2: a session written to after its page was read is kept ---------------------------


async def test_zett_purge_keeps_a_session_appended_to_after_its_page_was_read(
    storage: LedgerSessionStorage, base: str
) -> None:
    first, second, third = (f"{base}{name}" for name in ("a", "b", "c"))
    for session_id in (first, second, third):
        await storage.append(session_id, "r", UserMessage(content="old"))
    # Activity order: first, second, third; one page holds all three.
    await set_idle(storage.url, sessions_table, {first: 42, second: 41, third: 40})
    seen: list[tuple[str, bool]] = []

    async def progress(session_id: str, deleted: bool) -> None:
        seen.append((session_id, deleted))
        if session_id == first:  # the page with `second` was read before this delete
            assert await storage.append(second, "r", UserMessage(content="new")) == 2

    deleted = await storage.purge_sessions(older_than=timedelta(days=30), prefix=base, progress=progress)

    assert deleted == 2
    assert seen == [(first, True), (second, False), (third, True)]
    view = await storage.load(second)
    assert [record.message.content for record in view.raw_tail] == ["old", "new"]
    assert await storage.get_session(first) is None and await storage.get_session(third) is None


async def test_zett_purge_keeps_a_session_checkpointed_or_retitled_after_its_page_was_read(
    storage: LedgerSessionStorage, database: Database, base: str
) -> None:
    """A checkpoint leaves ``updated_at`` alone (zett-agent's "last active" is the raw
    log's last message), yet it is a write: the purge's delete also checks that the
    counter row's versions are as its page read them. The checkpoint comes from another
    store, as from another service resuming the session."""
    first, second, third = (f"{base}{name}" for name in ("a", "b", "c"))
    for session_id in (first, second, third):
        for content in ("one", "two"):
            await storage.append(session_id, "r", UserMessage(content=content))
    await set_idle(storage.url, sessions_table, {first: 42, second: 41, third: 40})

    async with LedgerSessionStorage(database.url) as other:

        async def progress(session_id: str, deleted: bool) -> None:
            if session_id == first:  # the page with `second` and `third` was read before
                await other.snapshot(second, CompactedMessage(content="sum"), 2, 0)
                await other.update_session(third, title="renamed", expected_version=1)

        deleted = await storage.purge_sessions(older_than=timedelta(days=30), prefix=base, progress=progress)

    assert deleted == 1
    view = await storage.load(second)
    assert view.snapshot is not None and view.snapshot.version == 1
    summary = await storage.get_session(third)
    assert summary is not None and summary.title == "renamed"
    assert await storage.get_session(first) is None


async def test_rein_purge_keeps_a_session_saved_after_its_page_was_read(
    database: Database, store: LedgerSessionStore, base: str
) -> None:
    first, second, third = (f"{base}{name}" for name in ("a", "b", "c"))
    for session_id in (first, second, third):
        await store.asave(session_id, rein_session("old"))
    await set_idle(store.url, rein_sessions_table, {first: 42, second: 41, third: 40})
    seen: list[tuple[str, bool]] = []
    with LedgerSessionStore(database.url) as writer:

        def progress(session_id: str, deleted: bool) -> None:  # runs on the store's loop thread
            seen.append((session_id, deleted))
            if session_id == first:
                writer.save(second, rein_session("new"), expected_version=1)

        deleted = await store.apurge(older_than=timedelta(days=30), prefix=base, progress=progress)

    assert deleted == 2
    assert seen == [(first, True), (second, False), (third, True)]
    kept = await store.aload_versioned(second)
    assert kept is not None and kept.version == 2 and kept.session.messages[0].content == "new"
    assert not await store.acontains(first) and not await store.acontains(third)


async def test_a_conditional_delete_keeps_every_tombstone_promise(
    storage: LedgerSessionStorage, base: str
) -> None:
    session_id = f"{base}s"
    for content in ("one", "two"):
        await storage.append(session_id, "r", UserMessage(content=content))
    await storage.snapshot(session_id, CompactedMessage(content="sum"), 2, 0)
    fields_version = await storage.get_fields_version(session_id)
    cutoff = datetime.now(UTC) - timedelta(hours=1)

    assert not await storage.delete_session(session_id, idle_before=cutoff)  # active since the cutoff
    assert await storage.count_messages(session_id) == 2
    await set_idle(storage.url, sessions_table, {session_id: 1})
    assert await storage.delete_session(session_id, idle_before=cutoff)
    assert not await storage.delete_session(session_id, idle_before=cutoff)  # deleted already

    # Stale writers are refused, and a new generation goes on from the old counters.
    with pytest.raises(SessionDeleted):
        await storage.append(session_id, "r", UserMessage(content="late"))
    with pytest.raises(SessionDeleted):
        await storage.snapshot(session_id, CompactedMessage(content="late"), 2, 1)
    await storage.create_session(session_id=session_id)
    assert await storage.get_fields_version(session_id) not in (None, fields_version)
    with pytest.raises(SnapshotConflict):
        await storage.snapshot(session_id, CompactedMessage(content="stale"), 2, 0)
    assert await storage.append(session_id, "r", UserMessage(content="anew")) == 3


async def test_a_conditional_rein_delete_bumps_the_version(store: LedgerSessionStore, base: str) -> None:
    session_id = f"{base}r"
    await store.asave(session_id, rein_session("one"))
    cutoff = datetime.now(UTC) - timedelta(hours=1)
    assert not await store.adelete(session_id, idle_before=cutoff)
    await set_idle(store.url, rein_sessions_table, {session_id: 1})
    assert store.delete(session_id, idle_before=cutoff)
    await store.asave(session_id, rein_session("two"), expected_version=0)
    found = await store.aload_versioned(session_id)
    assert found is not None and found.version == 3  # saved, deleted, saved: no version used twice


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({}, "say what to purge"),
        ({"older_than": timedelta(days=1), "idle_before": datetime.now(UTC)}, "not both"),
        ({"idle_before": datetime(2026, 1, 1)}, "idle_before is a naive datetime"),
        ({"older_than": timedelta(days=-1)}, "older_than must not be negative"),
        ({"older_than": timedelta(days=999_999)}, "older_than"),
        ({"prefix": " "}, "prefix cannot be empty or blank"),
        ({"prefix": "x" * 256}, "prefix is 256 characters long"),
        ({"prefix": "a", "batch_size": 0}, "batch_size"),
    ],
)
async def test_bad_purge_arguments_are_refused_before_anything_is_deleted(
    storage: LedgerSessionStorage, store: LedgerSessionStore, arguments: dict[str, object], fragment: str
) -> None:
    with pytest.raises(ValueError, match=fragment):
        await storage.purge_sessions(**arguments)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=fragment):
        await store.apurge(**arguments)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="older_than must be a timedelta"):
        await storage.purge_sessions(older_than=30)  # type: ignore[arg-type]


# -- fault 3: prefixes literal and byte-exact ----------------------------------------------------

#: (prefix, ids, the ids that start with it), each id and prefix after the test's base.
PREFIX_CASES = [
    ("tmp-", ["tmp-", "tmp-a", "TMP-keep", "Tmp-x", "tmp", "tmp_a", "tmp.a"], {"tmp-", "tmp-a"}),
    ("a%", ["a%", "a%b", "ab", "a"], {"a%", "a%b"}),
    ("a_", ["a_", "a_b", "axb", "ax"], {"a_", "a_b"}),
    ("a\\", ["a\\", "a\\b", "a\\\\", "ab", "a/"], {"a\\", "a\\b", "a\\\\"}),
    ("a/", ["a/", "a/b", "a//", "ab"], {"a/", "a/b", "a//"}),
    ("é-", ["é-1", "É-2", "e-3", "é", "é-"], {"é-1", "é-"}),
    ("日本", ["日本語", "日本", "日", "日朩", "日本 "], {"日本語", "日本", "日本 "}),
    ("a ", ["a ", "a b", "a", "a!", "a\t", "A b"], {"a ", "a b"}),
    ("x\ud7ff", ["x\ud7ff1", "x\ue000", "x\ud7fe"], {"x\ud7ff1"}),
    ("x\U0010ffff", ["x\U0010ffffa", "x\U0010ffff", "y", "x\U0010fffe"], {"x\U0010ffffa", "x\U0010ffff"}),
]


def test_the_upper_bound_of_a_prefix() -> None:
    assert prefix_upper_bound("tmp-") == "tmp."
    assert prefix_upper_bound("a\U0010ffff\U0010ffff") == "b"
    assert prefix_upper_bound("\ud7ff") == "\ue000"
    assert prefix_upper_bound("\U0010ffff") is None


@pytest.mark.parametrize(("prefix", "ids", "expected"), PREFIX_CASES, ids=[case[0] for case in PREFIX_CASES])
async def test_zett_purge_matches_the_prefix_literally_and_byte_for_byte(
    storage: LedgerSessionStorage, base: str, prefix: str, ids: list[str], expected: set[str]
) -> None:
    for name in ids:
        await storage.create_session(session_id=base + name)
    assert await storage.purge_sessions(prefix=base + prefix) == len(expected)
    left = {name for name in ids if await storage.get_session(base + name) is not None}
    assert left == set(ids) - expected


@pytest.mark.parametrize(("prefix", "ids", "expected"), PREFIX_CASES, ids=[case[0] for case in PREFIX_CASES])
async def test_rein_purge_matches_the_prefix_literally_and_byte_for_byte(
    store: LedgerSessionStore, base: str, prefix: str, ids: list[str], expected: set[str]
) -> None:
    for name in ids:
        await store.asave(base + name, rein_session(name))
    # With a cutoff too: paged in activity order rather than by id.
    assert await store.apurge(prefix=base + prefix, older_than=timedelta(0)) == len(expected)
    left = {name for name in ids if await store.acontains(base + name)}
    assert left == set(ids) - expected


def test_a_selection_without_a_cutoff_or_prefix_selects_for_a_single_delete_only() -> None:
    assert Selection().where(sessions_table, backend("sqlite")) == []
    with pytest.raises(ValueError, match="say what to purge"):
        Selection.of()


@pytest.mark.requires("language_collations")
async def test_a_prefix_is_byte_exact_under_a_language_collation_too(
    storage: LedgerSessionStorage, backend: str, base: str
) -> None:
    """The range is compared in byte order whatever the id column's collation: under
    English with punctuation ignored (ICU's ``ka-shifted``, as glibc's ``en_US``),
    ``tmp-z`` sorts after ``tmp.``, so a range in the column's order would miss it."""
    collation = f"shifted_{uuid.uuid4().hex[:8]}"
    table = Table(
        f"prefix_{uuid.uuid4().hex[:8]}", MetaData(), Column("id", String(255, collation=collation))
    )
    names = ["tmp-", "tmp-a", "tmp-z", "TMP-keep", "Tmp-x", "tmp.", "tmp"]
    async with storage.ledger.engine.begin() as conn:
        if not await conn.scalar(text("SELECT count(*) FROM pg_collation WHERE collprovider = 'i'")):
            pytest.skip("this PostgreSQL has no ICU collations")
        await conn.execute(
            text(f"CREATE COLLATION {collation} (provider = icu, locale = 'en-US-u-ka-shifted')")
        )
        await conn.run_sync(table.create)
        await conn.execute(table.insert(), [{"id": name} for name in names])
        matched = await conn.scalars(
            select(table.c.id).where(id_prefix(table.c.id, "tmp-", storage.ledger.backend))
        )
        assert set(matched) == {"tmp-", "tmp-a", "tmp-z"}
        await conn.run_sync(table.drop)
        await conn.execute(text(f"DROP COLLATION {collation}"))
