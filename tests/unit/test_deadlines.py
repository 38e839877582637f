"""The deadline of one attempt inside the retry budget (:mod:`chatledger.deadlines`)."""

from __future__ import annotations

import pytest

from chatledger.deadlines import ATTEMPT_FLOOR, ATTEMPTS_IN_BUDGET, attempt_budget, attempt_limit
from chatledger.options import LedgerOptions


def test_an_attempt_takes_a_share_of_the_budget() -> None:
    options = LedgerOptions(retry_timeout=30, lock_timeout=5)
    assert attempt_limit(options, 0.0) == pytest.approx(30 / ATTEMPTS_IN_BUDGET)
    # Cut to what is left of the budget, never below the lock wait and its floor.
    assert attempt_limit(options, 22.0) == pytest.approx(8.0)
    assert attempt_limit(options, 29.5) == pytest.approx(5 + ATTEMPT_FLOOR)


@pytest.mark.parametrize("retry_timeout", [0.0, 0.5, 3.0])
def test_a_short_budget_still_lets_a_lock_wait_end_in_the_servers_error(retry_timeout: float) -> None:
    options = LedgerOptions(retry_timeout=retry_timeout, lock_timeout=2)
    assert attempt_limit(options, 0.0) == pytest.approx(2 + ATTEMPT_FLOOR)
    assert attempt_limit(options, 100.0) == pytest.approx(2 + ATTEMPT_FLOOR)


def test_the_default_budget_fits_three_stalled_attempts() -> None:
    options = LedgerOptions()
    limit = attempt_limit(options, 0.0)
    assert options.lock_timeout + ATTEMPT_FLOOR <= limit and 3 * limit <= options.retry_timeout + 1e-9


def test_an_attempt_at_work_may_take_what_is_left_of_the_budget() -> None:
    options = LedgerOptions(retry_timeout=30, lock_timeout=5)
    assert attempt_budget(options, 0.0) == pytest.approx(30.0)
    assert attempt_budget(options, 22.0) == pytest.approx(8.0)
    # Never less than the attempt's quiet limit, however late it starts.
    assert attempt_budget(options, 29.5) == pytest.approx(attempt_limit(options, 29.5))
