"""Another session store's own tables in chatledger's database.

Google ADK's ``DatabaseSessionService`` creates ``sessions``, ``events``,
``app_states`` and ``user_states`` in whatever database its URL names: ADK's
command-line tools given a plain ``postgresql://`` URI of chatledger's database write
there, beside chatledger's tables, and chatledger never reads those sessions.
``chatledger check`` names them and the import that moves them in
(``chatledger import --adk``, which reads them from the same database).
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import inspect
from sqlalchemy.engine import Connection

__all__ = ["ADK_TABLES", "adk_own_tables"]

#: ADK's ``DatabaseSessionService`` tables (schema v1) and the columns the import reads.
ADK_TABLES: Mapping[str, frozenset[str]] = {
    "sessions": frozenset({"app_name", "user_id", "id", "state", "create_time", "update_time"}),
    "events": frozenset({"id", "app_name", "user_id", "session_id", "invocation_id", "event_data"}),
    "app_states": frozenset({"app_name", "state", "update_time"}),
    "user_states": frozenset({"app_name", "user_id", "state", "update_time"}),
}


def adk_own_tables(connection: Connection) -> list[str]:
    """ADK's own tables in the connection's default schema, when all of them are there
    with ADK's columns (an application's own ``sessions`` or ``events`` alone is not
    ADK's); else ``[]``. Reads the catalog only, never the tables' rows."""
    inspector = inspect(connection)
    names = set(inspector.get_table_names())
    if not names >= set(ADK_TABLES):
        return []
    for name, wanted in ADK_TABLES.items():
        if not {column["name"] for column in inspector.get_columns(name)} >= wanted:
            return []
    return list(ADK_TABLES)
