"""What an interrupted command says: ``chatledger: interrupted``, and, for a command
that registered a note (:func:`noting`), what it had committed and how to go on."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

# The note of the command interrupted, taken as the interrupt unwound it.
_said: list[str] = []


@contextmanager
def noting(describe: Callable[[], str]) -> Iterator[None]:
    """Inside: an interrupt (Ctrl-C cancels the command's task) records ``describe()``,
    which :func:`message` adds."""
    try:
        yield
    except BaseException as error:
        if not isinstance(error, Exception):  # KeyboardInterrupt, CancelledError
            _said.append(describe())
        raise


def message() -> str:
    """The line an interrupted ``chatledger`` prints on stderr."""
    said = "; ".join(_said)
    _said.clear()
    return f"chatledger: interrupted; {said}" if said else "chatledger: interrupted"
