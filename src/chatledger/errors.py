"""Errors raised by chatledger.

All of them are ``ValueError``, ``TypeError`` or ``RuntimeError`` subclasses, so
code written against zett-agent's storage contract (which raises ``ValueError`` for a
stale snapshot version or a bad session type) keeps working unchanged.

Every error a database or its driver raises becomes one of these: the ones a retry
cures are retried first (:class:`StorageUnavailable` when the budget runs out), and
the rest are mapped by :func:`chatledger.dialects.database_error`, whose last resort
is :class:`DatabaseError`, carrying the code. No ``sqlalchemy.exc`` error leaves a
public call (``tests/test_no_raw_errors.py``).
"""

from __future__ import annotations


class ChatledgerError(Exception):
    """Base class of every chatledger error."""


class SnapshotConflict(ChatledgerError, ValueError):
    """A snapshot's ``expected_version`` is stale: another writer checkpointed first.

    The message contains "Snapshot conflict", as zett-agent's own store says; reload
    the session and compact again.
    """


class WrongType(ChatledgerError, TypeError, ValueError):
    """An argument of the wrong type (a ``str`` where an ``int`` belongs, a ``dict``
    for a message...), or a value inside a message of a type JSON cannot hold.

    Both a ``TypeError``, which is what it is, and a ``ValueError``: zett-agent's own
    store raises ``ValueError`` for some of these (``session_type=1.5``, a stale or
    non-int ``expected_version``) and ``TypeError`` for others (an object its message
    codec cannot encode), and its callers catch those; with this class both kinds of
    caller stay right. The message names the field.
    """


class VersionConflict(ChatledgerError, ValueError):
    """A compare-and-set on a version column found another writer's version."""


class SchemaNotReady(ChatledgerError, RuntimeError):
    """The database is not at the migration revision this chatledger needs."""


class DowngradeRefused(ChatledgerError, ValueError):
    """A downgrade would drop tables that hold rows, and was not told to drop them
    (``chatledger downgrade --yes``); nothing was changed. (On MySQL/MariaDB, where DDL
    commits statement by statement, rows written while the steps before the drops ran
    are found after those steps: they stay applied, and the message says where the
    database is.)"""

    def __init__(self, message: str, *, tables: dict[str, int]) -> None:
        super().__init__(message)
        #: Table -> the rows it holds, of the tables the downgrade would drop.
        self.tables = tables


#: What a store's :class:`SchemaNotReady` adds for a database behind: the option that
#: upgrades it on first use (other session stores' ``create_tables``).
AUTO_UPGRADE_HINT = (
    "; or let the store upgrade it on first use: auto_upgrade=True (what other session stores "
    "call create_tables), with a role that may change the schema"
)


class CorruptData(ChatledgerError, ValueError):
    """Stored rows break a rule chatledger keeps, because something outside chatledger
    wrote or edited them: a row edited by hand that no longer decodes, or raw messages
    another writer (zett-agent's own store, after ``chatledger adopt``) numbered past
    their session's counter row, which an append then cannot number after.

    The message names the session and the row, and what to do (``chatledger check``
    lists sessions with raw messages past their counter). A ``ValueError``, like any
    decode error of a hand-edited row.
    """


class SessionDeleted(ChatledgerError, ValueError):
    """The session was deleted; its id keeps a tombstone so that no late writer
    (an append or a checkpoint computed before the delete) can revive it.

    ``create_session(session_id=...)`` starts the id anew, as a new generation.
    """


class ConfigurationError(ChatledgerError, RuntimeError):
    """The database refused this configuration: no such database, unknown role, wrong
    password, or a missing privilege; or an engine given to a store (``engine=``) cannot
    serve it: its connections run in autocommit or, on MySQL, with another character
    set or isolation, or a pooled one is used from a second event loop. Not transient
    and never retried; the message says what to fix."""


class StorageUnavailable(ChatledgerError, RuntimeError):
    """The database could not complete a call within the retry budget
    (``retry_timeout`` seconds, lock waits of up to ``lock_timeout`` included): the
    server is unreachable, or kept failing transiently (deadlocks, serialization
    failures, lock timeouts, statements ended by the server's time limit); or no
    pooled connection became free within ``pool_timeout``. Nothing from the call was
    committed (see :class:`OutcomeUnknown` for the one case where that cannot be
    known); repeating the call is safe. (From a path that runs no retries -- the
    schema commands, the tools -- one such failure raises it at once.)"""


class OutcomeUnknown(StorageUnavailable):
    """The connection was lost while the database committed a write, and the
    database stayed unreachable while the store tried to look the write up (or the
    write carries no id to look up), so whether it was applied is unknown.

    Settle it by repeating the identical call once the database answers (writes
    carry an id fixed before their first attempt, so a repeat of a write that did
    commit returns its result and writes nothing), or by looking the write up by
    its id (``write_id``).
    """

    def __init__(self, message: str, *, write_id: str | None = None) -> None:
        super().__init__(message)
        #: The id the write carries (a raw message's or checkpoint's row id, a rein
        #: save's write id), when it has one.
        self.write_id = write_id


class IdentityConflict(ChatledgerError, ValueError):
    """A write carries the id of a stored write whose content differs: a message id
    (zett's ``message_id``), an ADK ``Event.id`` or another id a write is known by
    names one write, and a repeat of that write with that id is stored once
    (:mod:`chatledger.identity`), but another write under the same id is refused.
    Nothing was written; the stored write is left as it is.

    Give the new write an id of its own. A ``ValueError``: the id is bad input, like
    the id of another session's message.
    """

    def __init__(self, message: str, *, write_id: str) -> None:
        super().__init__(message)
        #: The id both writes carry.
        self.write_id = write_id


class DatabaseError(ChatledgerError, RuntimeError):
    """The database refused a statement for a reason chatledger has no closer class for
    (an error code it does not list, or a failure of SQLAlchemy's own without one).
    Not retried; whatever the call was writing was rolled back, nothing committed.

    The message names the database, the code and the server's words; the SQLAlchemy
    error is the ``__cause__``. Report it with the message: a code that should be
    retried or explained gets its own entry in :mod:`chatledger.dialects`.
    """

    def __init__(self, message: str, *, code: str | int | None = None, server_message: str = "") -> None:
        super().__init__(message)
        #: The SQLSTATE (PostgreSQL), error number (MySQL/MariaDB) or primary result
        #: code (SQLite) of the driver's error; ``None`` when the driver gave none.
        self.code = code
        #: The driver's (usually the server's) own message.
        self.server_message = server_message


class DatabaseUnwritable(DatabaseError):
    """The database's own state refuses writes: it is read-only (a hot standby or
    read replica, ``default_transaction_read_only``, MySQL's ``read_only`` or a
    read-only transaction, a SQLite file or directory this process may not write, a
    ``mode=ro`` URI, ``PRAGMA query_only``) or full (disk or tablespace out of
    space, SQLite's ``max_page_count``). Not retried: it does not pass by itself.
    Nothing was written.

    Point the DSN at a writable primary, or free space; :attr:`reason` says which.
    """

    def __init__(
        self, message: str, *, reason: str, code: str | int | None = None, server_message: str = ""
    ) -> None:
        super().__init__(message, code=code, server_message=server_message)
        #: ``"read-only"`` or ``"full"``.
        self.reason = reason


class ConstraintViolation(DatabaseError):
    """A statement broke a constraint of the schema (a duplicate key, a foreign key)
    in a way chatledger's own writes never do: rows written outside chatledger clash
    with it. Checked before it is raised: a write whose own COMMIT was lost and that
    was stored after all is returned instead (see ``Ledger.write``). Nothing written."""


class StatementTooLarge(DatabaseError, ValueError):
    """The server refused a statement as larger than it accepts (MySQL's
    ``max_allowed_packet``, SQLite's ``SQLITE_MAX_LENGTH``, a PostgreSQL field over
    1 GB) although chatledger's own size check let it pass. Nothing was written;
    store large payloads elsewhere or raise the server's limit. Also a ``ValueError``,
    as the size check's own refusal is."""


def missing_extra(what: str, extra: str) -> str:
    """The one message of a missing optional dependency, from every entry point (the
    library and the CLI): ``"<what> is missing: pip install 'chatledger[<extra>]'"``."""
    return f"{what} is missing: pip install 'chatledger[{extra}]'"


def require_extra(error: ModuleNotFoundError, package: str, what: str, extra: str) -> None:
    """Raise :func:`missing_extra`'s message (a ``ModuleNotFoundError`` still naming the
    module) when ``error`` is of ``package`` (or a module in it) being missing."""
    name = error.name or ""
    if name == package or name.startswith(f"{package}."):
        raise ModuleNotFoundError(missing_extra(what, extra), name=name) from error
