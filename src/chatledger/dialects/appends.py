"""The parts of the append and the rein save that every backend's statements share:
the counter row's insert, the session fields an append sets, the parameters, the
message insert, and the ``INSERT .. ON CONFLICT`` forms PostgreSQL and SQLite share
(each backend's module builds its own statements from them)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Column, Table, UniqueConstraint, and_, bindparam, case, func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ..schema import raw_messages_table, rein_sessions_table, sessions_table

#: The counter row's columns an append binds (``s_<name>`` parameters); the rest start
#: at constants: the first append is sequence 1, no checkpoint, fields version 1.
SESSION_BINDS = (
    "id",
    "parent_session_id",
    "title",
    "agent_name",
    "session_type",
    "created_at",
    "updated_at",
)
_SESSION_START = {
    "last_sequence": 1,
    "base_sequence": 0,
    "snapshot_version": 0,
    "compacted_through_sequence": 0,
    "fields_version": 1,
}
#: The message row's columns but ``sequence`` (``m_<name>`` parameters).
MESSAGE_COLUMNS = tuple(column.name for column in raw_messages_table.c if column.name != "sequence")


def session_row(insert: Callable[..., Any], last_sequence: Any = None) -> Any:
    """``INSERT INTO agent_sessions`` of a new counter row, its values bound as ``s_<name>``."""
    table = sessions_table
    values: dict[str, Any] = {
        name: bindparam(f"s_{name}", type_=table.c[name].type) for name in SESSION_BINDS
    }
    values.update(_SESSION_START)
    if last_sequence is not None:
        values["last_sequence"] = last_sequence
    return insert(table).values(values)


#: The session fields an append given them sets on an existing session, as zett's own
#: store does (``None`` keeps the stored value).
_APPEND_FIELDS = ("title", "agent_name")


def field_updates(new: Any) -> list[tuple[str, Any]]:
    """An append's assignments of the given session fields to an existing counter row.

    Each field given (not NULL in ``new``, the row the append would have inserted)
    replaces the stored one, and ``fields_version`` goes up by one when that changes
    anything: a compare-and-set read before (``update_session``'s
    ``expected_version``) then conflicts instead of overwriting the append's value.
    Absent or unchanged values change nothing, so the append costs no statement more.
    ``fields_version`` comes first: MySQL assigns left to right, each assignment
    seeing the ones before it, so it must compare against the stored fields.
    """
    table = sessions_table
    changed = or_(
        *(and_(new[name].is_not(None), new[name].is_distinct_from(table.c[name])) for name in _APPEND_FIELDS)
    )
    return [
        ("fields_version", table.c.fields_version + case((changed, 1), else_=0)),
        *((name, func.coalesce(new[name], table.c[name])) for name in _APPEND_FIELDS),
    ]


def counter_upsert(insert: Callable[..., Any], greatest: Callable[..., Any]) -> Any:
    """PostgreSQL and SQLite: ``INSERT .. ON CONFLICT (id) DO UPDATE`` on the counter row,
    ``RETURNING`` the new sequence.

    The conflict clause takes the row lock, so concurrent appenders to one session
    queue behind each other's transaction (and behind a delete, which updates the
    row first); its WHERE leaves the row alone (and returns nothing) when the parent
    does not match or the session is a tombstone. The given title and agent name
    update the row in the same statement (:func:`field_updates`).
    """
    table = sessions_table
    statement = session_row(insert)
    return statement.on_conflict_do_update(
        index_elements=[table.c.id],
        set_={
            **dict(field_updates(statement.excluded)),
            "last_sequence": table.c.last_sequence + 1,
            "updated_at": greatest(table.c.updated_at, statement.excluded.updated_at),
        },
        where=table.c.parent_session_id.is_not_distinct_from(statement.excluded.parent_session_id)
        & table.c.deleted_at.is_(None),
    ).returning(table.c.last_sequence)


#: (parameter, value's key) of an append's parameters, named once rather than per call.
_SESSION_PARAMS = tuple((f"s_{name}", name) for name in SESSION_BINDS)
_MESSAGE_PARAMS = tuple((f"m_{name}", name) for name in MESSAGE_COLUMNS)


def append_params(values: dict[str, Any], row: dict[str, Any], now: datetime) -> dict[str, Any]:
    params = {param: values.get(name) for param, name in _SESSION_PARAMS}
    params["s_created_at"] = params["s_updated_at"] = now
    params.update({param: row[name] for param, name in _MESSAGE_PARAMS})
    return params


# Built once: SQLAlchemy then reuses their cache keys and compiled forms on every append.

MESSAGE_INSERT = raw_messages_table.insert().values(
    {
        name: bindparam(name if name == "sequence" else f"m_{name}", type_=column.type)
        for name, column in raw_messages_table.c.items()
    }
)


def unchanged_live_session() -> list[Any]:
    """The counter row an append may move along without the counter upsert: the
    session's (``s_id``), live, with the given parent, whose given fields (title, agent
    name; ``NULL`` keeps the stored one) are already the stored ones. Any other (a new
    session, a tombstone, another parent, a field to change) the caller appends by the
    counter upsert, which creates, refuses or changes it."""
    table = sessions_table

    def keeps(name: str) -> Any:
        given = bindparam(f"s_{name}", type_=table.c[name].type)
        return given.is_(None) | table.c[name].is_not_distinct_from(given)

    return [
        table.c.id == bindparam("s_id", type_=table.c.id.type),
        table.c.parent_session_id.is_not_distinct_from(
            bindparam("s_parent_session_id", type_=table.c.parent_session_id.type)
        ),
        table.c.deleted_at.is_(None),
        *(keeps(name) for name in _APPEND_FIELDS),
    ]


def counted_insert() -> Any:
    """The append in one statement, where a trigger moves the counter row along
    (SQLite's counter trigger): ``INSERT INTO raw_messages .. SELECT last_sequence + 1
    FROM agent_sessions .. RETURNING sequence``.

    It selects only the counter row of :func:`unchanged_live_session`, so it writes
    exactly what the counter upsert would have written, and nothing (an empty result)
    otherwise.
    """
    table = sessions_table
    return (
        raw_messages_table.insert()
        .from_select(
            [*MESSAGE_COLUMNS, "sequence"],
            select(
                *(bindparam(f"m_{name}", type_=raw_messages_table.c[name].type) for name in MESSAGE_COLUMNS),
                table.c.last_sequence + 1,
            ).where(*unchanged_live_session()),
        )
        .returning(raw_messages_table.c.sequence)
    )


def counter_advance(greatest: Callable[..., Any]) -> Any:
    """``UPDATE agent_sessions SET last_sequence = last_sequence + 1 .. RETURNING
    last_sequence`` of the counter row of :func:`unchanged_live_session` only: what the
    counter upsert does to it, and nothing (no row) to any other."""
    table = sessions_table
    return (
        table.update()
        .where(*unchanged_live_session())
        .values(
            last_sequence=table.c.last_sequence + 1,
            updated_at=greatest(table.c.updated_at, bindparam("s_updated_at", type_=table.c.updated_at.type)),
        )
        .returning(table.c.last_sequence)
    )


async def save_rein_returning(
    insert: Callable[..., Any],
    greatest: Callable[..., Any],
    conn: AsyncConnection,
    values: dict[str, Any],
    only_if_absent: bool,
) -> int | None:
    """PostgreSQL and SQLite: ``INSERT .. ON CONFLICT (id) DO UPDATE .. RETURNING``; with
    ``only_if_absent`` the update's WHERE admits only a tombstone.

    The conflict clause takes the row lock, so concurrent first saves of one id never
    raise a duplicate-key error: one inserts, the others overwrite after it.
    """
    table = rein_sessions_table
    statement = insert(table).values({**values, "version": 1})
    new = statement.excluded
    tombstone = table.c.session_json.is_(None)
    statement = statement.on_conflict_do_update(
        index_elements=[table.c.id],
        set_={
            "version": table.c.version + 1,
            "session_json": new.session_json,
            "write_id": new.write_id,
            "created_at": case((tombstone, new.created_at), else_=table.c.created_at),
            "updated_at": greatest(table.c.updated_at, new.updated_at),
        },
        where=tombstone if only_if_absent else None,
    )
    return (await conn.execute(statement.returning(table.c.version))).scalar_one_or_none()


def merge_key(table: Table) -> list[Column[Any]]:
    """The primary key a :attr:`chatledger.dialects.Backend.merge_insert` of ``table``
    meets stored rows on.

    :raises ValueError: ``table`` has another unique key, which MySQL's ``ON DUPLICATE
        KEY UPDATE`` would meet too where PostgreSQL's and SQLite's ``ON CONFLICT`` name
        the primary key only."""
    others = [str(index.name) for index in table.indexes if index.unique]
    others += [
        str(constraint.name or "unnamed")
        for constraint in table.constraints
        if isinstance(constraint, UniqueConstraint)
    ]
    others += [str(column.name) for column in table.columns if column.unique]
    if others:
        raise ValueError(
            f"merge_insert of table {table.name}: its only unique key must be the primary key, "
            f"it has also {sorted(others)}"
        )
    return list(table.primary_key.columns)


def conflict_merge(insert: Callable[..., Any]) -> Callable[[Table, Sequence[str]], Any]:
    """PostgreSQL and SQLite: :attr:`chatledger.dialects.Backend.merge_insert` as
    ``INSERT .. ON CONFLICT (primary key) DO UPDATE SET`` the ``replace`` columns to
    the inserted values, or ``DO NOTHING`` with none."""

    def merge(table: Table, replace: Sequence[str]) -> Any:
        key = merge_key(table)
        statement = insert(table)
        if not replace:
            return statement.on_conflict_do_nothing(index_elements=key)
        return statement.on_conflict_do_update(
            index_elements=key, set_={name: statement.excluded[name] for name in replace}
        )

    return merge
