"""The per-framework object, :class:`SessionKind`, its registry, and the protocol of the
operations each adapter implements (:class:`Operations`).

A kind of session is one framework's sessions in the schema. What the core and the
tools must know of it without its framework installed is data, here: its name, label,
extra, tables, tombstones (and so its mark store), the records it travels as in an
export, and the figures ``chatledger stats`` reports of it. What needs the
framework's own types (listing, showing, finding, deleting and purging its sessions,
reading its framework's own tables to move in) is its adapter's, behind
:class:`Operations`, in the module ``<adapter package>.kind``, imported only when a
tool first needs it (:func:`operations`): the command line's parser and the library
load no framework.

Nothing outside the adapters and this registry compares a kind's name
(``tests/unit/test_kind_registry.py`` checks): code asks the kind object.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from types import TracebackType
from typing import Any, Protocol, cast

from sqlalchemy import ColumnElement, Table, inspect
from sqlalchemy.engine import URL, Connection
from sqlalchemy.ext.asyncio import AsyncConnection

from ..selection import Progress, Selection
from ..tombstones import Tombstones
from .records import Layout

#: A session's scope beyond its id, by column (ADK's ``app_name``, ``user_id``); empty:
#: every scope.
Scope = Mapping[str, str]

#: What ``--kind`` takes to mean every registered kind.
ALL = "all"


@dataclass(frozen=True)
class Counter:
    """One figure ``chatledger stats`` reports of a kind, beside its live sessions and
    tombstones: summed over its live sessions (``per_session``, an expression of its
    sessions table, read from the counter rows), or the rows of a table counted (on
    the primary key; only ``where`` they match)."""

    name: str
    per_session: ColumnElement[Any] | None = None
    rows: Table | None = None
    where: ColumnElement[bool] | None = None


@dataclass(frozen=True)
class Ranking:
    """How ``chatledger stats`` ranks a kind's largest live sessions: ``size``, an
    expression of its sessions table, and what it counts, in words."""

    size: ColumnElement[Any]
    unit: str


@dataclass(frozen=True)
class SourceOption:
    """An option of an import from a framework's own tables (``--messages-table``)."""

    flag: str
    default: str
    help: str

    @property
    def name(self) -> str:
        """The option's name as the kind's :meth:`Operations.source` gets it."""
        return self.flag.removeprefix("--").replace("-", "_")


@dataclass(frozen=True)
class Beside:
    """A framework's own tables as its own tools create them in whatever database they
    are given, chatledger's included: ``check`` notices them there, and the import reads
    them from that same database.

    ``tables``: each table and the columns the import reads (all of them present, with
    those columns, is the framework's schema: an application's own table of one of
    those names alone is not); ``what``: the tables, in words; ``then``: what to give
    the framework's tools instead, once the sessions are moved in.
    """

    tables: Mapping[str, frozenset[str]]
    what: str
    then: str


@dataclass(frozen=True)
class MoveIn:
    """An import from a framework's own tables (``chatledger import --openai-sdk DSN``):
    the flag naming the source, its help, its options, and what the source rows it
    skips are, in words (``source row``, ``not JSON (or not an item), skipped``).

    ``beside``: the framework's tables can stand beside chatledger's in one database
    (their names differ from chatledger's), so the source may be the target itself.
    """

    flag: str
    help: str
    skipped: tuple[str, str]
    options: tuple[SourceOption, ...] = ()
    beside: Beside | None = None

    @property
    def name(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


@dataclass(frozen=True)
class SessionKind:
    """One framework's sessions in the schema, as data.

    Every field but the names has a placeholder a new kind is listed as lacking
    (:meth:`lacking`): a kind registered with its names alone is a complete checklist.
    """

    #: What ``--kind`` and the reports call it: ``zett``, ``openai``.
    name: str
    #: How the import and export reports name the framework: "OpenAI Agents".
    label: str
    #: The framework's distribution (what pip installs) and chatledger's extra that
    #: installs it: ``openai-agents``, ``openai-agents``.
    distribution: str
    extra: str
    #: The adapter package; its operations are in ``<package>.kind``.
    package: str
    #: Its tables, as the schema defines them (chatledger.schema).
    tables: tuple[Table, ...] = ()
    #: Which rows are its tombstones, and its mark store.
    tombstones: Tombstones | None = None
    #: Its records in an export, in the order they travel.
    records: tuple[Layout, ...] = ()
    #: What ``chatledger stats`` counts besides its sessions and tombstones.
    counters: tuple[Counter, ...] = ()
    #: How ``chatledger stats`` ranks its largest sessions (``None``: it lists none).
    largest: Ranking | None = None
    #: What one entry of a session is called (``message``, ``item``); ``None``: its
    #: sessions hold nothing counted apart.
    entry: str | None = None
    #: The key columns besides the id that narrow its sessions (``--app``, ``--user``).
    scopes: tuple[str, ...] = ()
    #: Whether ``chatledger retention`` handles it unless told otherwise.
    retained_by_default: bool = False
    #: Whether an export file may lack its tables: a file written before its records
    #: travelled lists none (the first kinds' tables are in every file).
    optional_in_export: bool = True
    #: An import from the framework's own tables, if it has one.
    moves_in: MoveIn | None = None

    @property
    def mark_store(self) -> int | None:
        """The store its ids' high-water marks are kept under (:mod:`chatledger.marks`)."""
        return None if self.tombstones is None else self.tombstones.store

    def tombstone_rows(self) -> Tombstones:
        """Which rows are its tombstones.

        Raises:
            LookupError: the kind states none yet (:meth:`lacking` lists it).
        """
        if self.tombstones is None:
            raise LookupError(f"the session kind {self.name!r} states no tombstones")
        return self.tombstones

    @property
    def operations_module(self) -> str:
        return f"{self.package}.kind"

    def lacking(self) -> list[str]:
        """The data it does not give yet, by field name."""
        required = ("tables", "tombstones", "records", "counters")
        return [
            known.name for known in fields(self) if known.name in required and not getattr(self, known.name)
        ]


@dataclass(frozen=True)
class Found:
    """A stored session one of the kind's lookups found."""

    #: Its key: ``(id,)``, ADK's ``(app_name, user_id, id)``.
    key: tuple[str, ...]
    #: Its entries (messages, items, events), counted; ``None``: nothing to count.
    entries: int | None = None
    #: The rest of its key, in words: "of app 'shop', user 'ann'".
    where: str = ""

    @property
    def id(self) -> str:
        return self.key[-1]


@dataclass(frozen=True)
class Field:
    """One column of a listing: the key of its rows, its heading, right-aligned (a
    count), an ISO instant shown as a UTC time."""

    key: str
    heading: str
    right: bool = False
    when: bool = False


@dataclass(frozen=True)
class Listing:
    """The sessions a kind lists: a title, the columns, and JSON-ready rows."""

    title: str
    fields: tuple[Field, ...]
    rows: list[dict[str, Any]]


class Source(Protocol):
    """A framework's own tables, read to move in (:meth:`Operations.source`)."""

    #: Source rows skipped so far (unreadable, or never stored by the adapter).
    skipped: int

    def rows(self) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """Every row to import, as (record type, column values), in the kind's record
        order: a session's counter row with the counts of its entries, then its entries."""
        ...


class Operations(Protocol):
    """A kind's sessions in one database, as the tools handle them: the class the
    module ``<package>.kind`` exports as ``Operations``. Made with the database's URL
    and the ledger options, used as an async context manager (opening the adapter's
    store, closing it); every call goes through the adapter's own guarded operations.
    """

    def __init__(self, url: URL, options: Mapping[str, Any]) -> None: ...

    async def __aenter__(self) -> Operations: ...

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

    async def listing(self, limit: int) -> Listing:
        """Its ``limit`` sessions ``chatledger sessions list`` shows first."""
        ...

    async def show(self, session_id: str, *, messages: int, scope: Scope) -> list[list[str]]:
        """The lines showing each session with the id (in ``scope``), the last
        ``messages`` entries of each; empty: none."""
        ...

    async def find(self, session_id: str, scope: Scope) -> list[Found]:
        """The live sessions with the id (in ``scope``), their entries counted."""
        ...

    async def delete(self, found: Found) -> bool:
        """Delete a session :meth:`find` found; whether it was still there to delete."""
        ...

    async def purge(self, selection: Selection, scope: Scope, *, size: int, progress: Progress | None) -> int:
        """Delete the live sessions ``selection`` holds (in ``scope``), each in a
        transaction that checks the selection again; how many it deleted."""
        ...


class MovingIn(Protocol):
    """The class-level operation of a kind with :attr:`SessionKind.moves_in`."""

    @classmethod
    async def source(cls, conn: AsyncConnection, options: Mapping[str, str]) -> Source:
        """The framework's own tables on ``conn``, checked before anything is read
        (``ConfigurationError``: not the framework's; ``ValueError``: a session id
        chatledger does not store)."""
        ...


#: The names :func:`missing_operations` checks, in the protocol's order.
OPERATIONS = ("__aenter__", "__aexit__", "listing", "show", "find", "delete", "purge")


_REGISTRY: dict[str, SessionKind] = {}


def register(*kinds: SessionKind) -> None:
    """Add kinds to the registry, in the order the tools handle and report them.

    Raises:
        ValueError: a kind of that name is registered already, or its name is ``all``.
    """
    for kind in kinds:
        if kind.name in _REGISTRY or kind.name == ALL:
            raise ValueError(f"a session kind {kind.name!r} is registered already (or reserved)")
        _REGISTRY[kind.name] = kind


def registered() -> tuple[SessionKind, ...]:
    """Every registered kind, in registration order."""
    return tuple(_REGISTRY.values())


def names() -> tuple[str, ...]:
    """The registered kinds' names (``--kind``'s choices, :data:`ALL` aside)."""
    return tuple(_REGISTRY)


def lookup(name: str) -> SessionKind:
    """The kind named ``name``.

    Raises:
        KeyError: no kind of that name is registered.
    """
    return _REGISTRY[name]


def chosen(
    wanted: Iterable[str] | None, default: Iterable[SessionKind] | None = None
) -> tuple[SessionKind, ...]:
    """The kinds ``wanted`` names (:data:`ALL`: every one), each once, in registration
    order; none named (``None`` or empty): ``default`` (every kind unless given).

    Raises:
        ValueError: a name no kind has, naming the registered ones.
    """
    names_given = list(wanted or ())
    if not names_given:
        return tuple(registered() if default is None else default)
    unknown = [name for name in names_given if name != ALL and name not in _REGISTRY]
    if unknown:
        raise ValueError(f"kinds must name some of {', '.join(_REGISTRY)} (or {ALL}), not {unknown!r}")
    if ALL in names_given:
        return registered()
    return tuple(kind for kind in registered() if kind.name in names_given)


def operations(kind: SessionKind) -> type[Operations]:
    """The kind's :class:`Operations`, its adapter imported on first use.

    Raises:
        ImportError: the framework (the kind's extra) is not installed.
    """
    # The package first: a package made unimportable (``sys.modules[name] = None``, or
    # its framework missing) says so even when its kind module was imported before.
    importlib.import_module(kind.package)
    module = importlib.import_module(kind.operations_module)
    return cast("type[Operations]", module.Operations)


def installed(kind: SessionKind) -> bool:
    """Whether the kind's adapter can be imported (its framework is installed)."""
    try:
        operations(kind)
    except ImportError:
        return False
    return True


def missing_operations(kind: SessionKind) -> list[str]:
    """The operations the kind's module lacks: every one when it cannot be imported."""
    try:
        found: Any = operations(kind)
    except (ImportError, AttributeError):
        return [f"its operations module {kind.operations_module} (class Operations)"]
    wanted: Sequence[str] = (*OPERATIONS, "source") if kind.moves_in is not None else OPERATIONS
    return [f"operation {name}" for name in wanted if not callable(getattr(found, name, None))]


def missing_note(kind: SessionKind) -> str:
    """The note of a kind left out for its framework missing."""
    return (
        f"{kind.distribution} is not installed, so {kind.name} sessions are left out: "
        f"install chatledger with its [{kind.extra}] extra"
    )


def beside(connection: Connection) -> list[tuple[SessionKind, list[str]]]:
    """The registered kinds whose framework's own tables (:class:`Beside`) stand in the
    connection's default schema, each with those tables' names; reads the catalog only,
    never a table's rows."""
    inspector = inspect(connection)
    names = set(inspector.get_table_names())
    found: list[tuple[SessionKind, list[str]]] = []
    for kind in registered():
        own = kind.moves_in.beside if kind.moves_in is not None else None
        if own is None or not names >= set(own.tables):
            continue
        if all(
            {column["name"] for column in inspector.get_columns(name)} >= wanted
            for name, wanted in own.tables.items()
        ):
            found.append((kind, list(own.tables)))
    return found
