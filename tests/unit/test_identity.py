"""The write identity's digest (:func:`chatledger.identity.digest`): equal for equal
content, distinct for content that differs only by how its parts split or by their
types, as the settle compares a write with the stored one by it."""

from __future__ import annotations

import pytest

from chatledger.identity import Part, digest


def test_equal_content_has_one_digest() -> None:
    assert digest(("a", 1, None, 0.5)) == digest(("a", 1, None, 0.5))
    assert len(digest(())) == 64


@pytest.mark.parametrize(
    ("one", "other"),
    [
        (("ab", "c"), ("a", "bc")),
        ((None,), ("",)),
        ((1,), ("1",)),
        ((1.0,), (1,)),
        (("a",), ("a", None)),
        (("\u00e9",), ("e\u0301",)),
    ],
)
def test_content_that_differs_has_another_digest(one: tuple[Part, ...], other: tuple[Part, ...]) -> None:
    assert digest(one) != digest(other)
