"""Hooks for an application's own Alembic, run against the database chatledger's tables
live in. Re-exported from :mod:`chatledger.migrate`.

An application's ``alembic revision --autogenerate`` compares its own metadata with
every table the database holds: chatledger's tables, absent from that metadata, come
out as ``op.drop_table``, and its next ``alembic upgrade head`` deletes every session.
Its ``env.py`` passes these hooks to every ``context.configure()`` (Alembic's
``include_name`` and ``include_object``, with Alembic's signatures), so that its
autogenerate never sees chatledger's tables, their indexes and constraints, nor
chatledger's version and compatibility tables::

    from chatledger.migrate import include_name, include_object

    context.configure(connection=connection, target_metadata=target_metadata,
                      include_name=include_name, include_object=include_object)

An application with filters of its own composes them with :func:`app_hooks` (an
object is compared only when chatledger's hook and the application's both accept it)::

    context.configure(connection=connection, target_metadata=target_metadata,
                      **chatledger.migrate.app_hooks(include_object=my_include_object))

chatledger's tables are those of :data:`chatledger.schema.metadata` plus
:data:`~chatledger.versioning.VERSION_TABLE` and
:data:`~chatledger.versioning.COMPATIBILITY_TABLE`, read at each call, so a table a
new revision adds is covered with no change here. They are matched by (schema, name) in
the schema chatledger runs in, the connection's default schema (Alembic's ``None``): a
table of the same name in another schema (``include_schemas=True``) is the
application's. ``alembic_version`` in that schema is left out as well: where an older
chatledger kept its revision, and otherwise an Alembic project's version table, which
Alembic already leaves out of the autogenerate of the project it belongs to
(``alembic.autogenerate.compare.tables``), so an application with a ``version_table``
of its own never proposes to drop it.

:func:`app_version_tables` finds an application's version table beside chatledger's
(``chatledger check`` then names these hooks).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from alembic.config import Config
from sqlalchemy import column, inspect, select, table
from sqlalchemy.engine import Connection
from sqlalchemy.schema import SchemaItem

from .revisions import revisions
from .schema import metadata
from .versioning import COMPATIBILITY_TABLE, LEGACY_VERSION_TABLE, VERSION_TABLE

if TYPE_CHECKING:
    from alembic.runtime.environment import IncludeNameFn, IncludeObjectFn, NameFilterParentNames

__all__ = [
    "AppHooks",
    "app_hooks",
    "app_version_tables",
    "chatledger_tables",
    "env_passes_hooks",
    "find_env_py",
    "include_name",
    "include_object",
]

#: The one column of an Alembic version table (Alembic's own layout).
_VERSION_COLUMN = "version_num"


def chatledger_tables() -> frozenset[str]:
    """The names of every table chatledger owns: the schema's and its bookkeeping tables."""
    return frozenset(
        {found.name for found in metadata.tables.values()} | {VERSION_TABLE, COMPATIBILITY_TABLE}
    )


def _excluded() -> frozenset[str]:
    """The table names the hooks leave out of chatledger's schema: chatledger's own and
    ``alembic_version`` (see the module docstring)."""
    return chatledger_tables() | {LEGACY_VERSION_TABLE}


def include_name(name: str | None, type_: str, parent_names: NameFilterParentNames) -> bool:
    """Alembic's ``include_name`` hook (``EnvironmentContext.configure``): ``False`` for
    a reflected chatledger table (or ``alembic_version``) in the default schema
    (``parent_names["schema_name"]`` ``None``) and for the indexes, constraints and
    columns of one, ``True`` for everything else (schemas included, and tables of the
    same name in other schemas)."""
    if parent_names.get("schema_name") is not None:
        return True
    excluded = _excluded()
    if type_ == "table":
        return name not in excluded
    if type_ == "schema":
        return True
    return parent_names.get("table_name") not in excluded


def include_object(
    object: SchemaItem,  # Alembic's own parameter name
    name: str | None,
    type_: str,
    reflected: bool,
    compare_to: SchemaItem | None,
) -> bool:
    """Alembic's ``include_object`` hook: ``False`` for a chatledger table (or
    ``alembic_version``) in the default schema (``schema`` ``None``), and for a column,
    index or constraint of one, whether reflected from the database or in the
    application's metadata; ``True`` for everything else."""
    if type_ == "table":
        schema, table_name = getattr(object, "schema", None), name
    else:
        owner = getattr(object, "table", None)
        schema, table_name = getattr(owner, "schema", None), getattr(owner, "name", None)
    return schema is not None or table_name not in _excluded()


class AppHooks(TypedDict):
    """Keyword arguments of ``context.configure()``: both hooks."""

    include_name: IncludeNameFn
    include_object: IncludeObjectFn


def app_hooks(
    include_name: IncludeNameFn | None = None, include_object: IncludeObjectFn | None = None
) -> AppHooks:
    """chatledger's hooks composed with the application's own filters, as keyword
    arguments of ``context.configure()``: a name or object is included only when
    chatledger's hook includes it and then the application's does (the application's
    is never called for chatledger's tables). ``None``: chatledger's hook alone.

    Raises:
        TypeError: a filter given is not callable.
    """
    for field, given in (("include_name", include_name), ("include_object", include_object)):
        if given is not None and not callable(given):
            raise TypeError(f"{field} must be a callable (Alembic's hook signature), not {given!r}")
    app_name, app_object = include_name, include_object

    def name_hook(name: str | None, type_: Any, parent_names: NameFilterParentNames) -> bool:
        return _include_name(name, type_, parent_names) and (
            app_name is None or app_name(name, type_, parent_names)
        )

    def object_hook(
        object: SchemaItem,
        name: str | None,
        type_: Any,
        reflected: bool,
        compare_to: SchemaItem | None,
    ) -> bool:
        return _include_object(object, name, type_, reflected, compare_to) and (
            app_object is None or app_object(object, name, type_, reflected, compare_to)
        )

    return AppHooks(include_name=name_hook, include_object=object_hook)


# The module-level hooks, under names the parameters of app_hooks do not shadow.
_include_name = include_name
_include_object = include_object


def app_version_tables(connection: Connection) -> list[str]:
    """The Alembic version tables in the database that are not chatledger's (an
    application's own Alembic): tables of Alembic's layout, one ``version_num`` column,
    other than :data:`~chatledger.versioning.VERSION_TABLE`, in the default schema;
    sorted. Not ``alembic_version`` holding nothing but revisions chatledger ships,
    where an older chatledger kept its revision. Reads only, and reads an
    ``alembic_version``'s rows only when :data:`~chatledger.versioning.VERSION_TABLE`
    records no revision: otherwise the table is an application's, which chatledger's
    roles need no grant on (a database shared with the application)."""
    inspector = inspect(connection)
    ours = chatledger_tables()
    recorded = VERSION_TABLE in inspector.get_table_names() and (
        connection.scalar(select(column(_VERSION_COLUMN)).select_from(table(VERSION_TABLE)).limit(1))
        is not None
    )
    found: list[str] = []
    for (_schema, name), columns in inspector.get_multi_columns().items():
        if name in ours or [entry["name"] for entry in columns] != [_VERSION_COLUMN]:
            continue
        if name == LEGACY_VERSION_TABLE and not recorded:
            rows: list[str] = list(
                connection.scalars(select(column(_VERSION_COLUMN)).select_from(table(name)))
            )
            if rows and all(revisions().knows(row) for row in rows):
                continue  # chatledger's own revision, where an older chatledger kept it
        found.append(name)
    return sorted(found)


#: The hook names an ``env.py`` passes: both module-level hooks, or :func:`app_hooks`.
_HOOKS = frozenset({"include_name", "include_object"})


def find_env_py(path: str | Path) -> Path | None:
    """An application's Alembic ``env.py`` from ``path``: the file itself, a migration
    directory holding it, or an ``alembic.ini`` (its ``script_location``, relative to
    the file's directory); ``None`` when there is none."""
    path = Path(path)
    if path.is_dir():
        path = path / "env.py"
    elif path.suffix == ".ini" and path.is_file():
        location = Config(str(path)).get_main_option("script_location")
        if not location:
            return None
        location = location.replace("%(here)s", str(path.parent))
        folder = Path(location)
        path = (folder if folder.is_absolute() else path.parent / folder) / "env.py"
    return path if path.is_file() else None


def env_passes_hooks(env_py: Path) -> bool:
    """Whether an ``env.py`` uses chatledger's hooks: it imports ``include_name`` and
    ``include_object`` (or :func:`app_hooks`) from ``chatledger.migrate`` or
    ``chatledger.app_alembic``, or names them as attributes of those modules. Read as
    source, never run; a file that does not parse has none."""
    try:
        tree = ast.parse(env_py.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return False
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("chatledger"):
            used.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Attribute) and _names_chatledger(node.value):
            used.add(node.attr)
    return "app_hooks" in used or used >= _HOOKS


def _names_chatledger(node: ast.expr) -> bool:
    """``chatledger.migrate`` or ``chatledger.app_alembic`` (or a name bound to one by
    ``from chatledger import migrate``), as an attribute's owner."""
    if isinstance(node, ast.Attribute):
        return isinstance(node.value, ast.Name) and node.value.id == "chatledger"
    return isinstance(node, ast.Name) and node.id in ("migrate", "app_alembic")
