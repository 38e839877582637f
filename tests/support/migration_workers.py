"""Worker processes of the concurrent-upgrade tests (importable by spawn)."""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import uuid
from contextlib import redirect_stderr
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier

from alembic import command
from alembic.config import Config
from rich.console import Console
from zett_agent.messages import UserMessage

from chatledger import migrate
from chatledger.tools import cli
from chatledger.zett import LedgerSessionStorage

#: What each worker does once the barrier lets them all go.
KINDS = ("auto_upgrade", "auto_upgrade behind pgbouncer", "chatledger upgrade", "alembic upgrade")


class UpgradeCounter(logging.Handler):
    """Counts the revisions Alembic runs in this process ("Running upgrade  -> 0001")."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.upgrades = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Running upgrade"):
            self.upgrades += 1

    @classmethod
    def install(cls) -> UpgradeCounter:
        counter = cls()
        log = logging.getLogger("alembic.runtime.migration")
        log.addHandler(counter)
        log.setLevel(logging.INFO)
        return counter


async def first_call(dsn: str, *, pgbouncer: bool = False) -> None:
    """A store's first call, which upgrades the schema (``auto_upgrade=True``)."""
    async with LedgerSessionStorage(dsn, auto_upgrade=True, pgbouncer=pgbouncer) as storage:
        session = f"s-{uuid.uuid4()}"
        assert await storage.append(session, "r", UserMessage(content="first")) == 1


def upgrade(kind: str, dsn: str) -> None:
    if kind == "auto_upgrade":
        asyncio.run(first_call(dsn))
    elif kind == "auto_upgrade behind pgbouncer":
        asyncio.run(first_call(dsn, pgbouncer=True))
    elif kind == "chatledger upgrade":
        errors = io.StringIO()
        with redirect_stderr(errors):
            status = asyncio.run(cli.run(["upgrade", "--dsn", dsn], Console(file=io.StringIO())))
        assert status == 0, errors.getvalue()
    elif kind == "alembic upgrade":
        # The alembic command line's path through env.py: it opens the database itself.
        config = Config(cmd_opts=argparse.Namespace(x=[f"dsn={dsn}"]))
        config.set_main_option("script_location", str(migrate.script_location()))
        command.upgrade(config, "head")
    else:
        raise ValueError(kind)


def upgrade_at_once(kind: str, dsn: str, barrier: Barrier, results: Queue[tuple[str, str, int]]) -> None:
    """Wait for every worker at the barrier, upgrade through ``kind``, and report
    (kind, "ok" or the error, revisions this process ran)."""
    counter = UpgradeCounter.install()
    barrier.wait(timeout=180)
    try:
        upgrade(kind, dsn)
    except BaseException as error:
        results.put((kind, f"{type(error).__name__}: {error}", counter.upgrades))
    else:
        results.put((kind, "ok", counter.upgrades))
