"""LangGraph's threads as the tools handle them: :class:`Operations` of the ``langgraph``
kind (:data:`chatledger.kinds.LANGGRAPH`), over the thread functions of
:mod:`.threads`, which read rows alone: no value is decoded, so neither LangGraph nor
the key of an encrypting serializer is needed to list, show, delete or purge.

``sessions list`` shows each live thread with its checkpoints, its latest checkpoint
of the root namespace (its id, step and source) and the pending writes to it;
``sessions show`` adds the newest checkpoints of every namespace with their metadata
and their pending writes' channels.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any

from sqlalchemy.engine import URL

from ..engine import Ledger
from ..kinds import Field, Found, Listing, Scope
from ..kinds.showing import compact, cut, heading, when
from ..selection import Progress, Selection
from . import threads


def _latest(summary: threads.ThreadSummary) -> str:
    if summary.latest_checkpoint_id is None:
        return "-"
    parts = [summary.latest_checkpoint_id]
    if summary.latest_step is not None:
        parts.append(f"step {summary.latest_step}")
    if summary.latest_source is not None:
        parts.append(summary.latest_source)
    return ", ".join(parts)


class Operations:
    """LangGraph's threads of one database (:class:`chatledger.kinds.Operations`)."""

    def __init__(self, url: URL, options: Mapping[str, Any]) -> None:
        self.ledger = Ledger(url, **options)

    async def __aenter__(self) -> Operations:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.ledger.close()

    async def listing(self, limit: int) -> Listing:
        """The ``limit`` live threads written to last, newest first."""
        found = [
            {
                "id": summary.thread_id,
                "checkpoints": summary.checkpoints,
                "latest_checkpoint_id": summary.latest_checkpoint_id,
                "latest": _latest(summary),
                "pending_writes": summary.pending_writes,
                "created_at": summary.created_at.isoformat(),
                "updated_at": summary.updated_at.isoformat(),
            }
            for summary in await threads.list_threads(self.ledger, limit=limit)
        ]
        fields = (
            Field("id", "thread"),
            Field("checkpoints", "checkpoints", right=True),
            Field("latest", "latest checkpoint"),
            Field("pending_writes", "pending writes", right=True),
            Field("updated_at", "last active (UTC)", when=True),
        )
        return Listing("langgraph sessions (threads), most recently written first", fields, found)

    async def show(self, session_id: str, *, messages: int, scope: Scope) -> list[list[str]]:
        """The thread, then its newest ``messages`` checkpoints of every namespace."""
        summary = await threads.find_thread(self.ledger, session_id)
        if summary is None:
            return []
        shown = await threads.show_thread(self.ledger, session_id, limit=messages)
        lines = [
            f"langgraph thread {summary.thread_id}",
            f"  {'checkpoints':<16}{summary.checkpoints} in {summary.namespaces} namespace(s)",
            f"  {'latest':<16}{_latest(summary)}",
            f"  {'pending writes':<16}{summary.pending_writes}",
            f"  {'generation':<16}{summary.generation}",
            f"  {'created':<16}{when(summary.created_at)} UTC",
            f"  {'last active':<16}{when(summary.updated_at)} UTC",
            heading("checkpoints", summary.checkpoints, len(shown)),
        ]
        for checkpoint in shown:
            namespace = checkpoint.checkpoint_ns or "(root)"
            step = checkpoint.metadata.get("step")
            source = checkpoint.metadata.get("source")
            lines.append(
                f"  {checkpoint.checkpoint_id}  {namespace}  step {compact(step)}  {compact(source)}"
                f"  {when(checkpoint.created_at)} UTC"
            )
            if checkpoint.parent_checkpoint_id is not None:
                lines.append(f"    parent {checkpoint.parent_checkpoint_id}")
            if checkpoint.writes:
                lines.append(f"    pending writes: {cut(', '.join(checkpoint.writes))}")
        return [lines]

    async def find(self, session_id: str, scope: Scope) -> list[Found]:
        summary = await threads.find_thread(self.ledger, session_id)
        return [] if summary is None else [Found((summary.thread_id,), summary.checkpoints)]

    async def delete(self, found: Found) -> bool:
        return await threads.delete_thread(self.ledger, found.id)

    async def purge(self, selection: Selection, scope: Scope, *, size: int, progress: Progress | None) -> int:
        return await threads.purge_threads(self.ledger, selection, size=size, progress=progress)
