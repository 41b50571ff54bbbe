"""Per-client rate limiting over a rolling 60 s window.

The limiter is an interface; the `limits` library backs it with in-process memory by default and with a
shared store (redis://…) when PIA_RATE_LIMIT_STORAGE_URL names one, so API replicas share the count.
"""

import math
import time
from dataclasses import dataclass
from typing import Protocol

from limits import RateLimitItemPerMinute
from limits.aio.strategies import MovingWindowRateLimiter
from limits.storage import storage_from_string


@dataclass(frozen=True)
class RateLimitState:
    allowed: bool
    limit: int
    remaining: int
    reset_seconds: int  # until the oldest request in the window leaves it

    def headers(self) -> dict[str, str]:
        return {"X-RateLimit-Limit": str(self.limit), "X-RateLimit-Remaining": str(self.remaining),
                "X-RateLimit-Reset": str(self.reset_seconds)}


class RateLimiter(Protocol):
    async def hit(self, key: str, limit_per_minute: int) -> RateLimitState: ...


class RollingWindowLimiter:
    def __init__(self, storage_url: str) -> None:
        if "://" in storage_url and not storage_url.startswith("async+"):
            storage_url = f"async+{storage_url}"
        self._strategy = MovingWindowRateLimiter(storage_from_string(storage_url))

    async def hit(self, key: str, limit_per_minute: int) -> RateLimitState:
        item = RateLimitItemPerMinute(limit_per_minute)
        allowed = await self._strategy.hit(item, key)
        stats = await self._strategy.get_window_stats(item, key)
        reset = max(1, math.ceil(stats.reset_time - time.time()))
        return RateLimitState(allowed, limit_per_minute, stats.remaining, reset)
