"""How long to wait before trying a failed piece of work again (a batch, an order, a crashed loop)."""

import random
from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    base_seconds: float = 5.0
    max_seconds: float = 300.0

    def delay(self, failures: int) -> timedelta:
        """Exponential backoff with "equal jitter": between half and all of base·2^(failures−1), capped.

        Never below half the step, so waits keep growing; random within it, so workers that failed together
        (a database restart) do not all come back at the same instant.
        """
        step = min(self.max_seconds, self.base_seconds * 2 ** (failures - 1))
        return timedelta(seconds=step / 2 + random.uniform(0, step / 2))
