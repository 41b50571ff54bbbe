"""How long to wait before trying a failed piece of work again (a batch, an order, a crashed loop), and the one
loop that tries work again in place (tenacity's) for those that retry at once (a write that lost to another)."""

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol, TypeVar

import tenacity

T = TypeVar("T")


class RetrySettings(Protocol):
    """A settings group that says how its work is tried again (settings.worker, .order, .bridge)."""

    @property
    def max_attempts(self) -> int: ...
    @property
    def retry_base_seconds(self) -> float: ...
    @property
    def retry_max_seconds(self) -> float: ...


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    base_seconds: float = 5.0
    max_seconds: float = 300.0

    @classmethod
    def of(cls, group: RetrySettings) -> "RetryPolicy":
        return cls(group.max_attempts, group.retry_base_seconds, group.retry_max_seconds)

    def delay(self, failures: int) -> timedelta:
        """Exponential backoff with "equal jitter": between half and all of base·2^(failures−1), capped.

        Never below half the step, so waits keep growing; random within it, so workers that failed together
        (a database restart) do not all come back at the same instant.
        """
        step = min(self.max_seconds, self.base_seconds * 2 ** (failures - 1))
        return timedelta(seconds=step / 2 + random.uniform(0, step / 2))

    def call(self, work: Callable[[], T], retry_on: Callable[[BaseException], bool]) -> T:
        """Run `work`, and again after a failure `retry_on` accepts, up to max_attempts runs in all, waiting
        `delay` between them; the last failure, or any other, is raised as it is."""
        retrying = tenacity.Retrying(stop=tenacity.stop_after_attempt(self.max_attempts),
                                     wait=lambda state: self.delay(state.attempt_number).total_seconds(),
                                     retry=tenacity.retry_if_exception(retry_on), reraise=True)
        return retrying(work)
