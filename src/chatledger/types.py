"""Column types that hide the dialect differences of the one schema.

Every difference between SQLite, PostgreSQL and MySQL/MariaDB that concerns a
single column is a type here, a ``TypeDecorator`` or a ``with_variant``; what each
backend's form of it is, its backend says (:attr:`chatledger.dialects.Backend.id_type`,
``instant_type``, ``binds_time_zone``):

* :class:`Id` -- every identifier column (session, parent, request, raw message,
  checkpoint, rein session and write ids): up to ``length`` characters (default
  255), compared byte for byte on every backend. MySQL and MariaDB collations fold
  case, and all of them, ``utf8mb4_bin`` included, are ``PAD SPACE`` (``'m1' =
  'm1 '``), so there the id is stored as UTF-8 in ``VARBINARY(4 * length)``, where
  every byte counts (portable to MySQL 8, which has no ``utf8mb4_nopad_bin``). It is
  bound as a string (the connection's utf8mb4 turns it into those bytes; aiomysql
  cannot bind ``bytes`` with PyMySQL >= 1.1.1). PostgreSQL ``varchar`` under a
  deterministic collation (the only kind a database default can be) and SQLite's
  ``BINARY`` comparison are byte-exact already: ``VARCHAR(length)`` there.
* :class:`UTCDateTime` -- UTC with microseconds everywhere: ``timestamptz`` on
  PostgreSQL, ``DATETIME(6)`` on MySQL (plain ``DATETIME`` drops the fraction),
  ISO text on SQLite. Values read back are always timezone-aware UTC.
* :data:`LongText` -- ``LONGTEXT`` on MySQL, where ``TEXT`` stops at 64 KiB.
* :class:`LongBlob` -- bytes of any length the server's statement limit lets through:
  ``BYTEA`` on PostgreSQL, ``BLOB`` on SQLite, ``LONGBLOB`` on MySQL, where ``BLOB``
  stops at 64 KiB (bound there as its backend says: :attr:`chatledger.dialects.Backend.blob_type`).
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import BigInteger, DateTime, Dialect, LargeBinary, String, Text
from sqlalchemy.dialects import mysql
from sqlalchemy.types import TypeDecorator, TypeEngine

if TYPE_CHECKING:
    from .dialects import Backend

#: Longest id accepted for sessions, requests and parents, in characters.
MAX_ID_LENGTH = 255

#: Longest raw-message, checkpoint and rein write id, in characters: a UUID's 36 (the
#: ids chatledger makes are UUIDv7s; a caller-given ``message_id`` is held to it too).
MAX_ROW_ID_LENGTH = 36

#: Longest ADK ``app_name`` and ``user_id``, in characters (ADK's own limit): three ids
#: of a key stay within MySQL's 3,072-byte index limit.
MAX_ADK_SCOPE_LENGTH = 128

#: Longest LangGraph ``checkpoint_ns`` and channel name, in characters: a blob's key
#: (thread, namespace, channel, version) stays within MySQL's 3,072-byte index limit.
MAX_LANGGRAPH_NAME_LENGTH = 200

#: Longest LangGraph checkpoint id, task id and channel version, in characters (LangGraph
#: makes 36-character UUIDs and 49-character versions).
MAX_LANGGRAPH_KEY_LENGTH = 64

#: Long text that holds a whole message; MySQL ``TEXT`` stops at 64 KiB.
LongText = Text().with_variant(mysql.LONGTEXT(charset="utf8mb4", collation="utf8mb4_bin"), "mysql")


#: 64-bit integers for sequences, versions, durations and token counts.
BigInt = BigInteger()


def _backend(dialect: Dialect) -> Backend | None:
    """The backend of ``dialect`` (its default driver: the types are the same for every
    driver), or ``None`` for a dialect chatledger does not serve (generic types)."""
    from . import dialects  # imported here: the backends' modules import the schema's types

    try:
        return dialects.backend(dialect.name)
    except ValueError:
        return None


@functools.cache
def _binds_time_zone(dialect_name: str) -> bool:
    """Whether the backend of the dialect named so binds an instant with its zone
    (:attr:`chatledger.dialects.Backend.binds_time_zone`; ``False`` for a dialect
    chatledger does not serve)."""
    from . import dialects

    try:
        return dialects.backend(dialect_name).binds_time_zone
    except ValueError:
        return False


class Id(TypeDecorator[str]):
    """A text id of at most ``length`` characters, compared byte for byte on every
    backend: ``VARCHAR(length)``, ``VARBINARY(4 * length)`` on MySQL/MariaDB.

    Every id column of :mod:`chatledger.schema` has this type (``tests/test_id_columns.py``
    checks it from the metadata); the length is the column's limit in characters, which
    :mod:`chatledger.validate` enforces before any statement.
    """

    impl = String
    cache_ok = True

    def __init__(self, length: int = MAX_ID_LENGTH) -> None:
        super().__init__(length)
        self.length = length

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        backend = _backend(dialect)
        return dialect.type_descriptor(
            String(self.length) if backend is None else backend.id_type(self.length)
        )

    def process_result_value(self, value: Any, dialect: Dialect) -> str | None:
        if isinstance(value, bytes | bytearray):
            return bytes(value).decode("utf-8")
        return value  # type: ignore[no-any-return]


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC instant with microseconds on every backend.

    Naive datetimes are refused (``ValueError``) rather than guessed at; the
    storage validates them with the field name before any statement runs.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        backend = _backend(dialect)
        return dialect.type_descriptor(DateTime() if backend is None else backend.instant_type())

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        # Run for every instant of every statement (six per append): the common case, a
        # UTC instant, costs no conversion, and the backend's rule is looked up once.
        if value is None:
            return None
        if value.tzinfo is not UTC:
            if value.tzinfo is None or value.utcoffset() is None:
                raise ValueError("naive datetime given; chatledger stores timezone-aware UTC instants")
            value = value.astimezone(UTC)
        # PostgreSQL keeps the zone; MySQL DATETIME and SQLite text store the UTC wall time.
        return value if _binds_time_zone(dialect.name) else value.replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class LongBlob(TypeDecorator[bytes]):
    """Bytes of any length (a serialized value): ``LargeBinary``, or the backend's own
    form of it (:attr:`chatledger.dialects.Backend.blob_type`)."""

    impl = LargeBinary
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        backend = _backend(dialect)
        return dialect.type_descriptor(LargeBinary() if backend is None else backend.blob_type())

    def process_result_value(self, value: Any, dialect: Dialect) -> bytes | None:
        return None if value is None else bytes(value)
