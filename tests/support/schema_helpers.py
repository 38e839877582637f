"""Shared by the migration tests: fresh databases, inspection, test-only script
directories (the shipped ``env.py`` and revisions plus revisions of the test's own),
and the real ``alembic`` command line."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from chatledger.migrate import COMPATIBILITY_TABLE, VERSION_TABLE, context_options, head_revision
from chatledger.schema import metadata

from ..conftest import Database
from .backends import fresh_name

T = TypeVar("T")

REPO_ROOT = Path(__file__).parents[2]
MIGRATIONS = REPO_ROOT / "migrations"
ALEMBIC = Path(sys.executable).parent / "alembic"
SCHEMA_TABLES = frozenset(metadata.tables)
#: chatledger's own bookkeeping tables beside the schema.
BOOKKEEPING = frozenset({VERSION_TABLE, COMPATIBILITY_TABLE})


@asynccontextmanager
async def fresh_database(database: Database, tmp_path: Path, name: str = "fresh") -> AsyncIterator[URL]:
    """An empty, unmigrated database of ``database``'s backend, dropped afterwards."""
    if database.server is None:
        yield URL.create("sqlite+aiosqlite", database=str(tmp_path / f"{name}.sqlite3"))
        return
    database_name = fresh_name("chatledger_mig")
    url = await database.server.create_database(database_name)
    try:
        yield url
    finally:
        await database.server.drop_database(database_name)


async def on_connection(url: URL, work: Callable[[Connection], T]) -> T:
    """Run a synchronous ``work(connection)`` on a throwaway engine, committed."""
    engine = create_async_engine(url, poolclass=NullPool)
    try:
        async with engine.begin() as conn:
            return await conn.run_sync(work)
    finally:
        await engine.dispose()


async def execute(url: URL, *statements: str) -> None:
    """Run SQL statements in one committed transaction."""

    def run(conn: Connection) -> None:
        for statement in statements:
            conn.execute(text(statement))

    await on_connection(url, run)


def table_names(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names())


def drift(connection: Connection) -> list[Any]:
    """What ``alembic check`` compares: the database against the ORM metadata."""
    context = MigrationContext.configure(connection, opts=context_options(metadata))
    return list(compare_metadata(context, metadata))


def fingerprint(connection: Connection) -> dict[str, Any]:
    """Everything a migration could have changed: every table's columns and indexes, and
    the rows of the version tables, so that "exactly as before" can be compared."""
    inspector = inspect(connection)
    shape: dict[str, Any] = {}
    for table in sorted(inspector.get_table_names()):
        columns = [
            (column["name"], str(column["type"]), column["nullable"])
            for column in inspector.get_columns(table)
        ]
        indexes = sorted(index["name"] or "" for index in inspector.get_indexes(table))
        rows = None
        if table in BOOKKEEPING or table == "alembic_version":
            rows = sorted(tuple(row) for row in connection.execute(text(f"SELECT * FROM {table}")))
        shape[table] = (columns, indexes, rows)
    return shape


def catalog(connection: Connection) -> dict[str, Any]:
    """Every table as the database defines it: columns (type as the dialect writes it,
    nullability, default), indexes, primary key, check constraints, the DDL the server
    keeps (SQLite's ``sqlite_master``, MySQL's ``SHOW CREATE TABLE``), and the rows of
    the bookkeeping tables; so that two schemas made two ways can be compared."""
    inspector = inspect(connection)
    found: dict[str, Any] = {}
    for name in sorted(inspector.get_table_names()):
        entry: dict[str, Any] = {
            "columns": [
                (
                    column["name"],
                    str(column["type"].compile(dialect=connection.dialect)),
                    column["nullable"],
                    column.get("default"),
                )
                for column in inspector.get_columns(name)
            ],
            "indexes": sorted(
                (str(index["name"]), tuple(index["column_names"]), bool(index["unique"]))
                for index in inspector.get_indexes(name)
            ),
            "primary_key": inspector.get_pk_constraint(name),
            "checks": inspector.get_check_constraints(name),
        }
        if connection.dialect.name == "sqlite":
            # Whitespace aside: Alembic's --sql output indents with spaces, SQLAlchemy with tabs.
            query = text("SELECT type, name, sql FROM sqlite_master WHERE tbl_name = :name")
            entry["ddl"] = sorted(
                (kind, index, " ".join((sql or "").split()))
                for kind, index, sql in connection.execute(query, {"name": name})
            )
        elif connection.dialect.name == "mysql":
            entry["ddl"] = connection.exec_driver_sql(f"SHOW CREATE TABLE {name}").one()[1]
        if name in BOOKKEEPING:
            entry["rows"] = sorted(tuple(row) for row in connection.execute(text(f"SELECT * FROM {name}")))
        found[name] = entry
    return found


def revision_file(
    revision: str,
    upgrade: str,
    downgrade: str = "pass",
    *,
    compatible_from: str | None = None,
    down_revision: str | None = None,
) -> str:
    """The source of a test-only revision file following the shipped conventions: after
    the shipped head unless ``down_revision`` says otherwise; ``compatible_from`` omitted
    when ``None``. ``upgrade`` and ``downgrade`` are function bodies (``op``, ``sa``
    and ``Path`` are imported)."""
    declared = "" if compatible_from is None else f"compatible_from = {compatible_from!r}\n"
    return (
        f'"""Test-only revision {revision}."""\n\n'
        "from pathlib import Path\n\nimport sqlalchemy as sa\nfrom alembic import op\n\n"
        f"revision = {revision!r}\ndown_revision = {down_revision or head_revision()!r}\n"
        f"branch_labels = None\ndepends_on = None\n{declared}\n\n"
        f"def upgrade() -> None:\n{textwrap.indent(textwrap.dedent(upgrade).strip(), '    ')}\n\n\n"
        f"def downgrade() -> None:\n{textwrap.indent(textwrap.dedent(downgrade).strip(), '    ')}\n"
    )


def script_directory(root: Path, revisions: dict[str, str]) -> Path:
    """A test-only Alembic script directory under ``root``: the shipped ``env.py``,
    template and revisions, plus ``revisions`` (file name -> source, see
    :func:`revision_file`)."""
    location = root / "scripts"
    shutil.copytree(MIGRATIONS, location, ignore=shutil.ignore_patterns("__pycache__"))
    for name, source in revisions.items():
        (location / "versions" / name).write_text(source, encoding="utf-8")
    return location


def alembic_ini(root: Path, location: Path) -> Path:
    """The repository's ``alembic.ini`` (logging included), pointing at ``location``."""
    ini = (REPO_ROOT / "alembic.ini").read_text(encoding="utf-8")
    ini = ini.replace("script_location = %(here)s/migrations", f"script_location = {location}")
    path = root / "alembic.ini"
    path.write_text(ini.replace("prepend_sys_path = src", f"prepend_sys_path = {REPO_ROOT / 'src'}"))
    return path


async def run_alembic(url: URL, *arguments: str, config: Path | None = None) -> tuple[int, str]:
    """The real ``alembic`` console script (default: the repository's ``alembic.ini``);
    (exit code, output)."""
    environment = {key: value for key, value in os.environ.items() if key != "CHATLEDGER_DSN"}
    options = ["-c", str(config)] if config is not None else []
    process = await asyncio.create_subprocess_exec(
        str(ALEMBIC),
        *options,
        "-x",
        f"dsn={url.render_as_string(hide_password=False)}",
        *arguments,
        cwd=REPO_ROOT,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=180)
    return process.returncode or 0, output.decode(errors="replace")


def dsn_of(url: URL) -> str:
    """The URL as a DSN string, password included (what a user would type)."""
    return url.render_as_string(hide_password=False)


def revision_module(number: str) -> Any:
    """The frozen revision file ``<number>_*.py``, loaded as a module."""
    (path,) = (MIGRATIONS / "versions").glob(f"{number}_*.py")
    spec = importlib.util.spec_from_file_location(f"revision_{number}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
