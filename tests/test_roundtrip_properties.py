"""Property tests: whatever goes in comes back equal, on SQLite, PostgreSQL and MySQL alike.

Part of the one conformance suite: the ``storage`` fixture runs each test once per
backend. Examples are derandomized and Hypothesis keeps no example database, so a
CI run is reproducible; ``CHATLEDGER_PROPERTY_EXAMPLES`` sets how many examples each
property gets per backend (default 40).
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.extensions.persistence import RawMessageRecord
from zett_agent.messages import UserMessage

from chatledger.zett import LedgerSessionStorage

from .support import strategies as gen

EXAMPLES = int(os.environ.get("CHATLEDGER_PROPERTY_EXAMPLES", "40"))

#: One storage (function-scoped fixture) serves every example of a test; each
#: example uses session ids of its own, so examples never see each other's rows.
property_settings = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def fresh_id() -> str:
    return f"prop-{uuid.uuid4()}"


def assert_record(record: RawMessageRecord, sent: gen.Append, session_id: str, sequence: int) -> None:
    """Every field of a stored raw message equals what the append was given."""
    assert record.session_id == session_id
    assert record.sequence == sequence
    assert record.request_id == sent.request_id
    assert record.message == sent.message
    assert type(record.message) is type(sent.message)
    assert record.metadata == (sent.metadata or {})
    assert record.tags == (sent.tags or {})
    for instant in (record.created_at, record.updated_at, record.started_at, record.completed_at):
        assert instant.utcoffset() == timedelta(0)
    if sent.timing is None:
        # zett's contract: an append without timing is an instantaneous message.
        assert record.started_at == record.completed_at == record.created_at
        assert record.duration_ns == 0
        assert record.reasoning_started_at is record.content_started_at is None
    else:
        for field in dataclasses.fields(sent.timing):
            assert getattr(record, field.name) == getattr(sent.timing, field.name), field.name
    usage_fields = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
    for name in (*usage_fields, "reasoning_tokens"):
        expected = None if sent.usage is None else getattr(sent.usage, name)
        assert getattr(record, name) == expected, name


@property_settings
@given(sent=st.lists(gen.appends(), min_size=1, max_size=4))
async def test_raw_log_round_trips(storage: LedgerSessionStorage, sent: list[gen.Append]) -> None:
    """Every message kind, with timing, usage, metadata and tags present or absent."""
    session_id = fresh_id()
    for sequence, item in enumerate(sent, start=1):
        appended = await storage.append(
            session_id,
            item.request_id,
            item.message,
            item.timing,
            metadata=item.metadata,
            tags=item.tags,
            usage=item.usage,
        )
        assert appended == sequence
    listed = await storage.list_raw_messages(session_id)
    view = await storage.load(session_id)
    assert view.raw_tail == listed
    assert len(listed) == len(sent)
    for sequence, (record, item) in enumerate(zip(listed, sent, strict=True), start=1):
        assert_record(record, item, session_id, sequence)


@st.composite
def _session_cases(
    draw: st.DrawFn,
) -> tuple[gen.SessionFields, list[gen.Append], list[tuple[int, CompactedMessage]]]:
    fields = draw(gen.session_fields)
    sent = draw(st.lists(gen.appends(), min_size=1, max_size=4))
    # Zero, one or two checkpoints at strictly advancing boundaries.
    boundaries = sorted(draw(st.sets(st.integers(1, len(sent)), max_size=2)))
    checkpoints = [(boundary, draw(gen.checkpoints)) for boundary in boundaries]
    return fields, sent, checkpoints


@property_settings
@given(case=_session_cases())
async def test_session_fields_and_checkpoints_round_trip(
    storage: LedgerSessionStorage,
    case: tuple[gen.SessionFields, list[gen.Append], list[tuple[int, CompactedMessage]]],
) -> None:
    """Title, agent name, session type and parent, and checkpoints with their tail."""
    fields, sent, checkpoints = case
    session_id = fresh_id()
    if fields.session_type is not None:
        created = await storage.create_session(
            session_id=session_id,
            parent_session_id=fields.parent_session_id,
            title=fields.title,
            agent_name=fields.agent_name,
            session_type=fields.session_type,
        )
        assert (created.title, created.agent_name) == (fields.title, fields.agent_name)
    for index, item in enumerate(sent):
        first = index == 0 and fields.session_type is None
        await storage.append(
            session_id,
            item.request_id,
            item.message,
            item.timing,
            parent_session_id=fields.parent_session_id,
            title=fields.title if first else None,
            agent_name=fields.agent_name if first else None,
            metadata=item.metadata,
            tags=item.tags,
            usage=item.usage,
        )
    stored = []
    for version, (boundary, message) in enumerate(checkpoints):
        snapshot = await storage.snapshot(session_id, message, boundary, version)
        assert snapshot.compacted_message == message
        assert (snapshot.version, snapshot.compacted_through_sequence) == (version + 1, boundary)
        stored.append(snapshot)

    expected_type = fields.session_type or 0
    summary = await storage.get_session(session_id)
    assert summary is not None
    assert summary.session_id == session_id
    assert summary.parent_session_id == fields.parent_session_id
    assert summary.title == fields.title
    assert summary.agent_name == fields.agent_name
    assert summary.session_type == expected_type
    assert summary.message_count == len(sent)

    view = await storage.load(session_id)
    assert view.parent_session_id == fields.parent_session_id
    assert view.title == fields.title
    assert view.agent_name == fields.agent_name
    assert view.session_type == expected_type
    assert view.snapshot == (stored[-1] if stored else None)
    boundary = checkpoints[-1][0] if checkpoints else 0
    assert [record.sequence for record in view.raw_tail] == list(range(boundary + 1, len(sent) + 1))
    for record in view.raw_tail:
        assert_record(record, sent[record.sequence - 1], session_id, record.sequence)


def _variants(session_id: str) -> list[str]:
    """The id and the ids differing from it only by letter case or a trailing space."""
    candidates = [
        session_id,
        session_id.swapcase(),
        session_id.upper(),
        session_id.lower(),
        session_id.casefold(),
        f"{session_id} ",
    ]
    unique = dict.fromkeys(candidate for candidate in candidates if len(candidate) <= 255)
    return list(unique)


@property_settings
@given(suffix=gen.ids(), request_id=gen.ids())
async def test_ids_round_trip_exactly(storage: LedgerSessionStorage, suffix: str, request_id: str) -> None:
    """Ids up to 255 characters come back exactly; ids that differ only by case (or a
    trailing space) are different sessions, on every backend."""
    prefix = f"{uuid.uuid4().hex[:8]}-"
    base = prefix + suffix[: 255 - len(prefix)]
    variants = _variants(base)
    for variant in variants:
        assert await storage.append(variant, request_id, UserMessage(content=variant)) == 1
    for variant in variants:
        records = await storage.list_raw_messages(variant)
        assert [(r.session_id, r.request_id, r.message) for r in records] == [
            (variant, request_id, UserMessage(content=variant))
        ]
        summary = await storage.get_session(variant)
        assert summary is not None
        assert summary.session_id == variant
        assert summary.message_count == 1
