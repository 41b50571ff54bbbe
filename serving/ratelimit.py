"""Per-client rate limiting over a rolling 60 s window.

The limiter is an interface; the `limits` library backs it with in-process memory by default and with a
shared store (redis://…) when PIA_RATE_LIMIT_STORAGE_URL names one, so API replicas share the count.

A shared store that cannot be reached must not take the API down with it: the limiter then fails open (the
request is allowed and not counted), logs once that the store was lost and once that it is back, and leaves
the store alone for STORE_RETRY_SECONDS between attempts, so a store that hangs delays only those attempts.
"""

import logging
import math
import time
from dataclasses import dataclass
from typing import Protocol

from coredis.retry import NoRetryPolicy
from limits import RateLimitItem, RateLimitItemPerMinute, WindowStats, aio, strategies
from limits.errors import StorageError
from limits.storage import MemoryStorage, storage_from_string

log = logging.getLogger(__name__)

# How long a lost store is left alone before the next request tries it again.
STORE_RETRY_SECONDS = 1.0


@dataclass(frozen=True)
class RateLimitState:
    allowed: bool
    limit: int
    # None when the store could not be reached: the request was let through without being counted.
    remaining: int | None
    reset_seconds: int | None  # until the oldest request in the window leaves it

    @classmethod
    def uncounted(cls, limit: int) -> "RateLimitState":
        return cls(allowed=True, limit=limit, remaining=None, reset_seconds=None)

    def headers(self) -> dict[str, str]:
        headers = {"X-RateLimit-Limit": str(self.limit)}
        if self.remaining is not None and self.reset_seconds is not None:
            headers |= {"X-RateLimit-Remaining": str(self.remaining), "X-RateLimit-Reset": str(self.reset_seconds)}
        return headers


class RateLimiter(Protocol):
    async def hit(self, key: str, limit_per_minute: int) -> RateLimitState: ...


class RollingWindowLimiter:
    def __init__(self, storage_url: str, timeout_seconds: float = 0.5) -> None:
        """timeout_seconds bounds each connect and each command of a networked store (no retries inside)."""
        if storage_url.startswith("memory://"):
            # In one process the synchronous storage answers at once; the asyncio one hands its expiry work to
            # a thread on nearly every hit, which cost about 100 µs of CPU a request.
            in_process = strategies.MovingWindowRateLimiter(MemoryStorage())

            async def count(item: RateLimitItem, key: str) -> tuple[bool, WindowStats]:
                return in_process.hit(item, key), in_process.get_window_stats(item, key)
        else:
            shared = aio.strategies.MovingWindowRateLimiter(storage_from_string(
                f"async+{storage_url.removeprefix('async+')}", wrap_exceptions=True,
                connect_timeout=timeout_seconds, stream_timeout=timeout_seconds, retry_policy=NoRetryPolicy()))

            async def count(item: RateLimitItem, key: str) -> tuple[bool, WindowStats]:
                return await shared.hit(item, key), await shared.get_window_stats(item, key)
        self._count = count
        self._store_lost_at: float | None = None  # monotonic time of the last failure while the store is lost

    async def hit(self, key: str, limit_per_minute: int) -> RateLimitState:
        if self._store_lost_at is not None and time.monotonic() - self._store_lost_at < STORE_RETRY_SECONDS:
            return RateLimitState.uncounted(limit_per_minute)
        try:
            allowed, stats = await self._count(RateLimitItemPerMinute(limit_per_minute), key)
        except (StorageError, OSError) as error:
            if self._store_lost_at is None:
                log.warning("rate-limit store unreachable (%s); requests are allowed uncounted until it is back",
                            error)
            self._store_lost_at = time.monotonic()
            return RateLimitState.uncounted(limit_per_minute)
        if self._store_lost_at is not None:
            log.warning("rate-limit store reachable again; requests are counted again")
            self._store_lost_at = None
        reset = max(1, math.ceil(stats.reset_time - time.time()))
        return RateLimitState(allowed, limit_per_minute, stats.remaining, reset)
