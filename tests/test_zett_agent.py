"""A real zett-agent ``Agent.run`` through chatledger, with an offline scripted model.

The audited adapter wraps ``LedgerSessionStorage`` in a storage that records every
``SessionStorage`` call ("load", "append:<role>", "snapshot") and hands it to
zett's own ``BaseSessionPersistenceExtension``, so the calls zett makes are the
ones checked, not ones this test imagines.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from zett_agent.agent import Agent, AgentRunConfig
from zett_agent.extensions.compaction import CompactedMessage, CompactionExtension
from zett_agent.extensions.events import MessageTiming
from zett_agent.extensions.persistence import BaseSessionPersistenceExtension, ContextSnapshot, SessionView
from zett_agent.json_types import JsonValue
from zett_agent.messages import (
    AnyMessage,
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from zett_agent.model import ModelUsage
from zett_agent.tools.base import tool

from chatledger.zett import LedgerSessionExtension, LedgerSessionStorage

from .conftest import Database
from .support.scripted import ScriptedModel

SYSTEM_PROMPT = "You are a terse test assistant."


class AuditedStorage:
    """zett's ``SessionStorage`` that records each call, then delegates to chatledger."""

    def __init__(self, inner: LedgerSessionStorage) -> None:
        self.inner = inner
        self.calls: list[str] = []

    async def load(self, session_id: str) -> SessionView:
        self.calls.append("load")
        return await self.inner.load(session_id)

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
    ) -> int:
        self.calls.append(f"append:{message.role.value}")
        return await self.inner.append(
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
        )

    async def snapshot(
        self,
        session_id: str,
        compacted_message: CompactedMessage,
        compacted_through_sequence: int,
        expected_version: int,
    ) -> ContextSnapshot:
        self.calls.append("snapshot")
        return await self.inner.snapshot(
            session_id, compacted_message, compacted_through_sequence, expected_version
        )


class AuditedExtension(BaseSessionPersistenceExtension[AuditedStorage]):
    """zett's persistence lifecycle, unchanged, over the audited storage."""


@tool
async def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: First addend.
        b: Second addend.

    Guidelines:
        - Use it for arithmetic instead of guessing.
    """
    return a + b


def count_by_messages(messages: Sequence[AnyMessage]) -> int:
    """Offline token counter for CompactionExtension: 100 per message."""
    return 100 * len(messages)


async def test_agent_run_makes_exactly_the_expected_storage_calls(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    audited = AuditedStorage(storage)
    model = ScriptedModel(["Hello, Ada."])
    agent = await Agent.create(
        model,
        config=AgentRunConfig(session_id=session_id, request_id="req-1"),
        system_prompt=SYSTEM_PROMPT,
        extensions=[AuditedExtension(audited)],
    )

    answer = await agent.run("Hi, I am Ada.", metadata={"client": "test"}, tags={"suite": "conformance"})

    assert answer.content == "Hello, Ada."
    assert audited.calls == ["load", "append:system", "append:user", "append:assistant"]
    assert "snapshot" not in audited.calls

    records = await storage.list_raw_messages(session_id)
    assert [record.sequence for record in records] == [1, 2, 3]
    assert [type(record.message) for record in records] == [SystemMessage, UserMessage, AssistantMessage]
    assert records[0].message == SystemMessage(content=SYSTEM_PROMPT)
    assert records[1].message == UserMessage(content="Hi, I am Ada.")
    assert records[2].message == answer
    assert {record.request_id for record in records} == {"req-1"}
    assert all(record.metadata == {"client": "test"} for record in records)
    assert all(record.tags == {"suite": "conformance"} for record in records)
    # Usage is stored only on the model's response, as zett's runtime reports it.
    assert (records[2].input_tokens, records[2].output_tokens) == (11, 3)
    assert records[0].input_tokens is None and records[1].input_tokens is None
    assert (await storage.load(session_id)).snapshot is None


async def test_second_run_restores_history(database: Database, session_id: str) -> None:
    first_model = ScriptedModel(["Noted, Ada."])
    second_model = ScriptedModel(["Your name is Ada."])
    persistence = LedgerSessionExtension(dsn=database.url)
    restored = LedgerSessionExtension(dsn=database.url)
    try:
        first = await Agent.create(
            first_model,
            config=AgentRunConfig(session_id=session_id),
            system_prompt=SYSTEM_PROMPT,
            extensions=[persistence],
        )
        await first.run("My name is Ada.")

        # A new Agent with its own storage (as after a restart): only the database carries the history.
        second = await Agent.create(
            second_model,
            config=AgentRunConfig(session_id=session_id),
            system_prompt=SYSTEM_PROMPT,
            extensions=[restored],
        )
        answer = await second.run("What is my name?")

        assert answer.content == "Your name is Ada."
        # The model saw the current instructions once, then the restored dialogue, then the new input.
        assert second_model.contexts == [
            [
                SystemMessage(content=SYSTEM_PROMPT),
                UserMessage(content="My name is Ada."),
                AssistantMessage(content="Noted, Ada.", provider="scripted", model="scripted-1"),
                UserMessage(content="What is my name?"),
            ]
        ]
        records = await persistence.list_raw_messages(session_id)
        assert [type(record.message) for record in records] == [
            SystemMessage,
            UserMessage,
            AssistantMessage,
            SystemMessage,
            UserMessage,
            AssistantMessage,
        ]
        assert [record.sequence for record in records] == [1, 2, 3, 4, 5, 6]
        # One request id per run, shared by that run's messages.
        assert len({record.request_id for record in records[:3]}) == 1
        assert records[0].request_id != records[3].request_id
        assert len({record.request_id for record in records[3:]}) == 1
        assert await persistence.count_messages(session_id) == 6
        summary = await persistence.get_session(session_id)
        assert summary is not None and summary.message_count == 6
    finally:
        await persistence.close()
        await restored.close()


async def test_tool_round_trip_through_agent(storage: LedgerSessionStorage, session_id: str) -> None:
    call = AssistantMessage(
        tool_calls=(ToolCall("call-1", "add", {"a": 20, "b": 22}),), provider="scripted", model="scripted-1"
    )
    audited = AuditedStorage(storage)
    agent = await Agent.create(
        ScriptedModel([call, "42"]),
        config=AgentRunConfig(session_id=session_id),
        system_prompt=SYSTEM_PROMPT,
        tools=[add],
        extensions=[AuditedExtension(audited)],
    )

    answer = await agent.run("What is 20 + 22?")

    assert answer.content == "42"
    assert audited.calls == [
        "load",
        "append:system",
        "append:user",
        "append:assistant",
        "append:tool",
        "append:assistant",
    ]
    view = await storage.load(session_id)
    messages = [record.message for record in view.raw_tail]
    assert messages[2] == call
    result = messages[3]
    assert isinstance(result, ToolMessage)
    assert (result.tool_call_id, result.name, result.success) == ("call-1", "add", True)
    assert "42" in str(result.content)
    # The restored model context is provider-safe: the call and its result stay paired.
    assert view.messages[1:3] == [call, result]


async def test_compaction_through_agent_writes_one_snapshot(
    storage: LedgerSessionStorage, session_id: str
) -> None:
    def agent_for(model: ScriptedModel, audited: AuditedStorage) -> Agent:
        return Agent(
            model,
            system_prompt=SYSTEM_PROMPT,
            extensions=[
                AuditedExtension(audited),
                # 100 "tokens" per message: [system, u1, a1, u2] = 400 > 350 compacts [u1, a1].
                CompactionExtension(
                    ScriptedModel(["Ada introduced herself."]),
                    max_tokens=350,
                    keep_recent_tokens=100,
                    count_tokens=count_by_messages,
                ),
            ],
        )

    first_audit = AuditedStorage(storage)
    first = agent_for(ScriptedModel(["Noted."]), first_audit)
    await first.initialize(config=AgentRunConfig(session_id=session_id))
    await first.run("My name is Ada.")
    assert first_audit.calls == ["load", "append:system", "append:user", "append:assistant"]

    second_audit = AuditedStorage(storage)
    second_model = ScriptedModel(["Your name is Ada."])
    second = agent_for(second_model, second_audit)
    await second.initialize(config=AgentRunConfig(session_id=session_id))
    await second.run("What is my name?")
    assert second_audit.calls == ["load", "append:system", "append:user", "snapshot", "append:assistant"]

    view = await storage.load(session_id)
    assert view.snapshot is not None
    # u1 (2) and a1 (3) were compacted; the system message of run 2 (4) is raw-log only.
    assert (view.snapshot.version, view.snapshot.compacted_through_sequence) == (1, 3)
    assert "Ada introduced herself." in view.snapshot.compacted_message.text
    assert [record.sequence for record in view.raw_tail] == [4, 5, 6]
    assert view.messages == [
        view.snapshot.compacted_message,
        UserMessage(content="What is my name?"),
        AssistantMessage(content="Your name is Ada.", provider="scripted", model="scripted-1"),
    ]
    # The raw log keeps every original message.
    assert [record.sequence for record in await storage.list_raw_messages(session_id)] == [1, 2, 3, 4, 5, 6]
