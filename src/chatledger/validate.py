"""Input checks that run before any statement: each raises with the field's name.

Rules come from zett-agent's storage contract and its ``SQLSessionStorage``
(title 1-200 characters, agent name 1-64, session type a non-negative integer,
limit positive, offset non-negative), widened where chatledger's schema is wider
(ids up to 255 characters).

A value of the wrong type raises :class:`chatledger.WrongType`, both a ``TypeError``
and a ``ValueError`` (zett's store raises ``ValueError`` for some wrong types, such
as a ``session_type`` of 1.5, so its callers catch that).

Naive datetimes are refused (``ValueError``) on every backend rather than taken
as UTC or local time: a stored instant must not depend on the machine's zone.
Aware datetimes in any zone are stored, and read back, as the same instant in UTC.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from .errors import WrongType
from .types import MAX_ID_LENGTH, MAX_ROW_ID_LENGTH

#: Largest value of a 64-bit signed integer column.
MAX_BIGINT = 2**63 - 1

#: The instants every backend stores: MySQL's documented ``DATETIME`` range
#: (1000-01-01 to 9999-12-31), applied everywhere so that all backends agree.
MIN_INSTANT = datetime(1000, 1, 1, tzinfo=UTC)
MAX_INSTANT = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)

#: Bytes a row's statement needs beyond its long text values: the SQL itself, ids,
#: numbers and timestamps (well under 8 KiB even with 255-character ids).
STATEMENT_OVERHEAD = 16 * 1024

#: Characters a client escapes with a backslash inside a string literal (PyMySQL's
#: ``escape_string``: NUL, newline, carriage return, Ctrl-Z, both quotes, backslash).
_ESCAPED = ("\x00", "\n", "\r", "\x1a", "'", '"', "\\")


def utf8(value: object, field: str) -> str:
    """A string encodable as UTF-8 (no lone surrogate); NUL allowed, for values
    stored inside JSON, where it is escaped."""
    if not isinstance(value, str):
        raise WrongType(f"{field} must be a str, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"{field} cannot be encoded as UTF-8 (lone surrogate at {error.start})") from None
    return value


def text(value: object, field: str) -> str:
    """A string that every database can store in a text column: UTF-8 encodable and
    free of NUL (PostgreSQL text cannot hold U+0000).

    Raises:
        WrongType: not a ``str`` (a ``TypeError`` and a ``ValueError``).
        ValueError: a lone surrogate or a NUL character; names ``field``.
    """
    value = utf8(value, field)
    if "\x00" in value:
        raise ValueError(f"{field} cannot contain NUL characters")
    return value


def identifier(value: object, field: str, *, limit: int = MAX_ID_LENGTH) -> str:
    """A session, parent or request id: 1-``limit`` (255) characters, not blank, no NUL."""
    value = text(value, field)
    if not value.strip():
        raise ValueError(f"{field} cannot be empty or blank")
    if len(value) > limit:
        raise ValueError(f"{field} is {len(value)} characters long; the limit is {limit}")
    return value


#: Longest raw-message id (the ``raw_messages.id`` column; a UUID's 36 characters).
MAX_MESSAGE_ID_LENGTH = MAX_ROW_ID_LENGTH


def message_id(value: object) -> str:
    """A caller-given raw-message id: 1-36 characters, not blank, no NUL."""
    return identifier(value, "message_id", limit=MAX_MESSAGE_ID_LENGTH)


def optional_identifier(value: object, field: str) -> str | None:
    return None if value is None else identifier(value, field)


def display_field(value: object, field: str, limit: int, label: str) -> str | None:
    """A title or agent name: ``None``, or 1-``limit`` characters after stripping. The
    refusal begins as zett-agent's store words it (``label``), then names the field."""
    if value is None:
        return None
    stripped = text(value, field).strip()
    if not stripped or len(stripped) > limit:
        raise ValueError(f"{label} must contain between 1 and {limit} characters ({field}, stripped)")
    return stripped


def title(value: object) -> str | None:
    return display_field(value, "title", 200, "Session title")


def agent_name(value: object) -> str | None:
    return display_field(value, "agent_name", 64, "Agent name")


def integer(value: object, field: str, *, minimum: int = 0, maximum: int = MAX_BIGINT) -> int:
    """An ``int`` (not ``bool``) from ``minimum`` up to ``maximum`` (the 64-bit limit)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise WrongType(f"{field} must be an int, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{field} must be at least {minimum}, not {value}")
    if value > maximum:
        raise ValueError(f"{field} exceeds its limit {maximum}")
    return value


def optional_integer(value: object, field: str, *, minimum: int = 0, maximum: int = MAX_BIGINT) -> int | None:
    return None if value is None else integer(value, field, minimum=minimum, maximum=maximum)


def version(value: object, field: str = "expected_version", *, minimum: int = 0) -> int:
    """A version to compare-and-set against; the next one (+1) must still fit 64 bits."""
    return integer(value, field, minimum=minimum, maximum=MAX_BIGINT - 1)


def session_type(value: object) -> int:
    """An application-defined session type code (32-bit, non-negative), refused in
    zett-agent's store's words."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise WrongType(f"session_type must be an integer code, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"session_type cannot be negative, not {value}")
    code = integer(value, "session_type")
    if code > 2**31 - 1:
        raise ValueError("session_type exceeds the 32-bit limit")
    return code


def aware(value: object, field: str) -> datetime:
    """A timezone-aware datetime, returned in UTC.

    Raises:
        WrongType: not a ``datetime`` (a ``TypeError`` and a ``ValueError``).
        ValueError: a naive datetime (refused on every backend, never taken as
            UTC), or an instant outside :data:`MIN_INSTANT`..:data:`MAX_INSTANT`.
    """
    if not isinstance(value, datetime):
        raise WrongType(f"{field} must be a datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{field} is a naive datetime; pass a timezone-aware one (UTC)")
    try:
        value = value.astimezone(UTC)
        within = MIN_INSTANT <= value <= MAX_INSTANT
    except OverflowError:  # the UTC instant lies before year 1 or after 9999
        within = False
    if not within:
        raise ValueError(
            f"{field} must lie between {MIN_INSTANT.isoformat()} and {MAX_INSTANT.isoformat()} (UTC)"
        )
    return value


def optional_aware(value: object, field: str) -> datetime | None:
    return None if value is None else aware(value, field)


#: Deepest nesting of lists and objects accepted in metadata and tags. Python's JSON
#: decoder recurses once per level, so a much deeper value would store but not load.
MAX_JSON_DEPTH = 256


def json_depth(value: object, field: str, limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse JSON nested deeper than ``limit`` levels (checked without recursion)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            raise ValueError(f"{field} is nested deeper than {limit} levels")
        stack.extend((child, depth + 1) for child in children)


def json_text(value: Any, field: str) -> str:
    """Compact JSON text for a validated JSON value (keys sorted, no NaN)."""
    try:
        encoded = json.dumps(
            value, ensure_ascii=False, sort_keys=True, allow_nan=False, separators=(",", ":")
        )
    except (TypeError, ValueError) as error:
        raise ValueError(f"{field} must be JSON serializable: {error}") from None
    return text(encoded, field)


def statement_size(*values: str) -> int:
    """Upper bound of the bytes a row with these long text values takes as one statement.

    UTF-8 bytes, plus one byte per character that a string literal escapes (how
    aiomysql sends values inside the statement text), plus
    :data:`STATEMENT_OVERHEAD`. Drivers that bind values apart from the statement
    (asyncpg, sqlite3) need fewer bytes, so the bound holds everywhere.
    """
    size = STATEMENT_OVERHEAD
    for value in values:
        size += len(value.encode("utf-8")) + sum(value.count(char) for char in _ESCAPED)
    return size


#: Most bytes one character adds to :func:`statement_size`: 4 in UTF-8; an escaped
#: character is ASCII, 1 byte and its backslash.
MAX_CHARACTER_BYTES = 4


def check_statement_size(texts: tuple[str, ...], limit: int, field: str) -> None:
    """:func:`within_statement_limit` of a row with these long text values; their exact
    size (:func:`statement_size`, which encodes them) is counted only when the bound
    of :data:`MAX_CHARACTER_BYTES` per character does not fit ``limit`` already."""
    if STATEMENT_OVERHEAD + MAX_CHARACTER_BYTES * sum(map(len, texts)) > limit:
        within_statement_limit(statement_size(*texts), limit, field)


def within_statement_limit(size: int, limit: int, field: str) -> None:
    """Refuse a row larger than the server accepts, before anything is sent.

    ``limit`` is :attr:`chatledger.engine.Ledger.statement_limit`: MySQL's
    ``max_allowed_packet`` as the server reports it, else 1 GB (PostgreSQL's
    largest field, SQLite's default ``SQLITE_MAX_LENGTH``).

    Raises:
        ValueError: ``size`` exceeds ``limit``; names the field, both sizes and the limit.
    """
    if size > limit:
        raise ValueError(
            f"{field} is too large to store: its row needs up to {size} bytes in one statement, "
            f"and the database's statement limit (statement_limit; MySQL's max_allowed_packet) "
            f"is {limit} bytes. Nothing was written; store large payloads elsewhere and keep a "
            "reference in the message."
        )


def page(limit: object, offset: object) -> tuple[int, int]:
    """A listing's page: ``limit`` (a positive int) and ``offset`` (an int >= 0).

    Raises:
        WrongType / ValueError: naming ``limit`` or ``offset``.
    """
    # Worded as zett-agent's store words them, naming the field.
    if isinstance(limit, int) and not isinstance(limit, bool) and limit < 1:
        raise ValueError(f"limit must be positive, not {limit}")
    if isinstance(offset, int) and not isinstance(offset, bool) and offset < 0:
        raise ValueError(f"offset cannot be negative, not {offset}")
    return integer(limit, "limit", minimum=1), integer(offset, "offset")
