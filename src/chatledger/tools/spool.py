"""A session's rows as an import read them, kept for a retry of its transaction."""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Iterator
from typing import IO

from .rows import Record


class Spool:
    """A session's rows as read, so that its transaction can run again after a transient
    failure: in memory up to ``memory`` bytes (as the caller counts a row's size), then
    in a temporary file, so that memory stays bounded however large the session.
    Iterating gives them in the order added; rows may be added after an iteration."""

    def __init__(self, memory: int) -> None:
        self._memory = memory
        self._items: list[tuple[str, Record]] = []
        self._bytes = 0
        self._file: IO[bytes] | None = None

    def add(self, kind: str, row: Record, size: int) -> None:
        if self._file is None:
            self._items.append((kind, row))
            self._bytes += size
            if self._bytes <= self._memory:
                return
            self._file = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
            items, self._items = self._items, []
            for item in items:
                pickle.dump(item, self._file, pickle.HIGHEST_PROTOCOL)
            return
        pickle.dump((kind, row), self._file, pickle.HIGHEST_PROTOCOL)

    def __iter__(self) -> Iterator[tuple[str, Record]]:
        yield from list(self._items)
        if self._file is not None:
            self._file.seek(0)
            while True:
                try:
                    item: tuple[str, Record] = pickle.load(self._file)  # our own rows, written above
                except EOFError:
                    return  # at the end again: rows read later are added after these
                yield item

    def close(self) -> None:
        self._items = []
        if self._file is not None:
            self._file.close()
            self._file = None
