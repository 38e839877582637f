"""chatledger's kinds of session, one per framework, and their registry.

Each framework's sessions are one :class:`SessionKind` (data: names, tables,
tombstones, export records, stats figures) registered below, and one module of its
adapter, ``<package>.kind``, implementing :class:`Operations` (imported only when a
tool needs it: :func:`operations`). Stats, retention, the ``sessions`` commands,
export, import and copy, and the tombstone purge go over :func:`registered`;
nothing outside the adapters and this package compares a kind's name.

- :mod:`.base`: :class:`SessionKind`, the registry, :class:`Operations`;
- :mod:`.records`: the shapes a kind's rows take in an export;
- :mod:`.showing`: the text helpers the kinds' ``show`` shares.

Adding a framework: its adapter package with its ``kind`` module, one
``register(SessionKind(...))`` below, its tables in a new revision (and their golden
DDL), its contract in ``chatledger.testing`` and its docs page;
``tests/unit/test_kind_registry.py`` then lists what it still lacks
(docs/architecture.md, "Adding a framework").
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import marks
from ..schema import (
    adk_app_states_table,
    adk_events_table,
    adk_sessions_table,
    adk_user_states_table,
    langgraph_blobs_table,
    langgraph_checkpoints_table,
    langgraph_threads_table,
    langgraph_writes_table,
    openai_items_table,
    openai_sessions_table,
    raw_messages_table,
    rein_sessions_table,
    rein_writes_table,
    sessions_table,
    snapshots_table,
)
from ..tombstones import Tombstones
from .base import (
    ALL,
    OPERATIONS,
    Beside,
    Counter,
    Field,
    Found,
    Listing,
    MoveIn,
    MovingIn,
    Operations,
    Ranking,
    Scope,
    SessionKind,
    Source,
    SourceOption,
    beside,
    chosen,
    installed,
    lookup,
    missing_note,
    missing_operations,
    names,
    operations,
    register,
    registered,
)
from .records import (
    Checkpointed,
    Grouped,
    Layout,
    Log,
    MarkRule,
    Part,
    Record,
    Rows,
    layout_counts,
    long_texts,
    record_tables,
    session_counts,
)

#: zett-agent's sessions: a counter row (``agent_sessions``), checkpoints and the raw log.
ZETT = SessionKind(
    name="zett",
    label="zett",
    distribution="zett-agent",
    extra="zett",
    package="chatledger.zett",
    tables=(sessions_table, raw_messages_table, snapshots_table),
    # A revive bumps ``fields_version``; every append moves ``last_sequence``.
    tombstones=Tombstones(
        sessions_table,
        marks.ZETT,
        ("last_sequence", "fields_version"),
        ("last_sequence", "fields_version"),
        leftovers=((raw_messages_table, ("session_id",)), (snapshots_table, ("session_id",))),
    ),
    records=(
        Checkpointed(
            framework="zett",
            head="session",
            checkpoint="snapshot",
            entry="message",
            end="session_end",
            sessions=sessions_table,
            checkpoints=snapshots_table,
            entries=raw_messages_table,
            count="sessions",
            entries_count="messages",
            checkpoints_count="snapshots",
            mark=MarkRule(marks.ZETT, "fields_version"),
        ),
    ),
    counters=(
        # Deleted sessions' raw messages are gone; the live ones' are counted by their rows.
        Counter("raw_messages", per_session=sessions_table.c.last_sequence - sessions_table.c.base_sequence),
        Counter("checkpoints", rows=snapshots_table),
    ),
    largest=Ranking(sessions_table.c.last_sequence - sessions_table.c.base_sequence, "raw messages"),
    entry="message",
    retained_by_default=True,
    optional_in_export=False,
)

#: rein-agent's sessions: one row each (its JSON), and the write log of its saves.
REIN = SessionKind(
    name="rein",
    label="rein",
    distribution="rein-agent",
    extra="rein",
    package="chatledger.rein",
    tables=(rein_sessions_table, rein_writes_table),
    # The delete set ``updated_at``; every save and delete bumps ``version``.
    tombstones=Tombstones(
        rein_sessions_table,
        marks.REIN,
        ("version",),
        (None, "version"),
        deleted="updated_at",
        leftovers=((rein_writes_table, ("session_id",)),),
        marker="session_json",
        marked_by_null=True,
    ),
    records=(
        Rows(
            record="rein_session",
            table=rein_sessions_table,
            key=("id",),
            count="rein_sessions",
            noun="rein session",
            marker="session_json",
            marked_by_null=True,
            mark=MarkRule(marks.REIN, "version", base=None),
        ),
    ),
    counters=(Counter("write_log", rows=rein_writes_table),),
    retained_by_default=True,
    optional_in_export=False,
)

#: The OpenAI Agents SDK's sessions: a counter row and its items.
OPENAI = SessionKind(
    name="openai",
    label="OpenAI Agents",
    distribution="openai-agents",
    extra="openai-agents",
    package="chatledger.openai_agents",
    tables=(openai_sessions_table, openai_items_table),
    # A cleared (or deleted) session; every add moves ``last_sequence``, every clear
    # ``generation``.
    tombstones=Tombstones(
        openai_sessions_table,
        marks.OPENAI,
        ("last_sequence", "generation"),
        ("last_sequence", "generation"),
        leftovers=((openai_items_table, ("session_id",)),),
    ),
    records=(
        Log(
            framework="OpenAI Agents",
            head="openai_session",
            entry="openai_item",
            end="openai_session_end",
            entries_name="items",
            sessions=openai_sessions_table,
            entries=openai_items_table,
            key=("id",),
            entry_key=("session_id",),
            count="openai_sessions",
            entries_count="openai_items",
            mark=MarkRule(marks.OPENAI, "generation"),
        ),
    ),
    counters=(
        # A cleared session's items are erased: every item row is of a live session.
        Counter("items", rows=openai_items_table, where=openai_items_table.c.retracted_at.is_(None)),
        Counter("popped", rows=openai_items_table, where=openai_items_table.c.retracted_at.is_not(None)),
    ),
    largest=Ranking(
        openai_sessions_table.c.last_sequence - openai_sessions_table.c.base_sequence,
        "items (popped ones included)",
    ),
    entry="item",
    moves_in=MoveIn(
        flag="--openai-sdk",
        help="instead of FILE: the database the OpenAI Agents SDK's SQLAlchemySession or SQLiteSession "
        "wrote (its agent_sessions/agent_messages tables), never chatledger's own",
        skipped=("source row", "not JSON (or not an item), skipped"),
        options=(
            SourceOption("--messages-table", "agent_messages", "with --openai-sdk: its message table"),
            SourceOption("--sessions-table", "agent_sessions", "with --openai-sdk: its session table"),
        ),
    ),
)

#: Google ADK's ``DatabaseSessionService`` tables (schema v1) and the columns the
#: import reads; ADK's tools create them in whatever database they are given.
ADK_OWN_TABLES: Mapping[str, frozenset[str]] = {
    "sessions": frozenset({"app_name", "user_id", "id", "state", "create_time", "update_time"}),
    "events": frozenset({"id", "app_name", "user_id", "session_id", "invocation_id", "event_data"}),
    "app_states": frozenset({"app_name", "state", "update_time"}),
    "user_states": frozenset({"app_name", "user_id", "state", "update_time"}),
}

#: Google ADK's sessions: a counter row with the session state, its events, and the
#: ``app:``/``user:`` state the sessions of an app (and user) share.
ADK = SessionKind(
    name="adk",
    label="ADK",
    distribution="google-adk",
    extra="adk",
    package="chatledger.adk",
    tables=(adk_sessions_table, adk_events_table, adk_app_states_table, adk_user_states_table),
    # Every append moves ``last_sequence`` (a delete too), every state change
    # ``state_version``.
    tombstones=Tombstones(
        adk_sessions_table,
        marks.ADK,
        ("last_sequence", "state_version"),
        ("last_sequence", "state_version"),
        key=("app_name", "user_id", "id"),
        leftovers=((adk_events_table, ("app_name", "user_id", "session_id")),),
    ),
    records=(
        Log(
            framework="ADK",
            head="adk_session",
            entry="adk_event",
            end="adk_session_end",
            entries_name="events",
            sessions=adk_sessions_table,
            entries=adk_events_table,
            key=("app_name", "user_id", "id"),
            entry_key=("app_name", "user_id", "session_id"),
            count="adk_sessions",
            entries_count="adk_events",
            mark=MarkRule(marks.ADK, "state_version"),
            key_words=("app", "user"),
        ),
        Rows(
            record="adk_app_state",
            table=adk_app_states_table,
            key=("app_name",),
            count="adk_states",
            noun="ADK app: state",
            sessions=False,
            key_words=("app",),
            counted_as="app:/user: state row",
        ),
        Rows(
            record="adk_user_state",
            table=adk_user_states_table,
            key=("app_name", "user_id"),
            count="adk_states",
            noun="ADK user: state",
            sessions=False,
            key_words=("app", "user"),
            counted_as="app:/user: state row",
        ),
    ),
    counters=(
        Counter(
            "events", per_session=adk_sessions_table.c.last_sequence - adk_sessions_table.c.base_sequence
        ),
        Counter("app_states", rows=adk_app_states_table),
        Counter("user_states", rows=adk_user_states_table),
    ),
    largest=Ranking(adk_sessions_table.c.last_sequence - adk_sessions_table.c.base_sequence, "events"),
    entry="event",
    scopes=("app_name", "user_id"),
    moves_in=MoveIn(
        flag="--adk",
        help="instead of FILE: the database Google ADK's DatabaseSessionService wrote (its sessions, "
        "events, app_states and user_states tables)",
        skipped=("partial event", "skipped"),
        beside=Beside(
            ADK_OWN_TABLES,
            what="Google ADK's own DatabaseSessionService tables",
            then="give ADK's tools --session_service_uri chatledger+<the DSN> after "
            "chatledger.adk.register() (docs/adk.md)",
        ),
    ),
)

#: The tables AsyncPostgresSaver (and AIOMySQLSaver) create in whatever database they
#: are given, and the columns the import reads.
LANGGRAPH_OWN_TABLES: Mapping[str, frozenset[str]] = {
    "checkpoints": frozenset(
        {"thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "checkpoint", "metadata"}
    ),
    "checkpoint_blobs": frozenset({"thread_id", "checkpoint_ns", "channel", "version", "type", "blob"}),
    "checkpoint_writes": frozenset(
        {"thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", "channel", "type", "blob"}
    ),
}

#: LangGraph's threads: a thread row (generation and tombstone, with the horizon of its
#: deleted checkpoints), its checkpoints, their channel values and pending writes.
LANGGRAPH = SessionKind(
    name="langgraph",
    label="LangGraph",
    distribution="langgraph",
    extra="langgraph",
    package="chatledger.langgraph",
    tables=(
        langgraph_threads_table,
        langgraph_checkpoints_table,
        langgraph_blobs_table,
        langgraph_writes_table,
    ),
    # Every write moves ``version``, a delete ``generation``; the mark keeps the horizon
    # of the deleted checkpoints (``deleted_through``) and the generation.
    tombstones=Tombstones(
        langgraph_threads_table,
        marks.LANGGRAPH,
        ("version", "deleted_through", "generation"),
        ("deleted_through", "generation"),
        leftovers=(
            (langgraph_checkpoints_table, ("thread_id",)),
            (langgraph_blobs_table, ("thread_id",)),
            (langgraph_writes_table, ("thread_id",)),
        ),
    ),
    records=(
        Grouped(
            framework="LangGraph",
            head="langgraph_thread",
            end="langgraph_thread_end",
            sessions=langgraph_threads_table,
            parts=(
                Part("langgraph_checkpoint", langgraph_checkpoints_table, "langgraph_checkpoints"),
                Part("langgraph_blob", langgraph_blobs_table, "langgraph_blobs"),
                Part("langgraph_write", langgraph_writes_table, "langgraph_writes"),
            ),
            count="langgraph_threads",
            mark=MarkRule(marks.LANGGRAPH, "generation", base="deleted_through"),
            session_column="thread_id",
            noun="thread",
        ),
    ),
    counters=(
        Counter("checkpoints", rows=langgraph_checkpoints_table),
        Counter("blobs", rows=langgraph_blobs_table),
        Counter("writes", rows=langgraph_writes_table),
    ),
    entry="checkpoint",
    moves_in=MoveIn(
        flag="--langgraph",
        help="instead of FILE: the database LangGraph's own saver wrote (AsyncPostgresSaver's or "
        "AIOMySQLSaver's checkpoints, checkpoint_blobs and checkpoint_writes tables, or AsyncSqliteSaver's "
        "checkpoints and writes)",
        skipped=("checkpoint", "unreadable, skipped"),
        beside=Beside(
            LANGGRAPH_OWN_TABLES,
            what="LangGraph's own AsyncPostgresSaver (or AIOMySQLSaver) tables",
            then="give the graphs chatledger.langgraph.LedgerSaver instead of AsyncPostgresSaver "
            "(docs/langgraph.md)",
        ),
    ),
)

# The registry, in the order the tools handle and report the kinds.
register(ZETT, REIN, OPENAI, ADK, LANGGRAPH)

__all__ = [
    "ADK",
    "ADK_OWN_TABLES",
    "ALL",
    "LANGGRAPH",
    "LANGGRAPH_OWN_TABLES",
    "OPENAI",
    "OPERATIONS",
    "REIN",
    "ZETT",
    "Beside",
    "Checkpointed",
    "Counter",
    "Field",
    "Found",
    "Grouped",
    "Layout",
    "Listing",
    "Log",
    "MarkRule",
    "MoveIn",
    "MovingIn",
    "Operations",
    "Part",
    "Ranking",
    "Record",
    "Rows",
    "Scope",
    "SessionKind",
    "Source",
    "SourceOption",
    "beside",
    "chosen",
    "installed",
    "layout_counts",
    "long_texts",
    "lookup",
    "missing_note",
    "missing_operations",
    "names",
    "operations",
    "record_tables",
    "register",
    "registered",
    "session_counts",
]
