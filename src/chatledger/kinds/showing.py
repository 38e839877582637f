"""The text the kinds' ``show`` operations share (``chatledger sessions show``): long
texts cut, instants in UTC, numbered entries, a heading that says how many are shown."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

#: Longest text ``show`` prints of one message before cutting it.
SHOWN_CHARACTERS = 500


def cut(text: str) -> str:
    """``text`` without carriage returns, cut after :data:`SHOWN_CHARACTERS` (saying how long it was)."""
    text = text.replace("\r", "")
    return (
        text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS] + f"... ({len(text)} characters)"
    )


def when(value: datetime) -> str:
    """An instant as ``YYYY-mm-dd HH:MM:SS``, in UTC."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def compact(value: Any) -> str:
    """A string as it is, anything else as compact JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def numbered(number: int, who: str, lines: list[str]) -> list[str]:
    """One entry: its number and author on the first line, the rest indented under it."""
    return [f"  {number:<6} {who:<10} {lines[0]}", *(f"  {'':<6} {'':<10} {line}" for line in lines[1:])]


def heading(what: str, total: int, shown: int) -> str:
    """``items (12), the last 3 (--messages N shows more):``."""
    text = f"{what} ({total})"
    if shown < total:
        text += f", the last {shown} (--messages N shows more)"
    return text + ":"
