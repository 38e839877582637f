"""The revision files are frozen and follow the conventions of :mod:`chatledger.migrate`.

* They import nothing from ``chatledger``: their column types are their own, so a
  later change of :mod:`chatledger.types` cannot change what an old revision creates.
* Revision 0001 emits, on every backend, the same DDL byte for byte as when it still
  used the live types (``tests/golden/``, recorded from that version); so do 0003,
  0004, 0005, 0006, 0007, 0008, 0009 and 0010 (recorded when they were written).
* The history is linear and every revision declares a valid ``compatible_from``;
  the template of ``alembic revision`` writes one and imports nothing from chatledger.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import event
from sqlalchemy.engine import Engine

from chatledger.migrate import alembic_config, imports_chatledger, revisions, upgrade_database

from .conftest import Database
from .support.schema_helpers import BOOKKEEPING, MIGRATIONS, fresh_database, revision_file, script_directory

pytestmark = pytest.mark.one_transaction_at_a_time

GOLDEN = Path(__file__).with_name("golden")
REVISION_FILES = sorted((MIGRATIONS / "versions").glob("*.py"))


def test_there_are_revision_files() -> None:
    assert [path.name for path in REVISION_FILES][:1] == ["0001_initial_schema.py"]


@pytest.mark.parametrize("path", REVISION_FILES, ids=lambda path: path.name)
def test_revision_imports_nothing_from_chatledger(path: Path) -> None:
    assert imports_chatledger(path) == []
    # Nor reaches it another way: no name in the file mentions the package.
    names = {node.id for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Name)}
    assert "chatledger" not in names


def test_import_check_sees_every_form(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import chatledger.types\nfrom chatledger import schema\nfrom chatledger.types import Id\n"
        "import sqlalchemy, chatledger\nfrom . import sibling\nimport chatledgerx\n"
    )
    assert imports_chatledger(probe) == [
        "chatledger.types",
        "chatledger",
        "chatledger.types",
        "chatledger",
        ".",
    ]


def test_shipped_history_is_linear_with_compatible_from() -> None:
    shipped = revisions()
    assert shipped.order[0] == "0001"
    assert shipped.compatible_from["0001"] == "0001"
    for position, revision in enumerate(shipped.order):
        assert shipped.compatible_from[revision] in shipped.order[: position + 1]


def test_revision_0004_is_expand_only() -> None:
    """The rein write log only adds a table: code of revision 0003 keeps running on it."""
    assert revisions().compatible_from["0004"] == "0003"


def test_a_revision_without_compatible_from_is_refused(tmp_path: Path) -> None:
    location = script_directory(tmp_path, {"9001_sloppy.py": revision_file("9001", "pass")})
    with pytest.raises(RuntimeError, match=r"9001_sloppy.py: declares no compatible_from"):
        revisions(location)


def test_a_compatible_from_naming_a_later_revision_is_refused(tmp_path: Path) -> None:
    later = revision_file("9002", "pass", compatible_from="9003")
    location = script_directory(tmp_path, {"9002_forward.py": later})
    with pytest.raises(RuntimeError, match=r"compatible_from '9003' is neither itself nor an earlier"):
        revisions(location)


def test_new_revision_template_is_frozen_and_declares_compatible_from(tmp_path: Path) -> None:
    location = script_directory(tmp_path, {})
    command.revision(alembic_config(location=location), message="probe", rev_id="0099")
    (written,) = (location / "versions").glob("0099_*.py")
    assert imports_chatledger(written) == []
    assert revisions(location).compatible_from["0099"] == "0099"


@contextmanager
def recorded_ddl() -> Iterator[list[str]]:
    """The DDL every engine of this process sends meanwhile (the upgrade runs on a
    thread and engine of its own)."""
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip().upper().startswith(("CREATE", "ALTER", "DROP")):
            sent.append(statement.strip())

    event.listen(Engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(Engine, "before_cursor_execute", record)


def _predecessor(revision: str) -> str | None:
    shipped = revisions()
    index = shipped.order.index(revision)
    return shipped.order[index - 1] if index else None


def _keeps_compatible_from(revision: str) -> bool:
    """Whether ``revision`` is expand-only: it records its predecessor's ``compatible_from``."""
    shipped = revisions()
    before = _predecessor(revision)
    return before is not None and shipped.compatible_from[revision] == shipped.compatible_from[before]


async def _upgrade_ddl(database: Database, tmp_path: Path, revision: str) -> str:
    """The DDL the upgrade from ``revision``'s predecessor to it sends, chatledger's
    bookkeeping aside, as the golden files hold it."""
    before = _predecessor(revision)
    async with fresh_database(database, tmp_path) as url:
        if before is not None:
            assert await upgrade_database(url, before) == before
        with recorded_ddl() as sent:
            assert await upgrade_database(url, revision) == revision
    bookkeeping = (*BOOKKEEPING, "alembic_version")
    ours = [statement for statement in sent if not any(table in statement for table in bookkeeping)]
    return "".join(f"{statement}\n;\n" for statement in ours)


def _golden(database: Database, revision: str) -> str:
    return (GOLDEN / f"ddl_{revision}_{database.backend}.sql").read_text()


async def test_revision_0001_ddl_is_byte_for_byte_as_recorded(database: Database, tmp_path: Path) -> None:
    assert await _upgrade_ddl(database, tmp_path, "0001") == _golden(database, "0001")


async def test_revision_0003_ddl_is_as_recorded(database: Database, tmp_path: Path) -> None:
    """The byte-exact ids: three ``ALTER TABLE .. MODIFY`` on MySQL/MariaDB, no DDL on
    PostgreSQL and SQLite (an empty golden file)."""
    assert await _upgrade_ddl(database, tmp_path, "0003") == _golden(database, "0003")


async def test_revision_0004_ddl_is_as_recorded(database: Database, tmp_path: Path) -> None:
    """The rein write log: one ``CREATE TABLE`` and its index, on every backend."""
    assert await _upgrade_ddl(database, tmp_path, "0004") == _golden(database, "0004")


def test_a_compatible_from_going_backwards_is_refused(tmp_path: Path) -> None:
    # An "expand" after the contract revision 0002 that copies 0001's value would let
    # code of 0001 run on 0002's schema.
    backwards = revision_file("9001", "pass", compatible_from="0001")
    location = script_directory(tmp_path, {"9001_expand.py": backwards})
    with pytest.raises(
        RuntimeError, match=r"revision 9001: compatible_from '0001' is older than its predecessor"
    ):
        revisions(location)
    keeps = revision_file("9001", "pass", compatible_from=revisions().compatible_from[revisions().head])
    assert revisions(script_directory(tmp_path / "keeps", {"9001_expand.py": keeps})).head == "9001"


def test_revision_0005_is_expand_only() -> None:
    """The high-water marks only add a table: code of revision 0004 keeps running on it."""
    assert revisions().compatible_from["0005"] == "0004"


async def test_revision_0005_ddl_is_as_recorded(database: Database, tmp_path: Path) -> None:
    """The high-water marks: one ``CREATE TABLE``, on every backend."""
    assert await _upgrade_ddl(database, tmp_path, "0005") == _golden(database, "0005")


def test_revision_0006_is_expand_only() -> None:
    """The OpenAI Agents and ADK tables only add tables: earlier code keeps running on them."""
    assert _keeps_compatible_from("0004")


async def test_revision_0006_ddl_is_as_recorded(database: Database, tmp_path: Path) -> None:
    """The OpenAI Agents and ADK tables: six ``CREATE TABLE`` and their indexes, on every backend."""
    assert await _upgrade_ddl(database, tmp_path, "0006") == _golden(database, "0006")


def test_revision_0007_is_expand_only() -> None:
    """The counter trigger: code of earlier revisions keeps appending correctly beside it
    (``tests/test_counter_trigger.py``)."""
    assert _keeps_compatible_from("0007")


async def test_revision_0007_ddl_is_as_recorded(database: Database, tmp_path: Path) -> None:
    """The counter trigger: one ``CREATE TRIGGER`` on SQLite, nothing elsewhere."""
    assert await _upgrade_ddl(database, tmp_path, "0007") == _golden(database, "0007")


def test_revision_0008_is_expand_only() -> None:
    """The append procedure: code of earlier revisions keeps appending correctly beside
    it (it adds a routine and changes no table)."""
    assert _keeps_compatible_from("0008")


async def test_revision_0008_ddl_is_as_recorded(database: Database, tmp_path: Path) -> None:
    """The append procedure: ``CREATE PROCEDURE`` under a strict ``sql_mode`` on MySQL,
    nothing elsewhere."""
    assert await _upgrade_ddl(database, tmp_path, "0008") == _golden(database, "0008")


def test_revision_0009_is_expand_only() -> None:
    """The append that commits itself: code of earlier revisions keeps appending
    correctly beside it (it adds a routine and changes no table)."""
    assert _keeps_compatible_from("0009")


async def test_revision_0009_ddl_is_as_recorded(database: Database, tmp_path: Path) -> None:
    """The append that commits itself: ``CREATE PROCEDURE`` under a strict ``sql_mode``
    on MySQL, nothing elsewhere."""
    assert await _upgrade_ddl(database, tmp_path, "0009") == _golden(database, "0009")


def test_revision_0010_is_expand_only() -> None:
    """The append that commits itself, its row first: a procedure of its own name, so
    code of earlier revisions keeps calling revision 0009's (it changes no table)."""
    assert _keeps_compatible_from("0010")


async def test_revision_0010_ddl_is_as_recorded(database: Database, tmp_path: Path) -> None:
    """The append that commits itself, its row first: ``CREATE PROCEDURE`` under a
    strict ``sql_mode`` on MySQL, nothing elsewhere."""
    assert await _upgrade_ddl(database, tmp_path, "0010") == _golden(database, "0010")


def test_revision_0011_is_expand_only() -> None:
    """LangGraph's tables only add tables: earlier code keeps running on them."""
    assert _keeps_compatible_from("0011")


async def test_revision_0011_ddl_is_as_recorded(database: Database, tmp_path: Path) -> None:
    """LangGraph's tables: four ``CREATE TABLE`` and two indexes, on every backend."""
    assert await _upgrade_ddl(database, tmp_path, "0011") == _golden(database, "0011")
