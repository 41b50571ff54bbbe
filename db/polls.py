"""Polls that ask the database only when something may have changed: the in-process roles of `pia serve` on DuckDB.

The order processor, the pipeline worker, the outbox bridge and the Kafka relay each poll the database every second or
few for work that nobody woke them for (retries come due, orders or batches a stopped process left). On DuckDB the
serving process holds the file alone, so nothing changes there but by its own commits (db.engine.Commits): after a
round that found nothing to do, the next rounds skip their queries until a commit that counts has been made, or the
earliest due time the round saw has come, or RECHECK_SECONDS have passed (a safety net, not a schedule). Skipping them
took about 12 µs of server CPU off a request on `benchmarks.request_overhead` (2026-11-29): far more than the queries'
own 1–2.5 ms a second, since each query had a thread, and DuckDB's, take turns with the event loop. On PostgreSQL,
which other processes write, every round polls.
"""

import time
from datetime import datetime

import sqlalchemy as sa

from db.engine import commits_of
from db.ids import utc_now

RECHECK_SECONDS = 60.0


class PollGate:
    """Tells a poller whether its next round needs the database. A round that polls calls `polling()` before its
    queries; one that found nothing to do calls `idle(due)` after them, `due` being the earliest time its work
    waits for (None: none)."""

    def __init__(self, engine: sa.Engine, recheck_seconds: float = RECHECK_SECONDS) -> None:
        self._commits = commits_of(engine)
        self._recheck_seconds = recheck_seconds
        self._seen: int | None = None  # the count when the round under way began
        self._idle_at: int | None = None  # the count when the last idle round began; None: not idle
        self._recheck_at = 0.0  # monotonic

    def open(self) -> bool:
        if self._commits is None or self._idle_at is None:
            return True
        return self._commits.count != self._idle_at or time.monotonic() >= self._recheck_at

    def polling(self) -> None:
        # Read before the queries: a commit made after this is counted after it, so the next round sees the count move.
        self._seen = None if self._commits is None else self._commits.count
        self._idle_at = None

    def idle(self, due: datetime | None = None, now: datetime | None = None) -> None:
        """The round found nothing to do; its work waits until `due` at the latest, by the poller's clock (`now`)."""
        self._idle_at = self._seen
        wait = self._recheck_seconds
        if due is not None:
            wait = min(wait, max(0.0, (due - (now or utc_now())).total_seconds()))
        self._recheck_at = time.monotonic() + wait
