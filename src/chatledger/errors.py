"""Errors raised by chatledger.

All of them are ``ValueError`` or ``RuntimeError`` subclasses, so code written
against zett-agent's storage contract (which raises ``ValueError`` for a stale
snapshot version) keeps working unchanged.
"""

from __future__ import annotations


class ChatledgerError(Exception):
    """Base class of every chatledger error."""


class SnapshotConflict(ChatledgerError, ValueError):
    """A snapshot's ``expected_version`` is stale: another writer checkpointed first.

    The message contains "Snapshot conflict", as zett-agent's own store says; reload
    the session and compact again.
    """


class VersionConflict(ChatledgerError, ValueError):
    """A compare-and-set on a version column found another writer's version."""


class SchemaNotReady(ChatledgerError, RuntimeError):
    """The database is not at the migration revision this chatledger needs."""


class StorageUnavailable(ChatledgerError, RuntimeError):
    """The database could not complete a call: retries ran out, the server went away,
    or no pooled connection became free in time. The call's transaction was rolled
    back, so nothing from it was written."""
