"""rules.retry without a database: the backoff's bounds, and the one in-place retry loop (tenacity's)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rules.retry import RetryPolicy
from settings import Settings


@given(failures=st.integers(1, 40), base=st.floats(0.001, 10), cap=st.floats(0.01, 600))
def test_the_wait_lies_between_half_and_all_of_the_capped_step(failures: int, base: float, cap: float) -> None:
    step = min(cap, base * 2 ** (failures - 1))
    assert step / 2 <= RetryPolicy(5, base, cap).delay(failures).total_seconds() <= step


class Flaky:
    def __init__(self, failures: list[BaseException]) -> None:
        self.failures, self.runs = failures, 0

    def __call__(self) -> str:
        self.runs += 1
        if self.failures:
            raise self.failures.pop(0)
        return "done"


FAST = RetryPolicy(max_attempts=3, base_seconds=0.001, max_seconds=0.001)


def test_work_runs_again_after_a_failure_it_may_retry() -> None:
    work = Flaky([TimeoutError(), TimeoutError()])
    assert FAST.call(work, lambda error: isinstance(error, TimeoutError)) == "done" and work.runs == 3


def test_the_last_failure_is_raised_as_it_is_after_max_attempts() -> None:
    last = TimeoutError("third")
    work = Flaky([TimeoutError(), TimeoutError(), last, TimeoutError()])
    with pytest.raises(TimeoutError) as raised:
        FAST.call(work, lambda error: isinstance(error, TimeoutError))
    assert raised.value is last and work.runs == 3


def test_a_failure_it_may_not_retry_is_raised_at_once() -> None:
    work = Flaky([ValueError("bad input")])
    with pytest.raises(ValueError):
        FAST.call(work, lambda error: isinstance(error, TimeoutError))
    assert work.runs == 1


@pytest.mark.parametrize("group", ["worker", "order", "bridge"])
def test_a_settings_group_gives_its_own_policy(group: str) -> None:
    settings = Settings().with_changes(**{group: {"max_attempts": 3, "retry_base_seconds": 0.25,
                                                  "retry_max_seconds": 7.0}})
    assert RetryPolicy.of(getattr(settings, group)) == RetryPolicy(max_attempts=3, base_seconds=0.25, max_seconds=7.0)
