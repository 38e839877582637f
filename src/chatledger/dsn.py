"""DSN resolution: which database a store opens, and which async driver it uses.

Rule (from the chatledger ledger issue): the ``dsn`` argument, else the
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

    Raises:
        ValueError: the scheme is not PostgreSQL, MySQL/MariaDB or SQLite, or names a
            driver other than asyncpg, aiomysql or aiosqlite.
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
        raise ValueError(
            f"dsn driver {driver!r} is not supported for {backend}; use {backend}+{async_driver}"
        )
    url = url.set(drivername=f"{backend}+{async_driver}")
    if backend == "mysql" and "charset" not in url.query:
        url = url.update_query_dict({"charset": "utf8mb4"})
    return url


def sqlite_file(url: URL) -> Path | None:
    """The SQLite file a URL names, or ``None`` for a server database or ``:memory:``."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database).expanduser()


def display(url: URL) -> str:
    """The URL with its password masked, for ``repr``, logs and CLI output."""
    return url.render_as_string(hide_password=True)
