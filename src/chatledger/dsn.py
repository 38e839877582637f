"""DSN resolution: which database a store opens, and which async driver it uses.

Rule: the ``dsn`` argument, else the
``CHATLEDGER_DSN`` environment variable, else the embedded default, a SQLite file
at :func:`default_sqlite_path`. Plain scheme names map to the default async drivers:

=====================================  ===========================
given                                  opened with
=====================================  ===========================
``postgresql://``, ``postgres://``     ``postgresql+asyncpg://``
``postgresql+psycopg://``              psycopg 3, async
``mysql://``, ``mariadb://``           ``mysql+aiomysql://`` (utf8mb4)
``sqlite:///path``                     ``sqlite+aiosqlite:///path``
=====================================  ===========================

Synchronous drivers (``psycopg2``, ``pymysql``, ``pysqlite``...) are refused, naming
the async ones.

A PostgreSQL DSN may name several servers, as libpq's multi-host URLs do:
``postgresql://user@h1:5432,h2:5432,h3:5432/db?target_session_attrs=read-write``
connects to the first of them that accepts a read-write session (the primary of a
cluster), for asyncpg and psycopg alike. It is rewritten to SQLAlchemy's repeated
``host=`` form (``postgresql://user@/db?host=h1:5432&host=h2:5432&...``), which may be
given directly too; a host without a port gets 5432. MySQL/MariaDB DSNs name one host.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from types import ModuleType

from platformdirs import user_data_path
from sqlalchemy.engine import URL, make_url

#: Environment variable naming the DSN when none is passed.
DSN_ENV = "CHATLEDGER_DSN"

#: The password as SQLAlchemy's ``make_url`` splits it off: from the first ``:`` of the
#: user info to the first ``@``; what follows is taken for the host and the rest.
_USERINFO = re.compile(r"^[\w+]+://[^:/]*:(?P<password>[^@]*)@(?P<rest>.*)$", re.DOTALL)
#: A DSN that is a file path, not a URL.
_PATH_LIKE = re.compile(r"^(?:[./~\\]|[A-Za-z]:[\\/])|\.(?:db|db3|sqlite|sqlite3)$", re.IGNORECASE)

#: A URL whose address lists several ``host[:port]``, comma-separated (libpq's
#: multi-host form), rewritten to SQLAlchemy's repeated ``host=`` parameters; the
#: backend's ``resolve_dsn`` then checks them, or refuses several hosts.
_MULTIHOST = re.compile(
    r"^(?P<scheme>[\w+]+)://(?P<userinfo>[^@/?#]*@)?"
    r"(?P<hosts>[^/?#@]*,[^/?#@]*)(?P<path>/[^?#]*)?(?:\?(?P<query>[^#]*))?$"
)
_PERCENT_ENCODE = (
    "percent-encode the password in the DSN (urllib.parse.quote(password, safe=''): '@' is %40, '#' is %23)"
)


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
    asyncpg's ``ssl`` (psycopg takes it as it is).

    No error message carries any part of the password: a DSN SQLAlchemy would split
    inside the password is refused before it is parsed.

    Raises:
        ValueError: the scheme is not PostgreSQL, MySQL/MariaDB or SQLite, or names a
            driver other than asyncpg or psycopg, aiomysql, aiosqlite (a synchronous
            one, say); the password holds an ``@`` or ``#`` that is not
            percent-encoded; a server DSN names no database; the port is not
            1..65535; the SQLite database is in memory (it could not be shared) or
            given as a bare file path (the message gives the ``sqlite:///`` URL); a
            MySQL ``charset`` other than utf8mb4.
        TypeError: ``dsn`` is neither a string nor a URL.
    """
    if dsn is None:
        dsn = os.environ.get(DSN_ENV) or None
    if dsn is None:
        return URL.create("sqlite+aiosqlite", database=str(default_sqlite_path()))
    if not isinstance(dsn, str | URL):
        raise TypeError(f"dsn must be a string or sqlalchemy URL, not {type(dsn).__name__}")
    url = _parse(dsn) if isinstance(dsn, str) else dsn
    scheme, _, driver = url.drivername.partition("+")
    served = _dialects().registered()
    known = [backend for backend in served if scheme in backend.schemes]
    if not known:
        schemes = list(dict.fromkeys(name for backend in served for name in backend.schemes))
        choices = f"{', '.join(schemes[:-1])} or {schemes[-1]}"
        raise ValueError(f"dsn scheme {scheme!r} is not supported; use {choices}")
    dialect = known[0].name
    driver = next((backend.driver for backend in known if driver in backend.driver_aliases), driver)
    chosen = next((backend for backend in known if backend.driver == (driver or known[0].driver)), None)
    if chosen is None:
        choices = " or ".join(f"{dialect}+{backend.driver}://" for backend in known)
        raise ValueError(
            f"dsn driver {driver!r} is not supported: chatledger needs an async driver; use {choices}"
        )
    url = url.set(drivername=f"{dialect}+{chosen.driver}")
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
    resolved: URL = chosen.resolve_dsn(url)
    return resolved


def _parse(dsn: str) -> URL:
    """``make_url``, after refusing what it would misread; no error names the DSN."""
    userinfo = _USERINFO.match(dsn)
    if userinfo is not None:
        address, _, query = userinfo["rest"].partition("?")
        # The password ran on past an "@" (the host or a query name got the rest of
        # it), or holds a "#" that URL parsers other than SQLAlchemy's cut at.
        if (
            "@" in address
            or any("@" in part.partition("=")[0] for part in query.split("&"))
            or "#" in userinfo["password"]
        ):
            raise ValueError(
                f"dsn: the password has an '@' or '#' that is not percent-encoded; {_PERCENT_ENCODE}"
            )
    if "://" not in dsn:
        if "@" not in dsn and _PATH_LIKE.search(dsn.strip()):
            raise ValueError(
                f"dsn {dsn!r} is a file path, not a URL; for a SQLite file use sqlite:///{dsn.strip()}"
            )
        raise ValueError("dsn is not a valid database URL (scheme://...), e.g. postgresql://user@host/db")
    multihost = _MULTIHOST.match(dsn.strip())
    if multihost is not None:
        dsn = _repeated_hosts(multihost)
    try:
        return make_url(dsn)
    except Exception:  # sqlalchemy raises ArgumentError with the DSN inside
        raise ValueError("dsn is not a valid database URL") from None


def _repeated_hosts(multihost: re.Match[str]) -> str:
    """``scheme://user@h1:p1,h2:p2/db?query`` as ``scheme://user@/db?host=h1:p1&host=h2:p2&query``
    (SQLAlchemy's multi-host form for asyncpg and psycopg)."""
    query = multihost["query"] or ""
    if any(part.partition("=")[0] == "host" for part in query.split("&")):
        raise ValueError("dsn lists hosts both in its address and as host= parameters; use one of the two")
    hosts = "&".join(f"host={host.strip()}" for host in multihost["hosts"].split(","))
    rest = f"{hosts}&{query}" if query else hosts
    return f"{multihost['scheme']}://{multihost['userinfo'] or ''}{multihost['path'] or '/'}?{rest}"


def sqlite_file(url: URL) -> Path | None:
    """The SQLite file a URL names, or ``None`` for a server database or ``:memory:``."""
    try:
        server = _dialects().backend(url.get_backend_name()).server
    except ValueError:
        return None
    if server or url.database in (None, "", ":memory:"):
        return None
    return Path(url.database).expanduser()


def _dialects() -> ModuleType:
    """:mod:`chatledger.dialects`, which knows the backends' schemes and drivers; imported
    on first use, as it imports this module (:func:`display`, :func:`as_argument`)."""
    from . import dialects

    return dialects


def display(url: URL) -> str:
    """The URL with its password masked, for ``repr``, logs and CLI output."""
    return url.render_as_string(hide_password=True)


def as_argument(url: URL) -> str:
    """The URL as the ``--dsn`` argument of a command that advice names (``chatledger
    upgrade --dsn …``): its password masked, as :func:`display` does, and quoted for a
    POSIX shell where it needs quoting (``***``, ``?``)."""
    return shlex.quote(display(url))
