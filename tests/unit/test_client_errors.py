"""psycopg's own errors, raised by libpq with no SQLSTATE: one of a connection lost
under a statement is a lost connection (retried, or settled after a COMMIT, never
"nothing was written"); one of a statement libpq refuses to send keeps no code, and
the server's coded errors keep their code's meaning."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy.exc import DBAPIError

from chatledger import dialects
from chatledger.dialects.base import Failure, classify

LOST = (
    "consuming input failed: server closed the connection unexpectedly\n\tThis probably means "
    "the server terminated abnormally\n\tbefore or while processing the request.",
    "sending query failed: could not send data to server: Broken pipe",
    "consuming input failed: could not receive data from server: Connection reset by peer",
    "sending query and params failed: no connection to the server",
)


def _wrapped(orig: Exception) -> DBAPIError:
    return DBAPIError("COMMIT", None, orig, connection_invalidated=False)


@pytest.mark.parametrize("message", LOST)
def test_a_connection_libpq_lost_is_a_lost_connection(message: str) -> None:
    backend = dialects.backend("postgresql", "psycopg")
    assert classify(backend, _wrapped(psycopg.OperationalError(message))) is Failure.CONNECTION


def test_a_statement_libpq_refuses_to_send_is_not() -> None:
    backend = dialects.backend("postgresql", "psycopg")
    refused = psycopg.OperationalError(
        "sending query and params failed: number of parameters must be between 0 and 65535"
    )
    assert classify(backend, _wrapped(refused)) is Failure.OTHER


@pytest.mark.parametrize("error", [psycopg.errors.DiskFull, psycopg.errors.QueryCanceled])
def test_a_coded_one_keeps_its_code(error: type[psycopg.Error]) -> None:
    backend = dialects.backend("postgresql", "psycopg")
    assert classify(backend, _wrapped(error("from the server"))) is not Failure.CONNECTION
