"""The pipeline worker: batches of a tenant one at a time, in receivedTime order, each applied with its status.

Order across processes comes from a per-tenant lock: a PostgreSQL session advisory lock when workers share a
PostgreSQL database (it dies with the worker's connection, so a killed worker never blocks its tenant), and an
in-process lock for the embedded DuckDB file (one process only). Whoever holds a tenant's lock owns all its
unfinished batches, so a batch left PROCESSING by a killed worker is simply processed again.

Failures are transient (the database connection lost, a lock wait timed out, a serialization conflict:
trying again can succeed) or terminal (an unreadable staged file, a bug: the same batch fails the same way).
A transient failure sets the batch's retry_at after an exponential backoff with jitter, and its tenant waits
until then while the other tenants go on; after max_attempts the batch ends FAILED, saying so. A terminal
failure ends the batch FAILED at once. Nothing of a failed attempt is applied: the batch and its status
are written in one transaction. No error of one tenant stops the others, and a crash of the loop itself is
logged and the loop restarted (run_supervised).
"""

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

import duckdb
import psycopg
import pyarrow as pa
import sqlalchemy as sa

from db.batches import (
    FAILED,
    PROCESSING,
    fail_batch,
    finish_batch,
    get_batch,
    mark_processing,
    next_in_line,
    retry_later,
    tenants_ready,
)
from db.engine import is_duckdb
from db.ids import new_id, utc_now
from db.retention import RetentionPolicy, remove_expired
from db.staging import read_staged
from db.workers import beat, retire
from pipeline.apply import apply_batch
from rules.retry import RetryPolicy
from settings import Settings

log = logging.getLogger(__name__)


class TenantLocks(Protocol):
    def hold(self, tenant_id: str) -> AbstractContextManager[bool]: ...


class InProcessTenantLocks:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    @contextmanager
    def hold(self, tenant_id: str) -> Iterator[bool]:
        with self._guard:
            lock = self._locks.setdefault(tenant_id, threading.Lock())
        acquired = lock.acquire(blocking=False)
        try:
            yield acquired
        finally:
            if acquired:
                lock.release()


class PostgresTenantLocks:
    def __init__(self, engine: sa.Engine) -> None:
        self._engine = engine

    @contextmanager
    def hold(self, tenant_id: str) -> Iterator[bool]:
        key = sa.func.hashtextextended(tenant_id, 0)
        with self._engine.connect() as conn:
            acquired = conn.execute(sa.select(sa.func.pg_try_advisory_lock(key))).scalar_one()
            conn.commit()
            try:
                yield acquired
            finally:
                if acquired:
                    conn.execute(sa.select(sa.func.pg_advisory_unlock(key)))
                    conn.commit()


def tenant_locks_for(engine: sa.Engine) -> TenantLocks:
    return InProcessTenantLocks() if is_duckdb(engine) else PostgresTenantLocks(engine)


# The drivers' own classes too: the bulk paths talk to them directly (COPY, Arrow views), unwrapped by SQLAlchemy.
_TRANSIENT = (sa.exc.OperationalError, sa.exc.TimeoutError, psycopg.OperationalError, duckdb.OperationalError)


def is_transient(error: BaseException) -> bool:
    """Whether trying again can succeed: OperationalError covers a lost connection, lock and statement
    timeouts, serialization failures and deadlocks (psycopg) and write conflicts (DuckDB)."""
    return isinstance(error, _TRANSIENT) or (isinstance(error, sa.exc.DBAPIError) and error.connection_invalidated)


def _cause(error: BaseException) -> str:
    """The driver's name for what went wrong (LockNotAvailable, AdminShutdown, …): safe to show, no SQL."""
    return type(getattr(error, "orig", None) or error).__name__


RETENTION_LOCK = "pia:retention"  # one worker at a time purges; the others skip that round


@dataclass(frozen=True)
class Attempt:
    """One attempt at a batch, as the metrics see it: the progress it left the batch in (PROCESSING: to be tried
    again), how long the batch had waited since it was received (for its first attempt), and how long it took."""

    kind: str
    progress: str
    waited_seconds: float | None
    took_seconds: float


class Pipeline:
    def __init__(self, engine: sa.Engine, staging_dir: Path, locks: TenantLocks, *,
                 retry: RetryPolicy | None = None, lock_timeout_seconds: float | None = None,
                 retention: RetentionPolicy | None = None, retention_interval_seconds: float = 3600.0,
                 clock: Callable[[], datetime] = utc_now,
                 on_attempt: Callable[[Attempt], None] | None = None) -> None:
        self.engine, self.staging_dir, self.locks, self.clock = engine, staging_dir, locks, clock
        self.on_attempt = on_attempt
        self.retry, self.lock_timeout_seconds = retry or RetryPolicy(), lock_timeout_seconds
        self.retention, self.retention_interval_seconds = retention, retention_interval_seconds
        self.worker_id = new_id()
        self._beat_every: float | None = None  # set by run(): one-off processing (the CLI) has no heartbeat
        self._last_beat = self._retention_due = float("-inf")

    @classmethod
    def from_settings(cls, settings: Settings, engine: sa.Engine,
                      on_attempt: Callable[[Attempt], None] | None = None) -> "Pipeline":
        return cls(engine, settings.resolved_staging_dir, tenant_locks_for(engine),
                   retry=RetryPolicy(settings.worker_max_attempts, settings.worker_retry_base_seconds,
                                     settings.worker_retry_max_seconds),
                   lock_timeout_seconds=settings.worker_lock_timeout_seconds,
                   retention=RetentionPolicy.from_settings(settings),
                   retention_interval_seconds=settings.retention_interval_seconds, on_attempt=on_attempt)

    def process_pending(self, on_batch: Callable[[str, str], None] | None = None) -> int:
        """Process the unfinished batches of every tenant this worker can lock and that is not waiting for a
        retry; returns how many batches were handled. An error with one tenant is logged and skips only it."""
        handled = 0
        for tenant_id in tenants_ready(self.engine, self.clock()):
            try:
                handled += self.process_tenant(tenant_id, on_batch) or 0
            except Exception as error:
                if is_transient(error):
                    log.warning("pipeline: tenant %s skipped this round, database error (%s)", tenant_id,
                                _cause(error))
                else:
                    log.exception("pipeline: tenant %s skipped this round", tenant_id)
        return handled

    def process_tenant(self, tenant_id: str, on_batch: Callable[[str, str], None] | None = None) -> int | None:
        """Process the tenant's unfinished batches in order until one must wait for a retry; None when another
        worker has the tenant."""
        with self.locks.hold(tenant_id) as held:
            if not held:
                return None
            handled = 0
            while (head := next_in_line(self.engine, tenant_id)) is not None:
                if head.retry_at is not None and head.retry_at > self.clock():
                    break
                progress = self._process_named(tenant_id, head.batch_id)
                handled += 1
                if on_batch:
                    on_batch(tenant_id, head.batch_id)
                self._beat_if_due()
                if progress == PROCESSING:  # waits for its retry, and the tenant's later batches with it
                    break
            return handled

    def _process_named(self, tenant_id: str, batch_id: str) -> str:
        try:
            batch = get_batch(self.engine, tenant_id, batch_id)
        except Exception as error:
            if is_transient(error):
                raise
            # A value the driver cannot decode, say: the row itself is the fault, and it must not block the line.
            log.exception("batch %s/%s: its row cannot be read", tenant_id, batch_id)
            return self._fail(tenant_id, batch_id, "The batch record cannot be read; nothing was applied.")
        return self.process(batch)

    def process(self, batch: sa.Row) -> str:
        """One attempt at the batch; returns its progress after: a final state, or PROCESSING to retry later."""
        started = self.clock()
        progress = self._attempt(batch)
        if self.on_attempt is not None:
            waited = (started - batch.received_time).total_seconds() if batch.attempts == 0 else None
            self.on_attempt(Attempt(batch.kind, progress, waited, (self.clock() - started).total_seconds()))
        return progress

    def _attempt(self, batch: sa.Row) -> str:
        tenant_id, batch_id = batch.tenant_id, batch.batch_id
        if batch.attempts >= self.retry.max_attempts:
            # Earlier attempts ended with no outcome recorded: workers killed mid-batch (by this batch, maybe).
            return self._fail(tenant_id, batch_id, f"Gave up after {batch.attempts} attempts: each was interrupted "
                              "before it finished (the worker stopped or lost its database); nothing was applied.")
        mark_processing(self.engine, tenant_id, batch_id, self.clock())
        attempt = batch.attempts + 1
        try:
            items = read_staged(self.staging_dir, batch.staged_path)
        except FileNotFoundError:
            log.error("batch %s/%s: staged file %s is missing", tenant_id, batch_id, batch.staged_path)
            return self._fail(tenant_id, batch_id, "The staged batch file is missing; nothing was applied.")
        except (OSError, pa.ArrowException) as error:
            log.error("batch %s/%s: staged file unreadable: %s", tenant_id, batch_id, error)
            return self._fail(tenant_id, batch_id, "The staged batch file cannot be read.")
        try:
            with self.engine.begin() as conn:
                self._limit_lock_waits(conn)
                outcome = apply_batch(conn, tenant_id, batch.kind, batch_id, batch.generated_at, items, self.clock())
                return finish_batch(conn, tenant_id, batch_id, counts=outcome.counts,
                                    rejected_items=outcome.rejected_items,
                                    rejected_items_truncated=outcome.rejected_items_truncated, now=self.clock())
        except Exception as error:
            if not is_transient(error):
                # Deterministic: the same file would fail the same way. Nothing of it was applied.
                log.exception("batch %s/%s failed", tenant_id, batch_id)
                return self._fail(tenant_id, batch_id, "Processing failed with an internal error; nothing was applied.")
            if attempt >= self.retry.max_attempts:
                log.error("batch %s/%s: attempt %d of %d failed (%s); giving up", tenant_id, batch_id, attempt,
                          self.retry.max_attempts, _cause(error))
                return self._fail(tenant_id, batch_id, f"Gave up after {attempt} attempts: the database failed each "
                                  f"time (last: {_cause(error)}); nothing was applied.")
            retry_at = self.clock() + self.retry.delay(attempt)
            log.warning("batch %s/%s: attempt %d of %d failed (%s); next at %s", tenant_id, batch_id, attempt,
                        self.retry.max_attempts, _cause(error), retry_at.isoformat())
            retry_later(self.engine, tenant_id, batch_id, retry_at)
            return PROCESSING

    def _fail(self, tenant_id: str, batch_id: str, message: str) -> str:
        fail_batch(self.engine, tenant_id, batch_id, message, self.clock())
        return FAILED

    def _limit_lock_waits(self, conn: sa.Connection) -> None:
        """PostgreSQL: a lock held elsewhere makes the attempt fail (transient) instead of hanging the worker."""
        if self.lock_timeout_seconds and not is_duckdb(self.engine):
            conn.execute(sa.select(sa.func.set_config(
                "lock_timeout", f"{round(self.lock_timeout_seconds * 1000)}ms", True)))

    def run(self, stop: threading.Event, wake: threading.Event | None = None, poll_seconds: float = 1.0) -> None:
        """Process until stopped; sleep poll_seconds when idle unless woken. Beats its heartbeat every round
        and removes expired data every retention_interval_seconds."""
        wake = wake or threading.Event()
        self._beat_every = poll_seconds
        try:
            while not stop.is_set():
                wake.clear()
                try:
                    self._beat_if_due()
                    handled = self.process_pending()
                except Exception as error:
                    if not is_transient(error):
                        raise
                    log.warning("pipeline: database unavailable (%s); retrying", _cause(error))
                    handled = 0
                self._remove_expired_if_due()
                if not handled:
                    wake.wait(poll_seconds)
        finally:
            self._retire()

    def _beat_if_due(self) -> None:
        if self._beat_every is not None and time.monotonic() - self._last_beat >= self._beat_every:
            beat(self.engine, self.worker_id, self.clock())
            self._last_beat = time.monotonic()

    def _retire(self) -> None:
        try:
            retire(self.engine, self.worker_id)
        except Exception as error:  # the row then ages out; stopping must not fail for it
            log.warning("pipeline: could not remove heartbeat of worker %s (%s)", self.worker_id, _cause(error))

    def _remove_expired_if_due(self) -> None:
        if self.retention is None or time.monotonic() < self._retention_due:
            return
        self._retention_due = time.monotonic() + self.retention_interval_seconds
        try:
            with self.locks.hold(RETENTION_LOCK) as held:
                if held:
                    removed = remove_expired(self.engine, self.staging_dir, self.retention, self.clock())
                    log.info("retention: removed %s", removed)
        except Exception:
            log.exception("retention failed; next try in %.0f s", self.retention_interval_seconds)


def run_supervised(pipeline: Pipeline, stop: threading.Event, wake: threading.Event, poll_seconds: float) -> None:
    """Run the pipeline until stopped; a crash is logged and the loop restarted after a growing pause (reset
    once a run has lasted longer than the longest pause), so a persistent fault never spins."""
    crashes = 0
    while not stop.is_set():
        started = time.monotonic()
        try:
            pipeline.run(stop, wake, poll_seconds)
            return
        except Exception:
            crashes = 1 if time.monotonic() - started > pipeline.retry.max_seconds else crashes + 1
            pause = pipeline.retry.delay(crashes).total_seconds()
            log.exception("pipeline worker crashed (%d in a row); restarting in %.1f s", crashes, pause)
            stop.wait(pause)
