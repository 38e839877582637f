"""DSN resolution: which database a store opens, and which async driver it uses.

Rule: the ``dsn`` argument, else the
``CHATLEDGER_DSN`` environment variable, else the embedded default, a SQLite file
at :func:`default_sqlite_path`. Plain scheme names map to the async drivers:

=====================================  ===========================
given                                  opened with
=====================================  ===========================
``postgresql://``, ``postgres://``     ``postgresql+asyncpg://``
``mysql://``, ``mariadb://``           ``mysql+aiomysql://`` (utf8mb4)
``sqlite:///path``                     ``sqlite+aiosqlite:///path``
=====================================  ===========================
"""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_data_path
from sqlalchemy.engine import URL, make_url

#: Environment variable naming the DSN when none is passed.
DSN_ENV = "CHATLEDGER_DSN"

#: Scheme (backend name) -> the async driver chatledger opens it with.
_ASYNC_DRIVERS = {
    "postgresql": ("postgresql", "asyncpg"),
    "postgres": ("postgresql", "asyncpg"),
    "mysql": ("mysql", "aiomysql"),
    "mariadb": ("mysql", "aiomysql"),
    "sqlite": ("sqlite", "aiosqlite"),
}


def default_sqlite_path() -> Path:
    """The embedded default database: ``chatledger.sqlite3`` in the per-user data
    directory (``~/.local/share/chatledger`` on Linux, per ``platformdirs``)."""
    return user_data_path("chatledger", appauthor=False) / "chatledger.sqlite3"


def resolve_dsn(dsn: str | URL | None = None) -> URL:
    """Return the async SQLAlchemy URL a store opens.

    Args:
        dsn: A DSN such as ``postgresql://user:pw@host/db``; ``None`` falls back to
            ``CHATLEDGER_DSN``, then to the embedded SQLite default.

    Also: a ``password`` query parameter moves into the URL's password (so it is
    masked); ``~`` in a SQLite path is expanded; PostgreSQL's ``sslmode`` becomes
    asyncpg's ``ssl``.

    Raises:
        ValueError: the scheme is not PostgreSQL, MySQL/MariaDB or SQLite, or names a
            driver other than asyncpg, aiomysql or aiosqlite; the port is not 1..65535;
            the SQLite database is in memory (it could not be shared); a MySQL
            ``charset`` other than utf8mb4.
        TypeError: ``dsn`` is neither a string nor a URL.
    """
    if dsn is None:
        dsn = os.environ.get(DSN_ENV) or None
    if dsn is None:
        return URL.create("sqlite+aiosqlite", database=str(default_sqlite_path()))
    if not isinstance(dsn, str | URL):
        raise TypeError(f"dsn must be a string or sqlalchemy URL, not {type(dsn).__name__}")
    try:
        url = make_url(dsn) if isinstance(dsn, str) else dsn
    except Exception as error:  # sqlalchemy raises ArgumentError with the DSN inside
        raise ValueError("dsn is not a valid database URL") from error
    backend, _, driver = url.drivername.partition("+")
    if backend not in _ASYNC_DRIVERS:
        raise ValueError(f"dsn scheme {backend!r} is not supported; use postgresql, mysql, mariadb or sqlite")
    backend, async_driver = _ASYNC_DRIVERS[backend]
    if driver and driver != async_driver:
        raise ValueError(f"dsn driver {driver!r} is not supported; use {backend}+{async_driver}")
    url = url.set(drivername=f"{backend}+{async_driver}")
    try:
        port = url.port
    except ValueError:
        raise ValueError("dsn port is not a number") from None
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"dsn port {port} is outside 1..65535")
    # A password given as a query parameter belongs where display() masks it.
    for key in ("password", "passwd"):
        if key in url.query:
            value = url.query[key]
            password = value if isinstance(value, str) else value[-1]
            url = url.set(password=password).difference_update_query([key])
    return _DSN_RULES[backend](url)


def _sqlite(url: URL) -> URL:
    database = url.database
    if database in (None, "", ":memory:") or str(database).startswith("file::memory:"):
        # Every pooled connection would be a database of its own, or (with the one
        # static connection SQLAlchemy gives it) concurrent calls would share one
        # transaction; neither keeps what a shared store acknowledges.
        raise ValueError("dsn names an in-memory SQLite database; give a file: sqlite:///path/to/file.db")
    return url.set(database=str(Path(database).expanduser()))


def _mysql(url: URL) -> URL:
    charset = url.query.get("charset", "utf8mb4")
    if charset != "utf8mb4":
        # Any other connection charset mangles ids (stored as bytes) and refuses emoji.
        raise ValueError(f"dsn charset {charset!r} is not supported; chatledger talks utf8mb4 to MySQL")
    return url.update_query_dict({"charset": "utf8mb4"})


def _postgresql(url: URL) -> URL:
    # libpq's sslmode, as users write it, is asyncpg's ``ssl`` keyword (same values).
    if "sslmode" in url.query:
        url = url.update_query_dict({"ssl": url.query["sslmode"]}).difference_update_query(["sslmode"])
    return url


_DSN_RULES = {"sqlite": _sqlite, "mysql": _mysql, "postgresql": _postgresql}


def sqlite_file(url: URL) -> Path | None:
    """The SQLite file a URL names, or ``None`` for a server database or ``:memory:``."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database).expanduser()


def display(url: URL) -> str:
    """The URL with its password masked, for ``repr``, logs and CLI output."""
    return url.render_as_string(hide_password=True)
