"""chatledger: AI-agent conversation sessions in one SQL schema, shared safely.

The zett-agent storage lives in :mod:`chatledger.zett`, the rein-agent store in
:mod:`chatledger.rein`; both need their extra installed.
"""

from .errors import (
    ChatledgerError,
    ConfigurationError,
    ConstraintViolation,
    CorruptData,
    DatabaseError,
    DatabaseUnwritable,
    DowngradeRefused,
    IdentityConflict,
    OutcomeUnknown,
    SchemaNotReady,
    SessionDeleted,
    SnapshotConflict,
    StatementTooLarge,
    StorageUnavailable,
    VersionConflict,
    WrongType,
)

__all__ = [
    "ChatledgerError",
    "ConfigurationError",
    "ConstraintViolation",
    "CorruptData",
    "DatabaseError",
    "DatabaseUnwritable",
    "DowngradeRefused",
    "IdentityConflict",
    "OutcomeUnknown",
    "SchemaNotReady",
    "SessionDeleted",
    "SnapshotConflict",
    "StatementTooLarge",
    "StorageUnavailable",
    "VersionConflict",
    "WrongType",
]
__version__ = "0.1.0"
