"""``LedgerSessionStorage``: zett-agent's ``SessionStorage`` on the shared ledger."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from operator import itemgetter
from types import SimpleNamespace, TracebackType
from typing import Any, cast

from sqlalchemy import bindparam, case, delete, null, select, update
from sqlalchemy.engine import URL
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection
from zett_agent.extensions.compaction import CompactedMessage
from zett_agent.extensions.events import MessageTiming
from zett_agent.extensions.persistence import ContextSnapshot, RawMessageRecord, SessionSummary, SessionView
from zett_agent.ids import new_uuid7
from zett_agent.json_types import JsonValue
from zett_agent.messages import AnyMessage
from zett_agent.model import ModelUsage

from .. import clock, integrity, marks, telemetry, tombstones, validate
from ..dsn import display
from ..engine import Ledger
from ..errors import ConstraintViolation, SessionDeleted, SnapshotConflict, VersionConflict
from ..identity import Found, Generation, WriteIdentity, counter_generation
from ..kinds import ZETT
from ..schema import raw_messages_table as _raw
from ..schema import sessions_table as _sessions
from ..schema import snapshots_table as _snapshots
from ..selection import PURGE_BATCH, Progress, Selection, purge
from . import codec
from .cache import CachedTail, TailCache

#: Session type of sessions created by an append (zett's ``_DEFAULT_SESSION_TYPE``).
DEFAULT_SESSION_TYPE = 0

#: The counter row's columns that every write to a session moves (an append, a
#: checkpoint, a field change): a purge deletes a session only while they are as its
#: page read them.
_WRITTEN = ("last_sequence", "snapshot_version", "fields_version")
#: A session row that is not a tombstone; every read of a session filters on it.
_live = _sessions.c.deleted_at.is_(None)
#: A load's first statement: the counter row with its current checkpoint's columns as
#: ``checkpoint_<name>``. The checkpoint's JSON is left out (NULL) when it is the one
#: the load cache holds decoded already (``kept_snapshot``, its id; NULL for none).
_HEAD = (
    select(
        _sessions,
        *(
            column.label(f"checkpoint_{column.name}")
            for column in _snapshots.c
            if column.name != "message_json"
        ),
        case(
            (_snapshots.c.id == bindparam("kept_snapshot", type_=_snapshots.c.id.type), null()),
            else_=_snapshots.c.message_json,
        ).label("checkpoint_message_json"),
    )
    .outerjoin(
        _snapshots,
        (_snapshots.c.session_id == _sessions.c.id) & (_snapshots.c.version == _sessions.c.snapshot_version),
    )
    .where(_sessions.c.id == bindparam("session_id"), _live)
)
#: What a raw message is, for its identity (:mod:`chatledger.identity`): the columns the
#: caller's input decides, not when it was written (its timing defaults to the instant
#: of the call, which a repeat of the call does not share).
_MESSAGE_CONTENT = (
    "session_id",
    "request_id",
    "role",
    "message_json",
    "metadata_json",
    "tags_json",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
#: The content of a raw message's row, in :data:`_MESSAGE_CONTENT`'s order.
_message_content = itemgetter(*_MESSAGE_CONTENT)
#: A settle's lookup of a raw message by its id: its sequence and content.
_FIND_MESSAGE = select(_raw.c.sequence, *(_raw.c[name] for name in _MESSAGE_CONTENT)).where(
    _raw.c.id == bindparam("id")
)


def _generation(session_id: str) -> Generation:
    """The generation of the zett session ``session_id`` (:mod:`chatledger.identity`): its
    ``base_sequence``, which a delete moves to its last sequence (past every message it
    erases), or the last sequence its purged tombstone's mark keeps."""
    return counter_generation(
        _sessions,
        lambda: _sessions.c.id == session_id,
        "base_sequence",
        marks.ZETT,
        lambda: session_id,
        "last_sequence",
    )


#: A load's tail rows: sequences ``after+1..through``. Both bounds: the upper one (the
#: counter, read in the same snapshot) lets the planner see the range is the tail's
#: size; with only a lower bound, PostgreSQL estimates it from the whole table's
#: sequences and may scan and sort thousands of rows for a 50-message tail.
_TAIL = (
    select(*codec.RECORD_COLUMNS)
    .where(
        _raw.c.session_id == bindparam("session_id"),
        _raw.c.sequence > bindparam("after"),
        _raw.c.sequence <= bindparam("through"),
    )
    .order_by(_raw.c.sequence)
)


def _summary(row: Any) -> SessionSummary:
    return SessionSummary(
        session_id=row.id,
        parent_session_id=row.parent_session_id,
        session_type=row.session_type,
        title=row.title,
        agent_name=row.agent_name,
        # The counter row knows the count: raw messages are never deleted one by one,
        # and the current generation's are numbered from base_sequence + 1.
        message_count=row.last_sequence - row.base_sequence,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


class LedgerSessionStorage:
    """zett-agent session storage in SQLite, PostgreSQL or MySQL/MariaDB.

    Conforms to ``zett_agent.extensions.persistence.SessionStorage`` (``load``,
    ``append``, ``snapshot``) and mirrors the extras of zett's own
    ``SQLSessionStorage`` (``create_session``, ``get_session``, ``update_session``,
    ``delete_session``, ``list_sessions``, ``list_raw_messages``,
    ``count_messages``), with the same argument names and validation, and adds
    :meth:`purge_sessions` (and ``delete_session(..., idle_before=...)``).

    Args:
        dsn: ``postgresql://``, ``mysql://``, ``mariadb://`` or ``sqlite:///path``;
            ``None`` reads ``CHATLEDGER_DSN``, then uses the embedded SQLite default
            (:func:`chatledger.dsn.default_sqlite_path`).
        engine: instead of ``dsn``, an ``AsyncEngine`` of your own to use (and go on
            owning: ``close`` leaves it open); see :class:`chatledger.engine.Ledger`.
            Its pool is not replaced on a new event loop: a pooled one serves one
            loop (another raises ``ConfigurationError``), one with
            ``poolclass=NullPool`` any.
        load_cache_messages: how many decoded raw messages :meth:`load` keeps for
            the sessions it loaded, least recently loaded session evicted first
            (each session counts its tail's messages plus one); 0 disables it.
            :class:`chatledger.WrongType` / ``ValueError`` for a non-int or a
            negative number.
        **options: :class:`chatledger.options.LedgerOptions` (pool sizes, retries...).

    One engine and pool per storage; :meth:`close` disposes of it, and the storage
    is an async context manager. The pool serves one event loop at a time: used
    from a new loop (the next ``asyncio.run``) the storage replaces it, and a
    forked child starts with a new one; sharing one storage between loops running
    in two threads at once is not supported (see :class:`chatledger.engine.Ledger`).
    A server database must be migrated first
    (``alembic upgrade head``); the first call raises
    :class:`chatledger.SchemaNotReady` otherwise. The embedded SQLite database
    upgrades itself.
    """

    def __init__(
        self, dsn: str | URL | None = None, *, load_cache_messages: int = 10_000, **options: Any
    ) -> None:
        capacity = validate.integer(load_cache_messages, "load_cache_messages")
        self.ledger = Ledger(dsn, **options)
        #: Decoded tails of the sessions loaded before (``None``: disabled); see :meth:`load`.
        self.load_cache = TailCache(capacity) if capacity else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({display(self.ledger.url)!r})"

    @property
    def url(self) -> URL:
        """The async SQLAlchemy URL in use (its ``repr`` masks the password)."""
        return self.ledger.url

    def write_position(self, session_id: str) -> str | None:
        """Where this store's writes of ``session_id`` stand on the primary, when read
        replicas serve its reads (``read_dsn``): the text another process's store hands
        to :meth:`remember_write`, so that its replica reads wait for these writes too.
        ``None`` without replicas or writes of that session
        (:meth:`chatledger.engine.Ledger.write_position`)."""
        return self.ledger.write_position(session_id)

    def remember_write(self, session_id: str, position: str) -> None:
        """Let replica reads of ``session_id`` wait for a write made elsewhere, given by
        the writer's :meth:`write_position`; without replicas, nothing to do.

        Raises:
            TypeError: ``position`` is not a string.
        """
        self.ledger.remember_write(session_id, position)

    async def close(self) -> None:
        """Dispose of the connection pool; stored history stays."""
        await self.ledger.close()

    async def __aenter__(self) -> LedgerSessionStorage:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- the SessionStorage protocol -------------------------------------------------

    async def load(self, session_id: str) -> SessionView:
        """The latest checkpoint and the raw-log tail strictly after its boundary.

        Both come from one snapshot-consistent read transaction, so a concurrent
        append or snapshot is seen whole or not at all. An unknown or deleted session
        gives an empty ``SessionView`` (session type 0) and writes nothing.

        A session this storage loaded before is loaded incrementally: the counter
        row and checkpoint are read as always, and only the tail rows after the run
        of records kept from the last load are fetched and decoded (see
        :mod:`chatledger.zett.cache`; ``load_cache_messages`` bounds it). The view is
        the same as without the cache, also when other processes write the session.
        Its records are shared with later loads: treat them as read-only.

        Raises:
            ValueError: ``session_id`` is invalid.
            CorruptData: (a ``ValueError``) a stored row is corrupt (the message
                names the session and sequence).
        """
        session_id = validate.identifier(session_id, "session_id")
        cache = self.load_cache

        async def work(conn: AsyncConnection) -> SessionView:
            candidate = cache.peek(session_id) if cache is not None else None
            kept_snapshot = candidate.snapshot if candidate is not None else None
            head = (
                await conn.execute(
                    _HEAD, {"session_id": session_id, "kept_snapshot": getattr(kept_snapshot, "id", None)}
                )
            ).one_or_none()
            if head is None:
                if cache is not None:
                    cache.discard(session_id)
                return SessionView(session_type=DEFAULT_SESSION_TYPE)
            boundary, last = head.compacted_through_sequence, head.last_sequence
            span.sequences(boundary + 1, last)
            span.set("chatledger.generation.base_sequence", head.base_sequence)
            span.set("chatledger.checkpoint.version", head.snapshot_version)
            snapshot = None
            if head.snapshot_version:
                if kept_snapshot is not None and head.checkpoint_id == kept_snapshot.id:
                    # The same checkpoint row (ids are UUIDv7s); _HEAD did not send its JSON.
                    snapshot = kept_snapshot
                else:
                    snapshot = codec.snapshot(
                        _snapshot_view(head), session_id=head.id, version=head.snapshot_version
                    )
            # The records kept from an earlier load of this generation that lie inside
            # this transaction's tail, boundary+1..k; then the rows after them. The
            # lower bound is the stored boundary, read in this transaction: a record
            # at or below it is never served (cache.CachedTail.run).
            kept = cache.get(session_id, head.created_at) if cache is not None else None
            run = kept.run(boundary, last) if kept is not None else ()
            after = boundary + len(run)
            fetched: list[RawMessageRecord] = []
            if after < last:
                fetched = codec.records(
                    await conn.execute(_TAIL, {"session_id": session_id, "after": after, "through": last})
                )
            tail = [*run, *fetched]
            if cache is not None:
                cache.put(session_id, CachedTail.of(head.created_at, boundary + 1, tail, snapshot))
            return SessionView(
                parent_session_id=head.parent_session_id,
                session_type=head.session_type,
                title=head.title,
                agent_name=head.agent_name,
                snapshot=snapshot,
                raw_tail=tail,
            )

        with telemetry.operation(self.ledger, "zett", "load", session_id) as span:
            return await self.ledger.read(work, replica=True, session=session_id)

    async def append(
        self,
        session_id: str,
        request_id: str,
        message: AnyMessage,
        timing: MessageTiming | None = None,
        parent_session_id: str | None = None,
        title: str | None = None,
        agent_name: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
        tags: Mapping[str, JsonValue] | None = None,
        usage: ModelUsage | None = None,
        message_id: str | None = None,
    ) -> int:
        """Append one immutable raw-log message; return its sequence.

        One transaction (on PostgreSQL, on a session it only moves along, one
        statement that commits itself): the first append creates the session (with
        ``parent_session_id``, ``title`` and ``agent_name``, session type 0), the
        counter row advances, and the message is inserted with that sequence.
        Concurrent appenders queue on the counter row, so there is never a gap or a
        duplicate. ``request_id`` is a correlation id, not an idempotency key:
        repeating it appends again.

        On an existing session, as zett's own store does, a ``title`` or
        ``agent_name`` given replaces the stored one (``None`` keeps it; the session
        type and parent never change), in the same statement as the counter. A
        value that changes bumps the session's ``fields_version``, so that an
        :meth:`update_session` compare-and-set read before it conflicts rather than
        overwriting it; an absent or unchanged value bumps nothing. Like every
        title and agent name chatledger stores, they are stripped of surrounding
        whitespace.

        Sequences run 1, 2, 3... in a session's first generation. A session created
        again after a delete (``create_session(session_id=...)``) goes on from the
        deleted one's last sequence: no sequence of an id is ever used twice.

        **Exactly once.** ``message_id`` is the raw message's row id (at most 36
        characters; default a new UUIDv7), fixed before the first attempt: the
        message's identity (:mod:`chatledger.identity`) with its content (the
        session, request id, message, metadata, tags and usage; not its timing) and
        the generation it was made in. If the connection is lost while the COMMIT is
        under way, the append looks that id up once the database answers and returns
        the stored sequence instead of appending twice. A call repeating an append
        with the same ``message_id`` and message (for example after
        :class:`chatledger.OutcomeUnknown`, whose ``write_id`` it is) returns the
        stored sequence and writes nothing; with another message, or for another
        session, it raises :class:`chatledger.IdentityConflict`. An append committed
        and then deleted with its session before its settle ran returns its
        sequence, as appended (except the one statement that commits itself, whose
        reply carries the sequence: overtaken so, it is refused as an append to a
        deleted session is). This costs no round trip: the id is the row's primary
        key.

        Raises:
            SessionDeleted: (a ``ValueError``) the session was deleted: an append
                never revives it (it may come from an agent still running on the
                deleted conversation); ``create_session(session_id=...)`` starts the
                id anew. Nothing is written.
            ValueError: invalid ids, title, agent name, metadata, tags, timing or
                usage (usage only belongs to assistant messages); a
                ``CompactedMessage`` (checkpoints go through :meth:`snapshot`); a
                row larger than the server's statement limit
                (``ledger.statement_limit``, MySQL's ``max_allowed_packet``); or a
                parent different from the session's (the parent is immutable); a
                ``message_id`` that is blank or longer than 36 characters. Nothing is
                written then.
            IdentityConflict: (a ``ValueError``) ``message_id`` is already the id of
                another message: one of another session, or with other content.
                Nothing is written.
            WrongType: an argument of the wrong type (a ``TypeError`` and a ``ValueError``).
            CorruptData: (a ``ValueError``) the session's raw log holds messages past
                its counter row, numbered by a writer outside chatledger (zett-agent's
                own store after ``chatledger adopt``), and this append's sequence is
                taken; the message names the session, the sequence, the counter's
                ``last_sequence`` and ``chatledger check``. Nothing is written.
            OutcomeUnknown: the COMMIT's answer was lost (on PostgreSQL, where the
                append is one statement that commits itself: the connection was lost
                under it) and the database stayed unreachable for the retry budget;
                repeat the call with ``message_id`` set to the error's ``write_id``.
            StorageUnavailable, ConfigurationError, SchemaNotReady: see
                :meth:`chatledger.engine.Ledger.write`.
        """
        now = clock.utc_now()
        session_values: dict[str, Any] = {
            "id": validate.identifier(session_id, "session_id"),
            "parent_session_id": validate.optional_identifier(parent_session_id, "parent_session_id"),
            "title": validate.title(title),
            "agent_name": validate.agent_name(agent_name),
            "session_type": DEFAULT_SESSION_TYPE,
        }
        if session_values["parent_session_id"] == session_values["id"]:
            raise ValueError("parent_session_id must differ from session_id")
        row = codec.raw_row(
            session_id=session_values["id"],
            request_id=validate.identifier(request_id, "request_id"),
            message=message,
            timing=timing,
            metadata=metadata,
            tags=tags,
            usage=usage,
            now=now,
        )
        if message_id is not None:
            row["id"] = validate.message_id(message_id)
        with telemetry.operation(self.ledger, "zett", "append", session_values["id"]) as span:
            sequence = await self._append(session_values, row, now)
            span.sequences(sequence, sequence)
            return sequence

    async def _append(self, session_values: dict[str, Any], row: dict[str, Any], now: datetime) -> int:
        await self.ledger.check_statement_size(
            "message", row["content"], row["message_json"], row["metadata_json"], row["tags_json"]
        )
        ledger = self.ledger

        async def work(conn: AsyncConnection) -> int:
            # Read per attempt: the schema check before the first chooses it.
            sequence = await ledger.append_message(conn, session_values, row, now)
            if sequence is None:
                raise await self._refused_append(conn, session_values["id"])
            if sequence == 1 and await marks.reached(conn, marks.ZETT, session_values["id"]) is not None:
                # A new counter row for an id whose tombstone was purged: it stays deleted.
                raise SessionDeleted(
                    f"session {session_values['id']!r} was deleted (its tombstone since purged); an "
                    f"append does not revive it: create_session(session_id={session_values['id']!r}) "
                    "starts it anew"
                )
            # The counter it moved on from, which a delete moves past.
            identity.made(sequence - 1, sequence)
            return sequence

        async def find(conn: AsyncConnection) -> Found[int] | None:
            stored = (await conn.execute(_FIND_MESSAGE, {"id": row["id"]})).one_or_none()
            if stored is None:
                return None
            return Found(int(stored.sequence), tuple(stored[1:]))

        identity = WriteIdentity(
            row["id"],
            _message_content(row),
            find=find,
            generation=_generation(session_values["id"]),
            names="message_id",
            of="a message (another session's, or this one's)",
        )
        single = ledger.single_append  # set by the schema check above
        try:
            if single is not None:
                # One round trip on a session it only moves along; else (None) the
                # transaction below, which creates, refuses or changes the session.
                # Its None (nothing written) is never a settle's answer.
                either = cast("WriteIdentity[int | None]", identity)
                sequence = await ledger.write(
                    lambda conn: single(conn, session_values, row, now),
                    identity=either,
                    session=session_values["id"],
                    autocommit=True,
                )
                if sequence is not None:
                    return sequence
            # The append's first statement is an INSERT (first_writes).
            return await self.ledger.write(
                work, identity=identity, session=session_values["id"], first_writes=True
            )
        except ConstraintViolation as error:
            # Not this write's own, committed before (settle found none): a duplicate
            # (session_id, sequence), when another writer numbered past the counter row.
            explained = await self.ledger.read(
                lambda conn: integrity.outside_writes(conn, self.ledger.url, session_values["id"])
            )
            if explained is None:
                raise
            raise explained from error

    @staticmethod
    async def _refused_append(conn: AsyncConnection, session_id: str) -> ValueError:
        """Why the counter upsert left an existing row alone: a tombstone, or another parent.
        Read under the row lock the upsert took, so the answer is the row it saw."""
        deleted_at = await conn.scalar(select(_sessions.c.deleted_at).where(_sessions.c.id == session_id))
        if deleted_at is not None:
            return SessionDeleted(
                f"session {session_id!r} was deleted at {deleted_at.isoformat()}; an append does not "
                f"revive it: create_session(session_id={session_id!r}) starts it anew"
            )
        return ValueError(
            f"Session parent cannot change after creation: session {session_id!r} has another "
            "parent_session_id"
        )

    async def snapshot(
        self,
        session_id: str,
        compacted_message: CompactedMessage,
        compacted_through_sequence: int,
        expected_version: int,
    ) -> ContextSnapshot:
        """Store a checkpoint replacing raw messages ``1..compacted_through_sequence``.

        A compare-and-set on the session's checkpoint version: it succeeds only if
        the current version is ``expected_version`` (0 before the first
        checkpoint of the session's generation), and the new checkpoint gets
        ``expected_version + 1``. The boundary is inclusive; it must name an
        existing sequence of the current generation and advance past the previous
        checkpoint's. Raw messages never change.

        Raises:
            SnapshotConflict: ``expected_version`` is stale, or the boundary names a
                sequence of a deleted generation of the id (the checkpoint was
                computed before a delete and the session was created again since):
                a ``ValueError`` whose message contains "Snapshot conflict", as
                zett's store says. Reload the session.
            SessionDeleted: the session was deleted (a ``ValueError``).
            ValueError: the session has no raw messages, the boundary does not
                name an existing sequence past the previous checkpoint, or the
                checkpoint is larger than the server's statement limit.
            OutcomeUnknown: the COMMIT's answer was lost and the database stayed
                unreachable for the retry budget; ``write_id`` is the checkpoint's
                id. Reload the session: if its snapshot has that id, it was stored.

        A checkpoint whose COMMIT answer was lost is looked up by its row id (fixed
        before the first attempt) once the database answers, so a checkpoint that
        was stored is returned, not refused as a conflict with itself.
        """
        session_id = validate.identifier(session_id, "session_id")
        message_json = codec.snapshot_json(compacted_message)
        boundary = validate.integer(compacted_through_sequence, "compacted_through_sequence", minimum=1)
        expected = validate.version(expected_version)
        with telemetry.operation(self.ledger, "zett", "snapshot", session_id) as span:
            span.set("chatledger.sequence.last", boundary)
            span.set("chatledger.checkpoint.version", expected + 1)
            return await self._snapshot(session_id, message_json, boundary, expected)

    async def _snapshot(
        self, session_id: str, message_json: str, boundary: int, expected: int
    ) -> ContextSnapshot:
        await self.ledger.check_statement_size("compacted_message", message_json)
        now = clock.utc_now()
        # Fixed before the first attempt: a checkpoint whose COMMIT answer was lost is
        # looked up by it (see Ledger.write's settle).
        snapshot_id = new_uuid7()

        async def work(conn: AsyncConnection) -> ContextSnapshot:
            advanced = await conn.execute(
                update(_sessions)
                .where(
                    _sessions.c.id == session_id,
                    _live,
                    _sessions.c.snapshot_version == expected,
                    _sessions.c.compacted_through_sequence < boundary,
                    _sessions.c.last_sequence >= boundary,
                )
                .values(snapshot_version=expected + 1, compacted_through_sequence=boundary)
            )
            if advanced.rowcount != 1:
                await self._explain_refused_snapshot(conn, session_id, boundary, expected)
            row = {
                "id": snapshot_id,
                "session_id": session_id,
                "version": expected + 1,
                "compacted_through_sequence": boundary,
                "message_json": message_json,
                "created_at": now,
                "updated_at": now,
            }
            await conn.execute(_snapshots.insert(), row)
            made = codec.snapshot(SimpleNamespace(**row))
            # Past the counter the boundary names: a delete moves the generation there.
            identity.made(boundary - 1, made)
            return made

        async def find(conn: AsyncConnection) -> Found[ContextSnapshot] | None:
            stored = (
                await conn.execute(select(_snapshots).where(_snapshots.c.id == snapshot_id))
            ).one_or_none()
            if stored is None:
                return None
            content = (stored.session_id, stored.compacted_through_sequence, stored.message_json)
            return Found(codec.snapshot(stored), content)

        identity = WriteIdentity(
            snapshot_id,
            (session_id, boundary, message_json),
            find=find,
            generation=_generation(session_id),
            names="checkpoint id",
            of="a checkpoint",
        )
        return await self.ledger.write(work, identity=identity, session=session_id)

    @staticmethod
    async def _explain_refused_snapshot(
        conn: AsyncConnection, session_id: str, boundary: int, expected: int
    ) -> None:
        current = (
            await conn.execute(
                select(
                    _sessions.c.last_sequence,
                    _sessions.c.base_sequence,
                    _sessions.c.snapshot_version,
                    _sessions.c.compacted_through_sequence,
                    _sessions.c.deleted_at,
                ).where(_sessions.c.id == session_id)
            )
        ).one_or_none()
        if current is None:
            raise ValueError(f"session {session_id!r} has no raw messages to snapshot")
        if current.deleted_at is not None:
            raise SessionDeleted(
                f"session {session_id!r} was deleted at {current.deleted_at.isoformat()}; its "
                "checkpoint is refused"
            )
        if current.snapshot_version != expected:
            raise SnapshotConflict(
                f"Snapshot conflict; reload the session: {session_id!r} is at snapshot version "
                f"{current.snapshot_version}, not {expected}"
            )
        if boundary <= current.base_sequence:
            # Every sequence up to base_sequence belonged to a deleted generation of the id.
            raise SnapshotConflict(
                f"Snapshot conflict; reload the session: {session_id!r} was deleted and created "
                f"again, and compacted_through_sequence {boundary} belongs to the deleted session "
                f"(the current one starts after sequence {current.base_sequence})"
            )
        if current.last_sequence == current.base_sequence:
            raise ValueError(f"session {session_id!r} has no raw messages to snapshot")
        if boundary > current.last_sequence:
            raise ValueError(
                "Snapshot boundary must identify an existing Raw Log message: "
                f"compacted_through_sequence {boundary} is not an existing raw-log sequence "
                f"(the last is {current.last_sequence})"
            )
        raise ValueError(
            "Snapshot boundary must advance beyond the previous checkpoint: "
            f"compacted_through_sequence {boundary} must advance beyond the previous checkpoint's "
            f"{current.compacted_through_sequence}"
        )

    # -- extras, as zett's SQLSessionStorage has them --------------------------------

    async def create_session(
        self,
        *,
        session_id: str | None = None,
        parent_session_id: str | None = None,
        title: str | None = None,
        agent_name: str | None = None,
        session_type: int = DEFAULT_SESSION_TYPE,
    ) -> SessionSummary:
        """Create an empty session before its first append; ``session_id`` defaults to a UUIDv7.

        On the id of a deleted session this starts a new generation: the given
        fields, no checkpoint, ``created_at`` now, and messages numbered on from the
        deleted session's last sequence (kept by its tombstone, or by the high-water
        mark of a purged one: :mod:`chatledger.marks`) (no sequence or version of an id is ever
        valid twice, so nothing computed on the deleted session applies to the new one).

        Raises:
            ValueError: invalid fields, or a session with this id exists (and is not deleted).
        """
        now = clock.utc_now()
        fields: dict[str, Any] = {
            "parent_session_id": validate.optional_identifier(parent_session_id, "parent_session_id"),
            "title": validate.title(title),
            "agent_name": validate.agent_name(agent_name),
            "session_type": validate.session_type(session_type),
        }
        id = validate.identifier(session_id if session_id is not None else new_uuid7(), "session_id")
        if fields["parent_session_id"] == id:
            raise ValueError("parent_session_id must differ from session_id")
        latest = self.ledger.backend.latest

        async def work(conn: AsyncConnection) -> SessionSummary:
            # The tombstone first: the UPDATE takes its row lock (and SQLite's write lock).
            revived = await conn.execute(
                update(_sessions)
                .where(_sessions.c.id == id, _sessions.c.deleted_at.is_not(None))
                .values(
                    **fields,
                    deleted_at=None,
                    snapshot_version=0,
                    fields_version=_sessions.c.fields_version + 1,
                    created_at=now,
                    updated_at=latest(_sessions.c.updated_at, now),
                )
            )
            if revived.rowcount == 1:
                row = (await conn.execute(select(_sessions).where(_sessions.c.id == id))).one()
                return _summary(row)
            # A purged tombstone's mark: the new generation numbers on from it.
            mark = await marks.take(conn, marks.ZETT, id)
            base = 0 if mark is None else int(mark.last_sequence)
            values = {
                "id": id,
                **fields,
                "last_sequence": base,
                "base_sequence": base,
                "snapshot_version": 0,
                "compacted_through_sequence": base,
                "fields_version": 1 if mark is None else int(mark.version) + 1,
                "created_at": now,
                "updated_at": now,
            }
            try:
                await conn.execute(_sessions.insert(), values)
            except IntegrityError:
                # The session exists (it was no tombstone above), or a concurrent create or
                # first append inserted the id meanwhile; the validated row can violate
                # nothing but the primary key.
                raise ValueError(f"Session already exists: {id}") from None
            return _summary(SimpleNamespace(**values))

        return await self.ledger.write(work, session=id)

    async def get_session(self, session_id: str) -> SessionSummary | None:
        """One session's summary, or ``None`` (unknown or deleted); reads no message."""
        session_id = validate.identifier(session_id, "session_id")

        async def work(conn: AsyncConnection) -> SessionSummary | None:
            row = (
                await conn.execute(select(_sessions).where(_sessions.c.id == session_id, _live))
            ).one_or_none()
            return _summary(row) if row is not None else None

        return await self.ledger.read(work, replica=True, session=session_id)

    async def update_session(
        self,
        session_id: str,
        *,
        title: str | None = None,
        agent_name: str | None = None,
        expected_version: int | None = None,
    ) -> SessionSummary | None:
        """Change the mutable fields; ``None`` leaves a field as it is.

        Each update bumps the session's ``fields_version`` (so do an append that
        changes the title or agent name, and a delete and a create on a deleted id: a
        version read before them never matches again).
        With ``expected_version`` it is a compare-and-set on that version (see
        :meth:`get_fields_version`). Returns ``None`` for an unknown or deleted session.

        Raises:
            ValueError: neither field given, or a field is invalid.
            VersionConflict: ``expected_version`` is stale.
        """
        session_id = validate.identifier(session_id, "session_id")
        changes: dict[str, Any] = {}
        if title is not None:
            changes["title"] = validate.title(title)
        if agent_name is not None:
            changes["agent_name"] = validate.agent_name(agent_name)
        if not changes:
            raise ValueError("At least one session field must be supplied (title or agent_name)")
        expected = None if expected_version is None else validate.version(expected_version, minimum=1)
        latest = self.ledger.backend.latest

        async def work(conn: AsyncConnection) -> SessionSummary | None:
            statement = update(_sessions).where(_sessions.c.id == session_id, _live)
            if expected is not None:
                statement = statement.where(_sessions.c.fields_version == expected)
            changed = await conn.execute(
                statement.values(
                    **changes,
                    fields_version=_sessions.c.fields_version + 1,
                    updated_at=latest(_sessions.c.updated_at, clock.utc_now()),
                )
            )
            row = (
                await conn.execute(select(_sessions).where(_sessions.c.id == session_id, _live))
            ).one_or_none()
            if changed.rowcount != 1:
                # Nothing updated: with a version, a conflict if the session exists; without
                # one, the session did not exist when the UPDATE ran (it may exist by now,
                # recreated by someone else, and that one was not updated).
                if expected is not None and row is not None:
                    raise VersionConflict(
                        f"session {session_id!r} fields are at version {row.fields_version}, not {expected}"
                    )
                return None
            return _summary(row) if row is not None else None

        return await self.ledger.write(work, session=session_id)

    async def get_fields_version(self, session_id: str) -> int | None:
        """The session's ``fields_version`` (for :meth:`update_session`), or ``None``
        (unknown or deleted)."""
        session_id = validate.identifier(session_id, "session_id")

        async def work(conn: AsyncConnection) -> int | None:
            return await conn.scalar(
                select(_sessions.c.fields_version).where(_sessions.c.id == session_id, _live)
            )

        return await self.ledger.read(work)

    async def delete_session(self, session_id: str, *, idle_before: datetime | None = None) -> bool:
        """Delete a session: its raw log, checkpoints, title, agent name and parent.

        The id keeps a tombstone (its counter row, with ``deleted_at`` set) that
        remembers the last sequence and versions used, so that nothing a late
        writer holds is valid again: an append to a deleted session raises
        :class:`chatledger.SessionDeleted`, and so does a checkpoint.
        ``create_session(session_id=...)`` starts the id anew. One transaction.

        With ``idle_before`` (a timezone-aware instant) it is a conditional delete:
        only a session last active (``updated_at``: its last append or field change)
        before that instant is deleted. The deleting transaction decides, in the
        tombstone ``UPDATE``'s WHERE, which takes the counter row's lock first: an
        append committed before it moved ``updated_at`` past the cutoff and the
        session stays; one that waits behind it finds the tombstone. Instants are the
        writers' clocks (``updated_at`` never moves back).

        Returns whether a session was deleted (``False``: none under the id, deleted
        already, or active since ``idle_before``).

        Raises:
            ValueError: an invalid ``session_id``; a naive ``idle_before`` or one
                outside the instants every backend stores.
            WrongType: ``idle_before`` is not a ``datetime``.
        """
        session_id = validate.identifier(session_id, "session_id")
        selection = Selection(idle_before=validate.optional_aware(idle_before, "idle_before"))
        return await self._delete(session_id, selection)

    async def purge_sessions(
        self,
        *,
        older_than: timedelta | None = None,
        idle_before: datetime | None = None,
        prefix: str | None = None,
        batch_size: int = PURGE_BATCH,
        progress: Progress | None = None,
    ) -> int:
        """Delete the sessions last active before a cutoff and/or whose id starts with
        ``prefix``; returns how many it deleted.

        It reads the candidates a page (``batch_size`` ids) at a time, then deletes
        each as :meth:`delete_session` does, in a transaction of its own whose
        tombstone ``UPDATE`` checks the whole selection again: a session written to
        after its page was read is kept, with what was written. Every purged id keeps
        its tombstone. ``prefix`` is matched literally (``%``, ``_`` and ``\\`` are
        characters) and byte for byte (case and trailing spaces count) on every
        backend (:func:`chatledger.selection.id_prefix`).

        Args:
            older_than: last active longer ago than this; the cutoff is
                ``utc_now() - older_than``, taken once when the call starts.
            idle_before: instead, the cutoff itself (timezone-aware).
            prefix: the ids start with this (1-255 characters, not blank).
            batch_size: candidates read per page (at least 1).
            progress: called after each candidate with its id and whether it was
                deleted; an awaitable it returns is awaited.

        Raises:
            ValueError: neither a cutoff nor ``prefix``, both ``older_than`` and
                ``idle_before``, or a bad value (see
                :meth:`chatledger.selection.Selection.of`); nothing is deleted then.
            WrongType: an argument of the wrong type.
            StorageUnavailable, ConfigurationError, SchemaNotReady: as every call
                (:meth:`chatledger.engine.Ledger.write`); the sessions deleted until
                then stay deleted.
        """
        selection = Selection.of(idle_before=idle_before, older_than=older_than, prefix=prefix)
        size = validate.integer(batch_size, "batch_size", minimum=1)

        async def delete_one(session_id: str, seen: Mapping[str, Any]) -> bool:
            return await self._delete(session_id, selection, seen)

        return await purge(
            self.ledger,
            _sessions,
            _live,
            selection,
            delete_one,
            versions=_WRITTEN,
            size=size,
            progress=progress,
        )

    async def purge_tombstones(
        self,
        *,
        horizon: timedelta | None = None,
        deleted_before: datetime | None = None,
        batch_size: int = PURGE_BATCH,
        progress: Progress | None = None,
    ) -> int:
        """Delete the tombstones of sessions deleted longer than ``horizon`` ago (or
        before ``deleted_before``), each replaced by its high-water mark in the deleting
        transaction; returns how many it purged.

        No sequence or version of a purged id is ever valid again: a late append
        raises :class:`chatledger.SessionDeleted`, ``create_session`` numbers on from
        the mark. What the horizon promises, and what it needs (every writer at
        revision 0005 code or later), is in :mod:`chatledger.tombstones`. A tombstone
        revived or re-created after its page was read is kept.

        Raises:
            ValueError: both or neither of ``horizon`` and ``deleted_before``, or a bad
                value (:func:`chatledger.tombstones.cutoff`); nothing is purged then.
            WrongType: an argument of the wrong type.
            StorageUnavailable, ConfigurationError, SchemaNotReady: as every call; the
                tombstones purged until then stay purged.
        """
        before = tombstones.cutoff(horizon, deleted_before)
        size = validate.integer(batch_size, "batch_size", minimum=1)
        return await tombstones.purge_tombstones(
            self.ledger, ZETT.tombstone_rows(), before, size=size, progress=progress
        )

    async def _delete(
        self, session_id: str, selection: Selection, seen: Mapping[str, Any] | None = None
    ) -> bool:
        """The one delete: tombstones the session if it is live and still in ``selection``
        (and, for a purge, still at the versions ``seen`` when its page was read)."""
        latest = self.ledger.backend.latest
        selected = selection.where(_sessions, self.ledger.backend)
        selected += [_sessions.c[name] == value for name, value in (seen or {}).items()]

        async def work(conn: AsyncConnection) -> bool:
            now = clock.utc_now()
            # The counter row first: it locks out concurrent appenders, which then find
            # the tombstone.
            tombstoned = await conn.execute(
                update(_sessions)
                .where(_sessions.c.id == session_id, _live, *selected)
                .values(
                    deleted_at=now,
                    base_sequence=_sessions.c.last_sequence,
                    compacted_through_sequence=_sessions.c.last_sequence,
                    snapshot_version=0,
                    title=None,
                    agent_name=None,
                    parent_session_id=None,
                    fields_version=_sessions.c.fields_version + 1,
                    updated_at=latest(_sessions.c.updated_at, now),
                )
            )
            if tombstoned.rowcount != 1:
                return False
            await conn.execute(delete(_raw).where(_raw.c.session_id == session_id))
            await conn.execute(delete(_snapshots).where(_snapshots.c.session_id == session_id))
            return True

        async def settle(conn: AsyncConnection) -> bool | None:
            # A purge's delete whose COMMIT's answer was lost (``seen``: the versions its
            # page read): still live and selected, it was not committed (try again, the
            # UPDATE decides anew); the tombstone of that very row (one fields_version on,
            # the same last sequence), it was; anything else was written meanwhile: kept.
            assert seen is not None
            still = select(_sessions.c.id).where(_sessions.c.id == session_id, _live, *selected)
            if await conn.scalar(still) is not None:
                return None
            ours = await conn.scalar(
                select(_sessions.c.id).where(
                    _sessions.c.id == session_id,
                    _sessions.c.deleted_at.is_not(None),
                    _sessions.c.last_sequence == seen["last_sequence"],
                    _sessions.c.fields_version == seen["fields_version"] + 1,
                )
            )
            return ours is not None

        with telemetry.operation(self.ledger, "zett", "delete", session_id) as span:
            # Only a purge's delete is looked up after a lost COMMIT: a plain delete
            # retried after a re-create would delete the new session (OutcomeUnknown).
            deleted = await self.ledger.write(
                work, session=session_id, settle=None if seen is None else settle
            )
            span.set("chatledger.deleted", deleted)
            return deleted

    async def list_sessions(
        self,
        *,
        session_types: Sequence[int] | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[SessionSummary]:
        """One page of sessions, newest activity first (``updated_at``, then id).

        Reads only session rows, through the activity index: the counter row holds
        the message count, so no raw message is scanned. Deleted sessions are left out.
        ``session_types`` may hold any number of codes (none or empty: every type);
        they are sent as one value where the backend allows, never one parameter each.
        """
        limit, offset = validate.page(limit, offset)
        codes = tuple(validate.session_type(code) for code in session_types) if session_types else None
        # deleted_at is NULL in every row read: ordering by it too changes nothing but the
        # plan (see Backend.order_live_by_tombstone).
        tombstone = (_sessions.c.deleted_at.desc(),) if self.ledger.backend.order_live_by_tombstone else ()
        statement = (
            select(_sessions)
            .where(_live)
            .order_by(*tombstone, _sessions.c.updated_at.desc(), _sessions.c.id.desc())
        )
        if codes is not None:
            # Any number of types, in one bound value where the backend can (see
            # Backend.any_of): one parameter per type stops at 32,767 on asyncpg.
            statement = statement.where(
                self.ledger.backend.any_of(_sessions.c.session_type, sorted(set(codes)))
            )

        async def work(conn: AsyncConnection) -> list[SessionSummary]:
            return [_summary(row) for row in await conn.execute(statement.offset(offset).limit(limit))]

        with telemetry.operation(self.ledger, "zett", "list") as span:
            found = await self.ledger.read(work, replica=True)
            span.set("db.response.returned_rows", len(found))
            return found

    async def list_raw_messages(
        self,
        session_id: str,
        *,
        after_sequence: int = 0,
        through_sequence: int | None = None,
        limit: int = 10_000,
        offset: int = 0,
    ) -> list[RawMessageRecord]:
        """A page of the raw log in sequence order, ignoring checkpoints.

        A deleted session has none; one created again after a delete starts after
        the deleted one's last sequence (see :meth:`append`).

        Args:
            after_sequence: exclusive lower bound; 0 starts at the beginning.
            through_sequence: inclusive upper bound; ``None`` for none.
            limit: positive page size. offset: records to skip after the bounds.
        """
        session_id = validate.identifier(session_id, "session_id")
        after = validate.integer(after_sequence, "after_sequence")
        through = validate.optional_integer(through_sequence, "through_sequence", minimum=1)
        limit, offset = validate.page(limit, offset)
        statement = select(*codec.RECORD_COLUMNS).where(
            _raw.c.session_id == session_id, _raw.c.sequence > after
        )
        if through is not None:
            statement = statement.where(_raw.c.sequence <= through)
        statement = statement.order_by(_raw.c.sequence).offset(offset).limit(limit)

        async def work(conn: AsyncConnection) -> list[RawMessageRecord]:
            return codec.records(await conn.execute(statement))

        return await self.ledger.read(work)

    async def count_messages(self, session_id: str) -> int:
        """How many raw messages the session has (from its counter row); 0 when unknown or deleted."""
        session_id = validate.identifier(session_id, "session_id")

        async def work(conn: AsyncConnection) -> int:
            count = await conn.scalar(
                select(_sessions.c.last_sequence - _sessions.c.base_sequence).where(
                    _sessions.c.id == session_id, _live
                )
            )
            return int(count or 0)

        return await self.ledger.read(work)


def _snapshot_view(head: Any) -> SimpleNamespace:
    """The ``checkpoint_*`` columns of a joined session row, under their own names."""
    mapping = head._mapping
    return SimpleNamespace(**{column.name: mapping[f"checkpoint_{column.name}"] for column in _snapshots.c})
