"""Reads parked between the pages of a list, for the next page's request to continue.

A client paging through a long list (a planning partner reading a million held forecasts) asks for page after page
with the cursor of the one before. Read as a statement of its own, each page pays for planning, round trips and
the index descent again (about half of a page's time on PostgreSQL); read from one open read of the rest of the
list, it pays for its rows alone. So a page with a cursor opens that read, takes its rows, and parks it here under
the key its next page starts after; the request that brings that cursor takes the read back and goes on.

Parked reads are per process and bounded: dropped (closed, their connection given back) once idle for IDLE_SECONDS
or older than MAX_AGE_SECONDS, the oldest dropped when more than CAPACITY are parked, and all of an engine's when
it is disposed. A request finding no read under its key reads afresh from the key, with the same result but for
what changed meanwhile: a continued read sees the data as of its first statement (see the README's Decisions).
"""

import math
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Protocol

import sqlalchemy as sa

IDLE_SECONDS = 5.0
MAX_AGE_SECONDS = 60.0
CAPACITY = 4


class Closable(Protocol):
    def close(self) -> None: ...


@dataclass
class _Parked:
    read: Closable
    opened: float
    parked: float = field(default_factory=time.monotonic)


class ParkedReads:
    """Open reads of one engine, each under the key its next page starts after; taken at most once."""

    def __init__(self, *, idle_seconds: float, max_age_seconds: float, capacity: int) -> None:
        self._idle, self._max_age, self._capacity = idle_seconds, max_age_seconds, capacity
        self._parked: OrderedDict[Hashable, _Parked] = OrderedDict()
        self._guard = threading.Lock()
        self._wake = threading.Condition(self._guard)
        self._reaper: threading.Thread | None = None
        self._reaper_wakes = math.inf  # when the waiting reaper looks again by itself

    def take(self, key: Hashable) -> tuple[Closable, float] | None:
        """The read parked under the key and when it was opened (time.monotonic), no longer parked; None when
        there is none (or it had expired)."""
        with self._guard:
            parked = self._parked.pop(key, None)
        if parked is not None and self._expired(parked, time.monotonic()):
            parked.read.close()
            return None
        return (parked.read, parked.opened) if parked else None

    def park(self, key: Hashable, read: Closable, opened: float) -> None:
        """Keep the read (opened at `opened`, time.monotonic) for the request of the page after the key."""
        with self._guard:
            replaced = self._parked.pop(key, None)  # the same page read twice over
            dropped = [replaced.read] if replaced else []
            self._parked[key] = parked = _Parked(read, opened)
            while len(self._parked) > self._capacity:
                dropped.append(self._parked.popitem(last=False)[1].read)
            if self._reaper is None:
                self._reaper = threading.Thread(target=self._reap, name="parked-reads", daemon=True)
                self._reaper.start()
            elif self._deadline(parked) < self._reaper_wakes:
                # Woken only for a sooner deadline: a page parks its read for the next one, and waking the reaper
                # for each cost a thread switch a page (and, when it found none parked meanwhile, a thread start).
                self._wake.notify()
        for read in dropped:
            read.close()

    def close_all(self) -> None:
        with self._guard:
            dropped = [parked.read for parked in self._parked.values()]
            self._parked.clear()
        for read in dropped:
            read.close()

    def __len__(self) -> int:
        return len(self._parked)

    def _deadline(self, parked: _Parked) -> float:
        """When the parked read expires (time.monotonic)."""
        return min(parked.parked + self._idle, parked.opened + self._max_age)

    def _expired(self, parked: _Parked, now: float) -> bool:
        return now >= self._deadline(parked)

    def _reap(self) -> None:
        """Closes expired reads as they expire, so that an abandoned one holds its connection no longer than that;
        ends when nothing is parked (park starts it again)."""
        while True:
            with self._guard:
                now = time.monotonic()
                expired = [key for key, parked in self._parked.items() if self._expired(parked, now)]
                dropped = [self._parked.pop(key).read for key in expired]
                if not dropped:
                    if not self._parked:
                        self._reaper = None
                        return
                    self._reaper_wakes = min(self._deadline(parked) for parked in self._parked.values())
                    self._wake.wait(timeout=max(self._reaper_wakes - now, 0.01))
                    self._reaper_wakes = math.inf  # it looks at every read before it waits again
                    continue
            for read in dropped:
                read.close()


_registry: "weakref.WeakKeyDictionary[sa.Engine, ParkedReads]" = weakref.WeakKeyDictionary()
_registry_guard = threading.Lock()


def parked_reads(engine: sa.Engine) -> ParkedReads:
    """The engine's parked reads, closed when the engine is disposed (before its connection pools are)."""
    with _registry_guard:
        if (reads := _registry.get(engine)) is None:
            reads = _registry[engine] = ParkedReads(idle_seconds=IDLE_SECONDS, max_age_seconds=MAX_AGE_SECONDS,
                                                    capacity=CAPACITY)
            sa.event.listen(engine, "engine_disposed", lambda _engine: reads.close_all(), insert=True)
    return reads


def parked_count(engine: sa.Engine) -> int:
    """How many reads the engine has parked now (none before its first)."""
    reads = _registry.get(engine)
    return len(reads) if reads is not None else 0
