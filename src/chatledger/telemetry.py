"""OpenTelemetry spans and metrics of the ledger's operations (the ``otel`` extra).

Each operation of a store -- the zett storage's ``append``, ``load``, ``snapshot``,
``delete_session`` and ``list_sessions``, the rein store's ``save``, ``load``,
``delete`` and ``list_sessions`` -- is one span, ``chatledger.<framework>.<operation>``
(kind ``INTERNAL``), and one measurement of the histogram
``chatledger.operation.duration`` (seconds). Inside it, each retry of a transient
failure and each settle (the lookup of a write whose COMMIT answer was lost) is an
event on the span and a count (``chatledger.retries``, ``chatledger.settles``), and a
write whose outcome stays unknown counts in ``chatledger.outcomes.unknown``.

Attributes (OpenTelemetry's semantic-convention names where there is one):

* ``gen_ai.conversation.id``: the session id (gen_ai conventions);
* ``db.system.name`` (and the older ``db.system``): the backend, from
  :attr:`chatledger.dialects.Backend.db_system`; ``db.namespace``: the database;
  ``server.address`` / ``server.port``; ``db.operation.name``: the operation;
  ``db.response.status_code``: a retried failure's code; ``db.response.returned_rows``;
  ``error.type``: the class of the error that ended an operation;
* ``chatledger.framework`` (``zett``, ``rein``); ``chatledger.sequence.first`` /
  ``.last``: the raw-log sequences written or read; ``chatledger.generation.base_sequence``:
  the last sequence of the id's earlier generations (0 in its first), where the
  operation reads it; ``chatledger.checkpoint.version``; ``chatledger.version`` (rein).

No message content, title, agent name or error message is ever recorded: error
messages may quote stored values, so an error is recorded by its class only.

Spans and metrics go to the *global* providers (``trace.get_tracer_provider()``,
``metrics.get_meter_provider()``), as OpenTelemetry's instrumentation libraries do:
an application's own set-up picks them up, and without one they are OpenTelemetry's
no-ops. The tracer and instruments are taken once, on first use, from the global providers:
OpenTelemetry's proxies until the application sets its providers, which they then
follow (tests that replace the providers call :func:`reset`).

Without ``opentelemetry-api`` installed, :func:`operation` is a function returning
one shared do-nothing context manager, and the hooks are empty functions: the choice
is made once, at import.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final, Protocol
from weakref import WeakKeyDictionary

from . import __version__

if TYPE_CHECKING:
    from sqlalchemy.engine import URL
    from sqlalchemy.ext.asyncio import AsyncEngine

    from .dialects import Backend


class Ledger(Protocol):
    """What telemetry reads of a ledger (:class:`chatledger.engine.Ledger`, or the
    :class:`chatledger.connections.Connections` its transactions run on): the
    database's name and the backend's ``db_system``."""

    @property
    def url(self) -> URL: ...
    @property
    def engine(self) -> AsyncEngine: ...
    @property
    def backend(self) -> Backend: ...


#: An attribute's value, as OpenTelemetry takes them.
AttributeValue = str | bool | int | float

try:
    from opentelemetry import context as _context
    from opentelemetry import metrics as _metrics
    from opentelemetry import trace as _trace

    #: Whether opentelemetry-api is installed (decided once, here).
    ENABLED = True
except ImportError:  # the otel extra is not installed: every hook below is a no-op
    ENABLED = False

#: The instrumentation scope's name (the tracer's and the meter's).
SCOPE = "chatledger"
#: Bucket boundaries of the duration histogram, in seconds: OpenTelemetry's advice for
#: ``db.client.operation.duration``.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)


class Recorder(Protocol):
    """What an operation's code records on its span while it runs."""

    def sequences(self, first: int, last: int) -> None:
        """The raw-log sequences written or read, ``first..last`` inclusive (none: ``first > last``)."""

    def set(self, name: str, value: AttributeValue) -> None:
        """One more attribute (never message content)."""


class _NoRecorder:
    """The recorder, and the context manager, of the no-op path: one shared instance."""

    __slots__ = ()

    def __enter__(self) -> _NoRecorder:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def sequences(self, first: int, last: int) -> None:
        return None

    def set(self, name: str, value: AttributeValue) -> None:
        return None


_NOTHING: Final = _NoRecorder()


def _no_operation(
    ledger: Ledger, framework: str, name: str, session_id: str | None = None
) -> AbstractContextManager[Recorder]:
    return _NOTHING


def _no_retry(ledger: Ledger, code: str | int | None, attempt: int, wait: float) -> None:
    return None


def _no_settle(ledger: Ledger, found: bool) -> None:
    return None


def _no_unknown(ledger: Ledger) -> None:
    return None


# -- the OpenTelemetry path --------------------------------------------------------------


class _Instruments:
    """The tracer and instruments, from the global providers (OpenTelemetry's proxies
    until an application sets its own, which they then delegate to)."""

    def __init__(self) -> None:
        self.tracer = _trace.get_tracer(SCOPE, __version__)
        meter = _metrics.get_meter(SCOPE, __version__)
        self.duration = meter.create_histogram(
            "chatledger.operation.duration",
            unit="s",
            description="Duration of a chatledger store operation, its retries and settles included",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        )
        self.retries = meter.create_counter(
            "chatledger.retries",
            unit="{retry}",
            description="Transactions tried again after a transient failure",
        )
        self.settles = meter.create_counter(
            "chatledger.settles",
            unit="{settle}",
            description="Lookups of a write whose COMMIT answer was lost",
        )
        self.unknown = meter.create_counter(
            "chatledger.outcomes.unknown",
            unit="{write}",
            description="Writes whose outcome stayed unknown (OutcomeUnknown raised)",
        )


_current: _Instruments | None = None


def _instruments() -> _Instruments:
    global _current
    found = _current
    if found is None:
        found = _current = _Instruments()
    return found


def reset() -> None:
    """Forget the tracer and instruments, so that the next operation takes them from the
    global providers again: for tests that replace the global providers (which an
    application sets once; OpenTelemetry's proxies follow that one change by themselves)."""
    global _current
    _current = None


#: The attributes of each ledger's database, once its engine has connected.
_DATABASES: WeakKeyDictionary[Ledger, dict[str, AttributeValue]] = WeakKeyDictionary()


def _database(ledger: Ledger) -> dict[str, AttributeValue]:
    """``db.system.name`` and the rest naming the database; kept once the engine has
    connected (the backend object may only tell MariaDB from MySQL then)."""
    found = _DATABASES.get(ledger)
    if found is not None:
        return found
    dialect = ledger.engine.dialect
    system = ledger.backend.db_system(dialect)
    url = ledger.url
    found = {"db.system.name": system, "db.system": system}
    if url.database:
        found["db.namespace"] = url.database
    if url.host:
        found["server.address"] = url.host
    if url.port:
        found["server.port"] = url.port
    if dialect.server_version_info is not None:
        _DATABASES[ledger] = found
    return found


class _Recorder:
    __slots__ = ("span",)

    def __init__(self, span: Any) -> None:
        self.span = span

    def sequences(self, first: int, last: int) -> None:
        if first <= last:
            self.span.set_attribute("chatledger.sequence.first", first)
            self.span.set_attribute("chatledger.sequence.last", last)

    def set(self, name: str, value: AttributeValue) -> None:
        self.span.set_attribute(name, value)


class _Operation:
    """The span and duration measurement of one operation (see :data:`operation`)."""

    __slots__ = (
        "_attributes",
        "_framework",
        "_instruments",
        "_ledger",
        "_name",
        "_span",
        "_started",
        "_token",
    )

    def __init__(self, ledger: Ledger, framework: str, name: str, session_id: str | None = None) -> None:
        self._ledger = ledger
        self._framework = framework
        self._name = name
        attributes: dict[str, AttributeValue] = {"chatledger.framework": framework, "db.operation.name": name}
        if session_id is not None:
            attributes["gen_ai.conversation.id"] = session_id
        self._attributes = attributes

    def __enter__(self) -> Recorder:
        instruments = self._instruments = _instruments()
        span = self._span = instruments.tracer.start_span(
            f"chatledger.{self._framework}.{self._name}",
            kind=_trace.SpanKind.INTERNAL,
            attributes=self._attributes,
        )
        # The no-op tracer's span (no SDK) has no context to make current; a sampled-out
        # one has, so that what runs inside (SQL-level spans) is sampled out too.
        valid = span.get_span_context().is_valid
        self._token = _context.attach(_trace.set_span_in_context(span)) if valid else None
        self._started = time.perf_counter()
        return _Recorder(span) if span.is_recording() else _NOTHING

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        elapsed = time.perf_counter() - self._started
        span = self._span
        database = _database(self._ledger)
        measured: dict[str, AttributeValue] = {
            "chatledger.framework": self._framework,
            "db.operation.name": self._name,
            **database,
        }
        if exc_type is not None:
            # By class only (error.type), never the message: it may quote stored values.
            measured["error.type"] = exc_type.__qualname__
        try:
            if span.is_recording():
                if exc_type is not None:
                    span.set_attribute("error.type", exc_type.__qualname__)
                    span.set_status(_trace.StatusCode.ERROR)
                span.set_attributes(database)
            span.end()
        finally:
            if self._token is not None:
                _context.detach(self._token)
        self._instruments.duration.record(elapsed, measured)


def _metric_attributes(ledger: Ledger, extra: Mapping[str, AttributeValue]) -> dict[str, AttributeValue]:
    return {"db.system.name": _database(ledger)["db.system.name"], **extra}


def _retry(ledger: Ledger, code: str | int | None, attempt: int, wait: float) -> None:
    instruments = _instruments()
    event: dict[str, AttributeValue] = {"chatledger.attempt": attempt, "chatledger.retry.wait": wait}
    if code is not None:
        event["db.response.status_code"] = str(code)
    _trace.get_current_span().add_event("chatledger.retry", event)
    instruments.retries.add(1, _metric_attributes(ledger, {}))


def _settle(ledger: Ledger, found: bool) -> None:
    instruments = _instruments()
    _trace.get_current_span().add_event("chatledger.settle", {"chatledger.settle.found": found})
    instruments.settles.add(1, _metric_attributes(ledger, {"chatledger.settle.found": found}))


def _unknown(ledger: Ledger) -> None:
    instruments = _instruments()
    _trace.get_current_span().add_event("chatledger.outcome_unknown")
    instruments.unknown.add(1, _metric_attributes(ledger, {}))


#: A span and a duration measurement around one store operation:
#: ``with telemetry.operation(ledger, "zett", "append", session_id) as span: ...``;
#: ``span.sequences(first, last)`` and ``span.set(name, value)`` add attributes. An
#: exception leaving the block sets ``error.type`` (its class) and the span's status.
operation: Callable[..., AbstractContextManager[Recorder]]
#: Inside an operation: a retry of a transient failure (``code``: the driver's), the
#: attempt that failed and the wait before the next, in seconds.
retry: Callable[[Ledger, str | int | None, int, float], None]
#: Inside an operation: a settle ran; ``found``: it found the write committed.
settle: Callable[[Ledger, bool], None]
#: Inside an operation: a write's outcome stays unknown (``OutcomeUnknown`` raised).
unknown: Callable[[Ledger], None]
if ENABLED:
    operation, retry, settle, unknown = _Operation, _retry, _settle, _unknown
else:
    operation, retry, settle, unknown = _no_operation, _no_retry, _no_settle, _no_unknown
