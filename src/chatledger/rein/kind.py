"""rein's sessions as the tools handle them: :class:`Operations` of the ``rein`` kind
(:data:`chatledger.kinds.REIN`), over :class:`~chatledger.rein.LedgerSessionStore`'s
own public methods (on the store's loop thread)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from sqlalchemy.engine import URL

from ..kinds import Field, Found, Listing, Scope
from ..kinds.showing import cut
from ..selection import Progress, Selection
from .store import LedgerSessionStore, VersionedSession


def _shown(session_id: str, versioned: VersionedSession, limit: int) -> list[str]:
    session = versioned.session
    usage = session.usage
    lines = [
        f"rein session {session_id} (version {versioned.version})",
        f"  {'stage':<12}{getattr(session.stage, 'value', session.stage)}",
        f"  {'done':<12}{session.done}" + (f" ({session.stop_reason})" if session.stop_reason else ""),
        f"  {'iterations':<12}{session.iteration}",
        f"  {'tokens':<12}in {usage.input_tokens}, out {usage.output_tokens}",
    ]
    shown = session.messages[-limit:] if limit else []
    heading = f"messages ({len(session.messages)})"
    if len(shown) < len(session.messages):
        heading += f", the last {len(shown)} (--messages N shows more)"
    lines.append(heading + ":")
    first = len(session.messages) - len(shown) + 1
    for number, message in enumerate(shown, start=first):
        text = [cut(message.content)] if message.content else []
        text += [
            f"-> {call.name}({json.dumps(call.arguments, ensure_ascii=False)})"
            for call in message.tool_calls or ()
        ]
        text = text or ["(empty)"]
        lines.append(f"  {number:<6} {message.role:<10} {text[0]}")
        lines += [f"  {'':<6} {'':<10} {line}" for line in text[1:]]
    return lines


class Operations:
    """rein's sessions of one database (:class:`chatledger.kinds.Operations`)."""

    def __init__(self, url: URL, options: Mapping[str, Any]) -> None:
        self.store = LedgerSessionStore(url, **options)

    async def __aenter__(self) -> Operations:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.store.aclose()

    async def listing(self, limit: int) -> Listing:
        rows = [
            {
                "id": info.id,
                "version": info.version,
                "created_at": info.created_at.isoformat(),
                "updated_at": info.updated_at.isoformat(),
            }
            for info in await self.store.alist_sessions(limit=limit)
        ]
        fields = (
            Field("id", "id"),
            Field("version", "version", right=True),
            Field("updated_at", "last saved (UTC)", when=True),
        )
        return Listing("rein sessions, newest save first", fields, rows)

    async def show(self, session_id: str, *, messages: int, scope: Scope) -> list[list[str]]:
        versioned = await self.store.aload_versioned(session_id)
        return [] if versioned is None else [_shown(session_id, versioned, messages)]

    async def find(self, session_id: str, scope: Scope) -> list[Found]:
        return [Found((session_id,))] if await self.store.acontains(session_id) else []

    async def delete(self, found: Found) -> bool:
        return await self.store.adelete(found.id)

    async def purge(self, selection: Selection, scope: Scope, *, size: int, progress: Progress | None) -> int:
        return await self.store.apurge(
            idle_before=selection.idle_before, prefix=selection.prefix, batch_size=size, progress=progress
        )
