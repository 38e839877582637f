"""A ledger's schema check: the database's revision read once, before the first call,
and upgraded first under ``auto_upgrade``; and the server's statement size limit.

The check runs its reads through the ledger's transactions (retried like any call)
with the check itself skipped (``ready=False``); a call that later finds a table or
column missing marks the check stale (:attr:`Readiness.ready`), so the next call
checks again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from . import adoption, dialects, migrate
from .dsn import as_argument, display
from .errors import AUTO_UPGRADE_HINT, DatabaseError, SchemaNotReady, StorageUnavailable
from .options import LedgerOptions

if TYPE_CHECKING:
    from .connections import Connections
    from .transactions import Transactions

logger = logging.getLogger("chatledger")


class Readiness:
    """Whether one ledger's database is at a revision this chatledger runs on.

    Args:
        connections: The ledger's engine, its URL and backend.
        options: The ledger's options (``auto_upgrade``, ``pgbouncer``, ``connect_args``).
    """

    def __init__(self, connections: Connections, options: LedgerOptions) -> None:
        self.connections = connections
        self.options = options
        self.url = connections.url
        self.backend = connections.backend
        self.foreign = connections.foreign
        self.auto_upgrade = (
            self.options.auto_upgrade if self.options.auto_upgrade is not None else not self.backend.server
        )
        #: Whether the check passed; cleared when a call finds a table or column missing.
        self.ready = False
        #: Largest statement the server accepts, in bytes; read from the server (MySQL's
        #: ``max_allowed_packet``) by :meth:`ensure_ready`.
        self.statement_limit = self.backend.statement_limit
        #: The append this ledger runs: the backend's one-statement append once the check
        #: found the routine it needs (SQLite: the counter trigger; MySQL: the append
        #: procedure, which the login may call), else the counter upsert's.
        self.append_message = self.backend.append_message
        #: The append as one statement committed by itself
        #: (:attr:`chatledger.dialects.Backend.single_append`), once the check found the
        #: routine it needs (MySQL: the committed append procedure); ``None``: every
        #: append is a transaction.
        self.single_append = self.backend.single_append if self.backend.single_append_usable is None else None
        #: Set once a call found the routine refused (:class:`dialects.RoutineRefused`):
        #: the check asks no more, and the ledger keeps the counter upsert's append.
        self.routine_refused = False

    def refuse_routine(self, error: DBAPIError) -> None:
        """The append's routine was refused (:class:`dialects.RoutineRefused`): append
        with the backend's statements from now on. Logged once."""
        if not self.routine_refused:
            logger.warning(
                "%s: the append routine was refused; appends take the longer form from now on (%s)",
                display(self.url),
                error.orig,
            )
        self.routine_refused = True
        self.append_message = self.backend.append_message
        self.single_append = None

    async def ensure_ready(self, transactions: Transactions) -> None:
        """See :meth:`chatledger.engine.Ledger.ensure_ready`; reads through ``transactions``."""
        if self.ready:
            return
        async with self.connections.loop_lock():
            if self.ready:
                return
            if self.foreign:
                await transactions.run(
                    lambda conn: conn.run_sync(self.backend.check_foreign),
                    options=dialects.FOREIGN_CHECK_OPTIONS,
                    ready=False,
                )
            state, hint = await self._read_state(transactions)
            standing = migrate.standing(state)
            # A revision still in alembic_version moves to chatledger's own table on upgrade.
            # zett-agent's tables or a half-applied revision (hint) are left for the upgrade
            # to refuse under the schema lock: read without it, another process's upgrade
            # half done on MySQL (DDL commits statement by statement) looks half-applied.
            if self.auto_upgrade and (standing is migrate.Standing.BEHIND or state.legacy):
                connect_args = dict(self.options.connect_args)
                if self.options.pgbouncer:
                    connect_args.update(self.backend.pgbouncer_connect_args())
                try:
                    state = await migrate.upgrade_schema(self.url, connect_args=connect_args)
                except (DatabaseError, StorageUnavailable, SQLAlchemyError, OSError) as error:
                    cause = getattr(error, "orig", None) or error
                    if standing is migrate.Standing.BEHIND:
                        raise SchemaNotReady(
                            f"auto_upgrade of database {display(self.url)} from revision "
                            f"{state.revision or '<none>'} to {migrate.head_revision()} failed: {cause}; "
                            "upgrade it as the schema owner "
                            f"(`chatledger upgrade --dsn {as_argument(self.url)}`)"
                        ) from error
                    # Usable as it is; only the bookkeeping stays where it was.
                    logger.warning("could not move the revision of %s: %s", display(self.url), cause)
                standing = migrate.standing(state)
            if standing is migrate.Standing.AHEAD_COMPATIBLE:
                logger.info("%s", migrate.describe(self.url, state))
            elif standing is not migrate.Standing.AT_HEAD:
                # zett-agent's tables: adopt them; auto_upgrade would be refused.
                extra = AUTO_UPGRADE_HINT if standing is migrate.Standing.BEHIND and hint is None else ""
                raise SchemaNotReady(migrate.describe(self.url, state, remedy=hint) + extra)
            query = self.backend.statement_limit_query
            if query is not None:
                limit = await transactions.run(lambda conn: conn.scalar(text(query)), ready=False)
                self.statement_limit = int(limit)
            check, counted = self.backend.append_routine_usable, self.backend.counted_append
            if check is not None and counted is not None and not self.routine_refused:
                usable = await transactions.run(lambda conn: self._routine_usable(conn, check), ready=False)
                # A refusal met while the check awaited its answer stands.
                usable = usable and not self.routine_refused
                self.append_message = counted if usable else self.backend.append_message
            single_check, single = self.backend.single_append_usable, self.backend.single_append
            if single_check is not None and single is not None and not self.routine_refused:
                usable = await transactions.run(
                    lambda conn: self._routine_usable(conn, single_check), ready=False
                )
                self.single_append = single if usable and not self.routine_refused else None
            level_query = self.backend.write_isolation_query
            if level_query is not None:
                # On a write's connection, to read the writers' isolation; it writes
                # nothing, so a lost COMMIT of it is retried as a read's is.
                level = await transactions.run(
                    lambda conn: conn.scalar(text(level_query)), write=True, probe=True, ready=False
                )
                instead = self.backend.write_isolation_instead.get(str(level).lower())
                if instead is not None:
                    self.connections.write_at(instead)
            self.ready = True

    async def _routine_usable(self, conn: AsyncConnection, check: dialects.RoutineCheck) -> bool:
        """:attr:`Backend.append_routine_usable`'s answer. A refusal says the routine is
        missing or not the login's to call: the append keeps its statements (logged once
        per check). A transient failure or a lost connection is raised, and the check
        retried."""
        try:
            return await check(conn)
        except DBAPIError as error:
            if dialects.classify(self.backend, error) in (
                dialects.Failure.TRANSIENT,
                dialects.Failure.CONNECTION,
            ):
                raise
            logger.info(
                "%s: an append routine is not usable by this login, so appends take the longer form "
                "(%s); on MySQL/MariaDB, GRANT EXECUTE on the database (or on the routine named) "
                "to the login for the shorter "
                '(docs/deploying.md, "Two roles: owner and runtime")',
                display(self.url),
                error.orig,
            )
            return False

    async def _read_state(self, transactions: Transactions) -> tuple[migrate.SchemaState, str | None]:
        """The schema state, and for a database without a chatledger revision the advice
        to adopt zett-agent's tables it may hold (:func:`chatledger.adoption.state_and_hint`).
        Read once more when a table vanished between the listing of the tables and the
        read: an upgrade moving the revision to chatledger's own table dropped
        ``alembic_version`` meanwhile."""
        for attempt in range(2):
            try:
                return await transactions.run(
                    lambda conn: conn.run_sync(adoption.state_and_hint), ready=False
                )
            except SchemaNotReady as error:
                missing = error.__cause__
                if not isinstance(missing, DBAPIError) or not dialects.missing_table(self.backend, missing):
                    raise
                if attempt:
                    raise SchemaNotReady(
                        f"the revision of database {display(self.url)} could not be read: a table "
                        "vanished while it was read, twice (a migration under way?); try again once "
                        f"the upgrade is done. The server said: {missing.orig}"
                    ) from missing
        raise AssertionError("unreachable")
