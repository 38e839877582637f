"""``read_records`` leaves the caller's stream to the caller: open once the records are
read, and left alone when the caller closed it first (an import interrupted by Ctrl-C
closes its file before the generator is finalized)."""

from __future__ import annotations

import io

from chatledger.tools.importer import read_records


def test_the_stream_stays_open_after_its_records() -> None:
    stream = io.BytesIO(b'{"a": 1}\n\n{"b": 2}\n')
    assert list(read_records(stream)) == [{"a": 1}, {"b": 2}]
    assert not stream.closed


def test_a_stream_the_caller_closed_first_is_left_alone() -> None:
    stream = io.BytesIO(b'{"a": 1}\n{"b": 2}\n')
    records = read_records(stream)
    assert next(records) == {"a": 1}
    stream.close()
    records.close()  # runs the generator's cleanup now, which must not raise
