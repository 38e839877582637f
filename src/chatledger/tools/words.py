"""Counts in the commands' sentences: ``1 checkpoint``, ``2 checkpoints``."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` (thousands separated) and ``noun`` in its number: the singular for
    exactly 1, else ``plural`` (default: ``noun`` + "s")."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"
