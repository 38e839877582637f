"""Time-ordered ids for the writes chatledger makes itself: UUIDv7 (RFC 9562), from the
standard library on Python 3.14 and later, from the ``uuid6`` package before."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 14):
    from uuid import uuid7
else:
    from uuid6 import uuid7


def new_uuid7() -> str:
    """A new UUIDv7 as its 36-character string."""
    return str(uuid7())
