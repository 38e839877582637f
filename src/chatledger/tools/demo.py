"""``chatledger demo``: a real zett-agent ``Agent`` persisting through chatledger, offline.

The demo runs zett's own runtime end to end on one database, with a scripted
model instead of a provider (no network, no tokenizer download):

1. a user turn and the assistant's reply;
2. a tool round trip through a real zett ``@tool`` (``weather``);
3. a compaction by zett's ``CompactionExtension`` (a low token budget and a
   character-based ``count_tokens``), stored as a checkpoint;
4. a restart: every storage is closed, a new extension and agent are built on the
   same DSN, the session is restored from the database (checkpoint + raw tail),
   and one more turn runs.

Storage calls go through :class:`AuditedStorage`, which records the
``SessionStorage`` operations zett makes (``load``, ``append:<role>``,
``snapshot``). Each run uses a fresh session id, so repeated runs share a database.

:func:`record_demo` runs it and returns a :class:`DemoRun`; :func:`render_demo`
prints one with rich; :func:`run_demo` does both.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text
from sqlalchemy.engine import URL
from zett_agent.agent import AgentRunConfig
from zett_agent.client import AgentClient, create_agent
from zett_agent.events import AgentEventType
from zett_agent.extensions.compaction import CompactedMessage, CompactionExtension
from zett_agent.extensions.events import MessageTiming
from zett_agent.extensions.persistence import ContextSnapshot, RawMessageRecord, SessionSummary, SessionView
from zett_agent.json_types import JsonValue
from zett_agent.messages import (
    AnyMessage,
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from zett_agent.model import (
    ModelEvent,
    ModelRequest,
    ModelResponse,
    ModelUsage,
    RetryOptions,
    ToolCallDelta,
)
from zett_agent.tools.base import tool

from ..dsn import display
from ..zett import LedgerSessionExtension, LedgerSessionStorage

#: System prompt of the demo agent (zett appends it to the raw log on every request).
SYSTEM_PROMPT = "You are the chatledger demo assistant."
#: Compaction budget, in :func:`count_tokens` units: crossed by the third turn only.
MAX_TOKENS = 90
#: Every demo session's id starts with it (``chatledger sessions purge --prefix demo-``).
SESSION_PREFIX = "demo-"
#: Sessions shown from ``list_sessions`` (newest activity first).
SESSIONS_SHOWN = 5


def count_tokens(messages: Sequence[AnyMessage]) -> int:
    """Offline token estimate for ``CompactionExtension``: 1 token per 4 characters
    of each message's text (tool calls count their name and JSON arguments).

    Passed as ``count_tokens=`` so zett never loads its tiktoken tokenizer (which
    downloads its encoding on first use)."""
    return sum(math.ceil(len(_message_text(message)) / 4) for message in messages)


@tool
async def weather(city: str) -> str:
    """Current weather for a city (a canned offline answer).

    Args:
        city: City name, such as Lisbon.

    Guidelines:
        - Call it when the user asks about the weather.
    """
    return f"{city}: 21 °C, sunny, light north-west wind."


@dataclass(frozen=True)
class Step:
    """One scripted user turn: what the user says and what the model answers.

    ``reply`` may name ``{tool}`` (the tool's result, after ``call``) and
    ``{context}`` (what the model was given: checkpoint and newer messages).
    """

    user: str
    reply: str
    call: ToolCall | None = None


#: Before the restart.
FIRST_STEPS = (
    Step(
        "Hi! I am planning a weekend in Lisbon.",
        "Lovely choice. Lisbon is hilly and its old streets are cobbled, so bring good walking shoes.",
    ),
    Step(
        "What is the weather there right now?",
        "Right now: {tool} Pack light layers.",
        ToolCall(id="call-weather-1", name="weather", arguments={"city": "Lisbon"}),
    ),
    Step(
        "Great. Please remember that I prefer museums over beaches.",
        "Noted: museums first. Start with the Gulbenkian and the tile museum.",
    ),
)
#: After the restart.
SECOND_STEPS = (Step("What do you remember about my trip?", "Restored {context}."),)
RESTART = ("restart", "every storage closed; a new extension and agent open the same database")
#: What the scripted summarizer answers to zett's checkpoint request.
SUMMARY = "Lisbon weekend; 21 °C and sunny."


class ScriptedModel:
    """An offline zett ``AgentModel`` answering from a script.

    Implements ``zett_agent.model.AgentModel`` (``retry`` and ``stream``). It answers
    the newest user message from its ``steps``: with a tool call first when the
    step has one, then with the step's reply. A request that starts with zett's
    summarization instruction (from ``CompactionExtension``) gets :data:`SUMMARY`.
    Usage is reported with :func:`count_tokens`.

    Raises:
        LookupError: a user message that is not in the script.
    """

    retry = RetryOptions(max_retries=0)

    def __init__(self, steps: Sequence[Step]) -> None:
        self.steps = {step.user: step for step in steps}

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream one scripted answer: a text delta or a tool-call delta, then the response."""
        message = self._answer(request.messages)
        usage = ModelUsage(input_tokens=count_tokens(request.messages), output_tokens=count_tokens([message]))
        if message.tool_calls:
            call = message.tool_calls[0]
            yield ModelEvent.tool_call(
                ToolCallDelta(
                    index=0,
                    id_delta=call.id,
                    name_delta=call.name,
                    arguments_delta=json.dumps(call.arguments),
                )
            )
            finish = "tool_calls"
        else:
            yield ModelEvent.text(message.content)
            finish = "stop"
        yield ModelEvent.completed(ModelResponse(message=message, finish_reason=finish, usage=usage))

    def _answer(self, messages: Sequence[AnyMessage]) -> AssistantMessage:
        first = messages[0] if messages else None
        if isinstance(first, SystemMessage) and first.content.startswith("Summarize"):
            return AssistantMessage(content=SUMMARY, provider="scripted", model="demo")
        turn = _current_turn(messages)
        user = next(message for message in turn if isinstance(message, UserMessage))
        step = self.steps.get(user.text)
        if step is None:
            raise LookupError(f"the scripted model has no answer for {user.text!r}")
        results = [message for message in turn if isinstance(message, ToolMessage)]
        if step.call is not None and not results:
            return AssistantMessage(tool_calls=(step.call,), provider="scripted", model="demo")
        reply = step.reply.format(
            tool=results[-1].text if results else "", context=_describe_context(messages)
        )
        return AssistantMessage(content=reply, provider="scripted", model="demo")


def _current_turn(messages: Sequence[AnyMessage]) -> list[AnyMessage]:
    """The messages from the newest plain user message on (a checkpoint is not one)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, UserMessage) and not isinstance(message, CompactedMessage):
            return list(messages[index:])
    raise LookupError("the request has no user message")


def _describe_context(messages: Sequence[AnyMessage]) -> str:
    dialogue = [message for message in messages if not isinstance(message, SystemMessage)]
    checkpoints = [message for message in dialogue if isinstance(message, CompactedMessage)]
    if not checkpoints:
        return f"{len(dialogue)} messages and no checkpoint"
    summary = checkpoints[-1].text.splitlines()[-1]
    return f"a checkpoint ({summary}) and {len(dialogue) - len(checkpoints)} newer messages"


@dataclass(frozen=True)
class TraceEntry:
    """One ``SessionStorage`` call: which process (``run``) made it, the operation
    (``load``, ``append:<role>``, ``snapshot``), and what it returned."""

    run: int
    operation: str
    detail: str


class AuditedStorage(LedgerSessionStorage):
    """A ``LedgerSessionStorage`` that records each ``SessionStorage`` call in ``trace``
    before returning its result; it delegates everything to the ledger storage.

    Args:
        dsn: See :class:`LedgerSessionStorage`.
        trace: Shared list the entries are appended to (kept across restarts).
        run: Label of this "process" in the trace (1 before the restart, 2 after).
    """

    def __init__(self, dsn: str | URL | None, trace: list[TraceEntry], run: int) -> None:
        super().__init__(dsn)
        self.trace = trace
        self.run = run
        #: Every view ``load`` returned, in order.
        self.views: list[SessionView] = []
        #: Every checkpoint ``snapshot`` stored, in order.
        self.snapshots: list[ContextSnapshot] = []

    async def load(self, session_id: str) -> SessionView:
        """:meth:`LedgerSessionStorage.load`, recorded as ``load`` with what it found."""
        view = await super().load(session_id)
        self.views.append(view)
        self.trace.append(TraceEntry(self.run, "load", _describe_view(view)))
        return view

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
        """:meth:`LedgerSessionStorage.append`, recorded as ``append:<role>`` with its sequence."""
        sequence = await super().append(
            session_id,
            request_id,
            message,
            timing,
            parent_session_id=parent_session_id,
            title=title,
            agent_name=agent_name,
            metadata=metadata,
            tags=tags,
            usage=usage,
            message_id=message_id,
        )
        self.trace.append(TraceEntry(self.run, f"append:{message.role.value}", f"#{sequence}"))
        return sequence

    async def snapshot(
        self,
        session_id: str,
        compacted_message: CompactedMessage,
        compacted_through_sequence: int,
        expected_version: int,
    ) -> ContextSnapshot:
        """:meth:`LedgerSessionStorage.snapshot`, recorded as ``snapshot`` with its version and boundary."""
        stored = await super().snapshot(
            session_id, compacted_message, compacted_through_sequence, expected_version
        )
        self.snapshots.append(stored)
        self.trace.append(
            TraceEntry(
                self.run,
                "snapshot",
                f"v{stored.version} through #{stored.compacted_through_sequence} "
                f"(expected v{expected_version})",
            )
        )
        return stored


def _describe_view(view: SessionView) -> str:
    tail = [record.sequence for record in view.raw_tail]
    span = f"#{tail[0]}..#{tail[-1]}" if tail else "none"
    if view.snapshot is None:
        return "empty session" if not tail else f"no checkpoint, tail {span}"
    return (
        f"checkpoint v{view.snapshot.version} through #{view.snapshot.compacted_through_sequence}, "
        f"tail {span}"
    )


@dataclass
class DemoRun:
    """What one demo run did and found in the database afterwards."""

    #: The database, password masked.
    database: str
    session_id: str
    #: (speaker, text) lines of the conversation, with compaction and restart notes.
    transcript: list[tuple[str, str]] = field(default_factory=list)
    trace: list[TraceEntry] = field(default_factory=list)
    #: The checkpoint the compaction stored (before the restart).
    checkpoint: ContextSnapshot | None = None
    #: The first view loaded after the restart (checkpoint + raw tail).
    restored: SessionView | None = None
    #: Newest sessions in the database (``list_sessions``), this run's among them.
    sessions: list[SessionSummary] = field(default_factory=list)
    #: The session's whole raw log (``list_raw_messages``).
    raw: list[RawMessageRecord] = field(default_factory=list)
    #: The session's message count (``count_messages``, from its counter row).
    message_count: int = 0


async def record_demo(dsn: str | URL | None) -> DemoRun:
    """Run the demo on ``dsn`` (see :func:`chatledger.dsn.resolve_dsn`) and return what happened.

    Raises:
        chatledger.SchemaNotReady: a server database that is not migrated (the
            embedded SQLite default upgrades itself).
        chatledger.StorageUnavailable: the database cannot be reached.
        ValueError: an invalid DSN.
    """
    session_id = f"{SESSION_PREFIX}{uuid.uuid4()}"
    trace: list[TraceEntry] = []

    first = AuditedStorage(dsn, trace, run=1)
    demo = DemoRun(database=display(first.url), session_id=session_id, trace=trace)
    extension = LedgerSessionExtension(first)
    try:
        await extension.create_session(session_id=session_id, title="chatledger demo", agent_name="demo")
        client = await _agent(extension, session_id, FIRST_STEPS)
        for step in FIRST_STEPS:
            await _turn(client, step.user, demo, first)
    finally:
        await extension.close()
    if not first.snapshots:
        raise RuntimeError("the demo's compaction did not run; its token budget no longer fits the script")
    demo.checkpoint = first.snapshots[-1]

    demo.transcript.append(RESTART)
    second = AuditedStorage(dsn, trace, run=2)
    extension = LedgerSessionExtension(second)
    try:
        client = await _agent(extension, session_id, SECOND_STEPS)
        for step in SECOND_STEPS:
            await _turn(client, step.user, demo, second)
        demo.restored = second.views[0]
        restart = demo.transcript.index(RESTART)
        demo.transcript.insert(restart + 1, ("restored", _describe_view(demo.restored)))
        demo.sessions = await extension.list_sessions(limit=SESSIONS_SHOWN)
        demo.raw = await extension.list_raw_messages(session_id)
        demo.message_count = await extension.count_messages(session_id)
    finally:
        await extension.close()
    return demo


async def _agent(extension: LedgerSessionExtension, session_id: str, steps: Sequence[Step]) -> AgentClient:
    compaction = CompactionExtension(max_tokens=MAX_TOKENS, keep_recent_tokens=1, count_tokens=count_tokens)
    return await create_agent(
        ScriptedModel(steps),
        config=AgentRunConfig(session_id=session_id),
        system_prompt=SYSTEM_PROMPT,
        tools=[weather],
        extensions=[extension, compaction],
    )


async def _turn(client: AgentClient, text: str, demo: DemoRun, storage: AuditedStorage) -> None:
    demo.transcript.append(("user", text))
    async for event in client.stream(text):
        if event.type is AgentEventType.TOOL_STARTED:
            for call in event.tool_calls:
                arguments = ", ".join(f"{key}={value!r}" for key, value in call.arguments.items())
                demo.transcript.append(("tool", f"{call.name}({arguments})"))
        elif event.type is AgentEventType.TOOL_COMPLETED and isinstance(event.message, ToolMessage):
            demo.transcript.append(("tool", f"-> {event.message.text}"))
        elif event.type is AgentEventType.COMPACTION_COMPLETED and event.compaction is not None:
            # zett's event counts positions in the model's context; the checkpoint the
            # storage wrote (before zett emitted the event) names raw-log sequences, the
            # boundary every other line of the demo shows. A fresh session starts at 1.
            if not storage.snapshots:
                raise RuntimeError("zett compacted the context but the storage wrote no checkpoint")
            stored = storage.snapshots[-1]
            demo.transcript.append(
                (
                    "compaction",
                    f"raw messages 1..{stored.compacted_through_sequence} replaced by checkpoint "
                    f"v{stored.version} in the model's context (the raw log keeps them)",
                )
            )
        elif event.type is AgentEventType.RUN_COMPLETED and isinstance(event.message, AssistantMessage):
            demo.transcript.append(("assistant", event.message.content))


def _message_text(message: AnyMessage) -> str:
    if isinstance(message, AssistantMessage) and message.tool_calls:
        calls = " ".join(f"{call.name}({json.dumps(call.arguments)})" for call in message.tool_calls)
        return f"{message.content} {calls}".strip()
    text: Any = getattr(message, "text", None)
    if isinstance(text, str):
        return text
    return str(getattr(message, "content", ""))


_SPEAKER_STYLE = {"user": "bold cyan", "assistant": "bold green", "tool": "magenta",
                  "compaction": "yellow", "restart": "bold red", "restored": "yellow"}  # fmt: skip


def render_demo(demo: DemoRun, console: Console) -> None:
    """Print a :class:`DemoRun`: conversation, sessions, raw log, checkpoint, storage trace."""
    console.rule("[bold]chatledger demo")
    console.print(f"database  {demo.database}", highlight=False, markup=False, soft_wrap=True)
    console.print(f"session   {demo.session_id}", highlight=False, markup=False, soft_wrap=True)

    console.rule("conversation (zett Agent, scripted offline model)")
    conversation = Table.grid(padding=(0, 1))
    conversation.add_column(justify="right", no_wrap=True)
    conversation.add_column()
    for speaker, text in demo.transcript:
        conversation.add_row(Text(speaker, style=_SPEAKER_STYLE.get(speaker, "")), Text(text))
    console.print(conversation)

    sessions = _table(f"sessions (list_sessions, newest {SESSIONS_SHOWN})",
                      ("session", -3), ("title", -1), ("messages", 8), ("updated (UTC)", 14))  # fmt: skip
    for summary in demo.sessions:
        sessions.add_row(
            summary.session_id,
            summary.title or "",
            str(summary.message_count),
            summary.updated_at.strftime("%m-%d %H:%M:%S"),
            style="bold" if summary.session_id == demo.session_id else "dim",
        )
    console.print(sessions)

    boundary = demo.checkpoint.compacted_through_sequence if demo.checkpoint is not None else 0
    raw = _table(f"raw log (list_raw_messages, {demo.message_count} messages)",
                 ("seq", 3), ("role", 9), ("text", -1))  # fmt: skip
    for record in demo.raw:
        text = " ".join(_message_text(record.message).split())
        raw.add_row(str(record.sequence), record.message.role.value, text,
                    style="dim" if record.sequence <= boundary else "")  # fmt: skip
    console.print(raw)
    if demo.checkpoint is not None:
        checkpoint = Text(
            f"checkpoint v{demo.checkpoint.version}, compacted_through_sequence="
            f"{demo.checkpoint.compacted_through_sequence}: ",
            style="yellow",
        )
        checkpoint.append(demo.checkpoint.compacted_message.text.splitlines()[-1], style="")
        console.print(checkpoint)
        last = demo.raw[-1].sequence if demo.raw else boundary
        console.print(
            Text(
                f"(it stands for raw messages 1..{boundary}, which stay in the raw log unchanged; "
                f"a load returns the checkpoint and the messages after it, {boundary + 1}..{last})",
                style="dim",
            )
        )

    trace = _table("storage trace (AuditedStorage), one row per request",
                   ("run", 3), ("load", -2, True), ("then", -3, True))  # fmt: skip
    for run, load, writes in _requests(demo.trace):
        trace.add_row(str(run), load, writes)
    console.print(trace)


def _table(title: str, *columns: tuple[str, int] | tuple[str, int, bool]) -> Table:
    """A table as wide as the console. Each column is (name, size[, wrap]): a positive
    size is a fixed width, a negative one a share of the rest; cells that do not
    wrap are cut with an ellipsis."""
    table = Table(title=title, title_justify="left", title_style="bold", expand=True)
    for name, size, *wrap in columns:
        table.add_column(
            name,
            width=size if size > 0 else None,
            ratio=-size if size < 0 else None,
            no_wrap=not wrap,
            overflow="fold" if wrap else "ellipsis",
        )
    return table


def _requests(trace: Sequence[TraceEntry]) -> list[tuple[int, str, Text]]:
    """Group a trace into requests, each starting with the ``load`` zett makes to restore;
    runs of appends are merged: ``append system #1, user #2; snapshot v1 ...``."""
    requests: list[tuple[int, str, Text]] = []
    previous = ""
    for entry in trace:
        if entry.operation == "load" or not requests:
            requests.append((entry.run, entry.detail if entry.operation == "load" else "", Text()))
            previous = "load"
        if entry.operation == "load":
            continue
        writes = requests[-1][2]
        kind, _, role = entry.operation.partition(":")
        if kind == "append" and previous == "append":
            writes.append(f", {role} {entry.detail}")
        else:
            if writes:
                writes.append("; ")
            if kind == "append":
                writes.append(f"append {role} {entry.detail}")
            else:
                writes.append(f"{entry.operation} {entry.detail}", style="bold yellow")
        previous = kind
    return requests


async def run_demo(dsn: str | None, console: Console) -> DemoRun:
    """Run the demo on ``dsn`` (``None``: ``CHATLEDGER_DSN``, else the embedded
    SQLite default, which upgrades itself) and print it to ``console``.

    Raises:
        chatledger.SchemaNotReady: a server database that is not migrated.
        chatledger.StorageUnavailable: the database cannot be reached.
        ValueError: an invalid DSN.
    """
    demo = await record_demo(dsn)
    render_demo(demo, console)
    return demo
