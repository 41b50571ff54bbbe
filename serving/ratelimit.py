"""Per-client rate limiting over a rolling 60 s window.

The limiter is an interface. By default the window lives in the process (`InProcessWindows`, no thread, no
lock); when PIA_RATE_LIMIT_STORAGE_URL names a shared store (redis://…) the `limits` library keeps it there, so
API replicas share the count.

A shared store that cannot be reached must not take the API down with it: the limiter then fails open (the
request is allowed and not counted), logs once that the store was lost and once that it is back, and leaves
the store alone for STORE_RETRY_SECONDS between attempts, so a store that hangs delays only those attempts.
"""

import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from limits import RateLimitItem, RateLimitItemPerMinute, WindowStats, aio
from limits.errors import StorageError
from limits.storage import storage_from_string

log = logging.getLogger(__name__)

# How long a lost store is left alone before the next request tries it again.
STORE_RETRY_SECONDS = 1.0
WINDOW_SECONDS = 60
# In process, windows of keys nobody used for a whole window are dropped once this many hits went by.
SWEEP_EVERY_HITS = 10_000


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


class InProcessWindows:
    """Each key's request times within the last WINDOW_SECONDS, oldest first, in this process's memory.

    A hit drops the times that left the window from the front and appends its own: amortised constant work, where
    `limits`' memory storage inserted at the front of a list and swept every window from a new timer thread
    every 10 ms (about 10 µs a request and a thread start per 10 ms under load). Used from the event loop only,
    so it needs no lock. A refused hit is not recorded, so a window holds at most `limit` times.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        # Keyed by the limit too, as `limits` keys its windows: a client's new limit starts a new window.
        self._windows: dict[tuple[str, int], deque[float]] = {}
        self._hits_since_sweep = 0

    def hit(self, key: str, limit: int) -> tuple[bool, int, float]:
        """(allowed, requests left in the window, seconds until its oldest request leaves it)."""
        now = self._clock()
        window = self._windows.get((key, limit))
        if window is None:
            window = self._windows[(key, limit)] = deque()
        while window and window[0] <= now - WINDOW_SECONDS:
            window.popleft()
        allowed = len(window) < limit
        if allowed:
            window.append(now)
        self._hits_since_sweep += 1
        if self._hits_since_sweep >= SWEEP_EVERY_HITS:
            self._sweep(now)
        return allowed, limit - len(window), (window[0] if window else now) + WINDOW_SECONDS - now

    def _sweep(self, now: float) -> None:
        """Forget the windows whose newest request is a whole window old (token-attempt keys come and go)."""
        self._hits_since_sweep = 0
        for key in [key for key, window in self._windows.items() if not window or window[-1] <= now - WINDOW_SECONDS]:
            del self._windows[key]


class RollingWindowLimiter:
    def __init__(self, storage_url: str, timeout_seconds: float = 0.5) -> None:
        """timeout_seconds bounds each connect and each command of a networked store (no retries inside)."""
        self._in_process = InProcessWindows() if storage_url.startswith("memory://") else None
        if self._in_process is None:
            # Imported only for a shared store: the Redis client costs half a second of every process's start.
            from coredis.retry import NoRetryPolicy

            shared = aio.strategies.MovingWindowRateLimiter(storage_from_string(
                f"async+{storage_url.removeprefix('async+')}", wrap_exceptions=True,
                connect_timeout=timeout_seconds, stream_timeout=timeout_seconds, retry_policy=NoRetryPolicy()))

            async def count(item: RateLimitItem, key: str) -> tuple[bool, WindowStats]:
                return await shared.hit(item, key), await shared.get_window_stats(item, key)

            self._count = count
        self._store_lost_at: float | None = None  # monotonic time of the last failure while the store is lost

    async def hit(self, key: str, limit_per_minute: int) -> RateLimitState:
        if self._in_process is not None:
            allowed, remaining, reset = self._in_process.hit(key, limit_per_minute)
            return RateLimitState(allowed, limit_per_minute, remaining, _reset_seconds(reset))
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
        return RateLimitState(allowed, limit_per_minute, stats.remaining,
                              _reset_seconds(stats.reset_time - time.time()))


def _reset_seconds(seconds: float) -> int:
    """X-RateLimit-Reset: whole seconds, at least 1 and never beyond the window (a shared store's clock and ours
    differ by a little, and its times are rounded)."""
    return min(WINDOW_SECONDS, max(1, math.ceil(seconds)))
