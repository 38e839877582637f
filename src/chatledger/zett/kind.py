"""zett's sessions as the tools handle them: :class:`Operations` of the ``zett`` kind
(:data:`chatledger.kinds.ZETT`), over :class:`~chatledger.zett.LedgerSessionStorage`'s
own public methods."""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from sqlalchemy.engine import URL
from zett_agent.extensions.persistence import SessionSummary
from zett_agent.messages import AssistantMessage, ToolMessage

from ..kinds import Field, Found, Listing, Scope
from ..kinds.showing import cut, when
from ..selection import Progress, Selection
from .storage import LedgerSessionStorage


def describe(message: Any) -> str:
    """One zett message in a line or a few: its text, tool calls, a tool's name."""
    if isinstance(message, AssistantMessage):
        parts = [cut(message.content)] if message.content else []
        parts += [
            f"-> {call.name}({json.dumps(call.arguments, ensure_ascii=False)})" for call in message.tool_calls
        ]
        return "\n".join(parts) or "(empty)"
    if isinstance(message, ToolMessage):
        status = "" if message.success else " (failed)"
        return f"{message.name}{status}: {cut(message.text)}"
    text = getattr(message, "text", None)
    return cut(text if isinstance(text, str) else str(getattr(message, "content", "")))


class Operations:
    """zett's sessions of one database (:class:`chatledger.kinds.Operations`)."""

    def __init__(self, url: URL, options: Mapping[str, Any]) -> None:
        self.storage = LedgerSessionStorage(url, **options)

    async def __aenter__(self) -> Operations:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.storage.close()

    async def listing(self, limit: int) -> Listing:
        rows = [
            {
                "id": summary.session_id,
                "parent_session_id": summary.parent_session_id,
                "session_type": summary.session_type,
                "title": summary.title,
                "agent_name": summary.agent_name,
                "message_count": summary.message_count,
                "created_at": summary.created_at.isoformat(),
                "updated_at": summary.updated_at.isoformat(),
            }
            for summary in await self.storage.list_sessions(limit=limit)
        ]
        fields = (
            Field("id", "id"),
            Field("session_type", "type", right=True),
            Field("title", "title"),
            Field("agent_name", "agent"),
            Field("message_count", "messages", right=True),
            Field("updated_at", "last active (UTC)", when=True),
        )
        return Listing("zett sessions, newest activity first", fields, rows)

    async def show(self, session_id: str, *, messages: int, scope: Scope) -> list[list[str]]:
        summary = await self.storage.get_session(session_id)
        if summary is None:
            return []
        return [await self._shown(summary, messages)]

    async def _shown(self, summary: SessionSummary, limit: int) -> list[str]:
        view = await self.storage.load(summary.session_id)
        lines = [f"zett session {summary.session_id}"]
        fields = (
            ("parent", summary.parent_session_id or "-"),
            ("type", summary.session_type),
            ("title", summary.title or "-"),
            ("agent", summary.agent_name or "-"),
            ("messages", summary.message_count),
            ("created", f"{when(summary.created_at)} UTC"),
            ("last active", f"{when(summary.updated_at)} UTC"),
        )
        lines += [f"  {name:<12}{value}" for name, value in fields]
        boundary = 0
        if view.snapshot is not None:
            snapshot = view.snapshot
            boundary = snapshot.compacted_through_sequence
            lines.append(
                f"checkpoint version {snapshot.version}, summarizing messages 1-{boundary} "
                f"(made {when(snapshot.created_at)} UTC):"
            )
            lines += [f"  {line}" for line in describe(snapshot.compacted_message).splitlines() or [""]]
        else:
            lines.append("no checkpoint")
        tail = view.raw_tail
        shown = tail[-limit:] if limit else []
        heading = (
            f"raw messages after the checkpoint ({len(tail)})" if boundary else f"raw messages ({len(tail)})"
        )
        if len(shown) < len(tail):
            heading += f", the last {len(shown)} (--messages N shows more)"
        lines.append(heading + ":")
        for record in shown:
            role = str(record.message.role)
            usage = ""
            if record.input_tokens is not None:
                usage = f"  [tokens in {record.input_tokens}, out {record.output_tokens}]"
            text = describe(record.message).splitlines() or [""]
            lines.append(f"  #{record.sequence:<5} {role:<10} {text[0]}{usage}")
            lines += [f"  {'':<6} {'':<10} {line}" for line in text[1:]]
        return lines

    async def find(self, session_id: str, scope: Scope) -> list[Found]:
        summary = await self.storage.get_session(session_id)
        return [] if summary is None else [Found((session_id,), summary.message_count)]

    async def delete(self, found: Found) -> bool:
        return await self.storage.delete_session(found.id)

    async def purge(self, selection: Selection, scope: Scope, *, size: int, progress: Progress | None) -> int:
        return await self.storage.purge_sessions(
            idle_before=selection.idle_before, prefix=selection.prefix, batch_size=size, progress=progress
        )
