"""The time the stores write: one clock, so that tests can set a writer's clock back."""

from __future__ import annotations

from datetime import UTC, datetime


def utc_now() -> datetime:
    """Now, as a timezone-aware UTC instant with microseconds."""
    return datetime.now(UTC)
