"""The plain in-memory model the history checker (``tests/test_history.py``) holds the
database to: what every acknowledged call says is stored, and nothing else.

One :class:`ZettModel` per zett session id and one :class:`ReinModel` per rein id:

- a zett id's raw log is numbered gap-free from its generation's ``base`` (the
  deleted generation's last sequence; 0 for the first), each sequence holding the
  one message acknowledged at it; a checkpoint version is used once per generation,
  and a checkpoint id once ever;
- a rein id's version counts every save and delete of the id, never reset;
- a purged tombstone (``marked``) leaves no row, only its high-water mark: the id
  stays deleted for an append, and a create or rein save numbers on from the mark;
- ``revision`` counts the changes the database made to the session (what an import
  compares: an export taken at revision r is identical to the database while the
  session is still at r).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Message:
    message_id: str
    content: str


@dataclass(frozen=True)
class Checkpoint:
    id: str
    version: int
    boundary: int
    content: str


@dataclass
class ZettModel:
    """One zett session id."""

    #: A counter row exists (a live session or a tombstone).
    row: bool = False
    live: bool = False
    #: The tombstone was purged: no row, its high-water mark (``base``) instead.
    marked: bool = False
    #: The last sequence of the deleted generations (the current one numbers after it).
    base: int = 0
    #: The current generation's messages, at sequences base+1, base+2, ...
    messages: list[Message] = field(default_factory=list)
    checkpoint: Checkpoint | None = None
    session_type: int = 0
    revision: int = 0

    @property
    def last(self) -> int:
        return self.base + len(self.messages)

    @property
    def version(self) -> int:
        return self.checkpoint.version if self.checkpoint is not None else 0

    @property
    def boundary(self) -> int:
        return self.checkpoint.boundary if self.checkpoint is not None else self.base

    def records(self) -> list[tuple[int, str, str]]:
        """``(sequence, message id, content)`` of the current generation's raw log."""
        return [
            (self.base + index, message.message_id, message.content)
            for index, message in enumerate(self.messages, start=1)
        ]

    def append(self, message: Message) -> int:
        """An append applied: the session exists from now on."""
        assert (self.live or not self.row) and not self.marked, "an append to a tombstone must be refused"
        self.row = self.live = True
        self.messages.append(message)
        self.revision += 1
        return self.last

    def delete(self) -> None:
        assert self.live
        self.live = False
        self.base = self.last
        self.messages = []
        self.checkpoint = None
        self.revision += 1

    def purge(self) -> None:
        """Its tombstone purged: the mark keeps ``base`` (the last sequence)."""
        assert self.row and not self.live
        self.row, self.marked = False, True
        self.revision += 1

    def create(self, session_type: int) -> None:
        assert not self.live
        self.row = self.live = True
        self.marked = False
        self.messages = []
        self.checkpoint = None
        self.session_type = session_type
        self.revision += 1

    def frozen(self) -> ZettModel:
        return copy.deepcopy(self)


@dataclass
class ReinModel:
    """One rein session id."""

    #: Every save and delete bumps it; 0: never saved.
    version: int = 0
    live: bool = False
    #: The saved ``Session``'s ``iteration``: each save in a history saves its own.
    iteration: int = 0
    revision: int = 0
    #: The tombstone was purged: no row, its mark keeps ``version``.
    marked: bool = False

    @property
    def row(self) -> bool:
        return self.version > 0 and not self.marked

    def save(self, iteration: int) -> None:
        self.version += 1
        self.live = True
        self.marked = False
        self.iteration = iteration
        self.revision += 1

    def delete(self) -> None:
        assert self.live
        self.version += 1
        self.live = False
        self.revision += 1

    def purge(self) -> None:
        assert self.row and not self.live
        self.marked = True
        self.revision += 1

    def frozen(self) -> ReinModel:
        return copy.deepcopy(self)


@dataclass
class LogModel:
    """One OpenAI Agents or ADK session id: the texts of its live entries (items,
    events), in order. A clear or delete leaves a tombstone (``row``, not ``live``);
    an OpenAI add, or an ADK create, after it starts the id again."""

    row: bool = False
    live: bool = False
    entries: list[str] = field(default_factory=list)
    revision: int = 0
    #: Never set: the histories purge no tombstone of these kinds.
    marked: bool = False

    def add(self, texts: list[str]) -> None:
        """Entries appended (an OpenAI add starts a cleared or new id)."""
        if not self.live:
            self.entries = []
        self.row = self.live = True
        self.entries.extend(texts)
        self.revision += 1

    def create(self) -> None:
        """An ADK session created (again)."""
        assert not self.live
        self.row = self.live = True
        self.entries = []
        self.revision += 1

    def delete(self) -> None:
        assert self.live
        self.live = False
        self.entries = []
        self.revision += 1

    def frozen(self) -> LogModel:
        return copy.deepcopy(self)
