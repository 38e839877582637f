"""A driver's own failure, raised by its client library with no error code, against
the server's coded errors of the same class: psycopg's ``OperationalError`` of a reply
libpq could not read is a lost connection (retried or settled, never "nothing was
written"), while one the server sent keeps its code's meaning."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy.exc import DBAPIError

from chatledger import dialects
from chatledger.dialects.base import Failure, classify


def _wrapped(orig: Exception) -> DBAPIError:
    return DBAPIError("COMMIT", None, orig, connection_invalidated=False)


def test_an_uncoded_psycopg_operational_error_is_a_lost_connection() -> None:
    backend = dialects.backend("postgresql", "psycopg")
    lost = psycopg.OperationalError("consuming input failed: server closed the connection unexpectedly")
    assert classify(backend, _wrapped(lost)) is Failure.CONNECTION


@pytest.mark.parametrize("error", [psycopg.errors.DiskFull, psycopg.errors.QueryCanceled])
def test_a_coded_one_keeps_its_code(error: type[psycopg.Error]) -> None:
    backend = dialects.backend("postgresql", "psycopg")
    assert classify(backend, _wrapped(error("from the server"))) is not Failure.CONNECTION
