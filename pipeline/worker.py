"""The pipeline worker: batches of a tenant in receivedTime order, each applied with its status.

Consecutive waiting batches of one kind are applied together (up to COALESCE_ITEMS items): one transaction,
one judging and one write for all of them, with the result of applying them one by one (pipeline.apply), and
every batch's status written in that transaction. If that transaction fails, nothing of any of them is applied,
and they are applied one by one instead, each in a transaction of its own as below: so FAILED still means that
nothing of that batch was applied, and one batch's fault never fails the others. A batch tried before (a retry
after a transient failure, or an attempt cut short) is always applied alone.

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

The worker also runs the periodic jobs: retention (one worker at a time) and the expiry of click and collect carts
not collected within the hold time (db/click_and_collect.py; workers may overlap, a cart ends once).
"""

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import sqlalchemy as sa

from db.batches import (
    FAILED,
    PROCESSING,
    fail_batch,
    finish_batch,
    get_batch,
    get_batches,
    in_line,
    mark_processing,
    next_retry_time,
    retry_later,
    tenants_ready,
)
from db.bulk import drop_stale_ingested
from db.click_and_collect import expire_carts
from db.engine import is_duckdb
from db.ids import new_id, utc_now
from db.polls import PollGate
from db.retention import RetentionPolicy, remove_expired
from db.staging import read_staged
from db.transient import is_transient as is_database_transient
from db.workers import beat, retire
from pipeline.apply import BatchItems, HeldRowsChanged, apply_batch, apply_batches
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


def is_transient(error: BaseException) -> bool:
    """A database error worth another try (db.transient), or a concurrent write to held rows."""
    return is_database_transient(error, HeldRowsChanged)


def _cause(error: BaseException) -> str:
    """The driver's name for what went wrong (LockNotAvailable, AdminShutdown, …): safe to show, no SQL."""
    return type(getattr(error, "orig", None) or error).__name__


RETENTION_LOCK = "pia:retention"  # one worker at a time purges; the others skip that round
# Waiting batches applied together hold at most this many items between them (20 recommended batches): large
# enough that per-batch costs vanish, small enough to keep a transaction and its memory modest.
COALESCE_ITEMS = 100_000
COALESCE_BATCHES = 100  # and at most this many batches
# Tables `db.bulk.ingested` left behind (a failed or killed apply) are dropped once this old.
_STALE_INGESTED_SECONDS = 3600
_CART_RETRY = timedelta(minutes=1)  # after a failed expiry round


@dataclass(frozen=True)
class Attempt:
    """One attempt at a batch, as the metrics see it: the progress it left the batch in (PROCESSING: to be tried
    again), how long the batch had waited since it was received (for its first attempt), and how long it took."""

    kind: str
    progress: str
    waited_seconds: float | None
    took_seconds: float


# Several heartbeats within the window /healthcheck allows (PIA_PIPELINE_STALE_SECONDS), not one per poll: on DuckDB
# each beat is a write and a commit, which at a poll of 0.2 s cost more than the poll itself.
BEATS_PER_STALE_WINDOW = 6
_DEFAULT_STALE_SECONDS = Settings.model_fields["pipeline_stale_seconds"].default


class Pipeline:
    def __init__(self, engine: sa.Engine, staging_dir: Path, locks: TenantLocks, *,
                 retry: RetryPolicy | None = None, lock_timeout_seconds: float | None = None,
                 retention: RetentionPolicy | None = None, retention_interval_seconds: float = 3600.0,
                 cart_hold: timedelta | None = None, clock: Callable[[], datetime] = utc_now,
                 on_attempt: Callable[[Attempt], None] | None = None, coalesce_items: int = COALESCE_ITEMS,
                 heartbeat_seconds: float = _DEFAULT_STALE_SECONDS / BEATS_PER_STALE_WINDOW) -> None:
        self.engine, self.staging_dir, self.locks, self.clock = engine, staging_dir, locks, clock
        self.on_attempt = on_attempt
        self.coalesce_items = coalesce_items  # 0: every batch alone
        self.retry, self.lock_timeout_seconds = retry or RetryPolicy(), lock_timeout_seconds
        self.retention, self.retention_interval_seconds = retention, retention_interval_seconds
        self.cart_hold = cart_hold
        self.worker_id = new_id()
        self.heartbeat_seconds = heartbeat_seconds
        self._beat_every: float | None = None  # set by run(): one-off processing (the CLI) has no heartbeat
        self._last_beat = self._retention_due = float("-inf")
        self._carts_due: datetime | None = None  # when to look for carts to expire; None: at once

    @classmethod
    def from_settings(cls, settings: Settings, engine: sa.Engine,
                      on_attempt: Callable[[Attempt], None] | None = None) -> "Pipeline":
        return cls(engine, settings.resolved_staging_dir, tenant_locks_for(engine),
                   retry=RetryPolicy.of(settings.worker),
                   lock_timeout_seconds=settings.worker.lock_timeout_seconds,
                   retention=RetentionPolicy.from_settings(settings),
                   retention_interval_seconds=settings.retention_interval_seconds,
                   cart_hold=timedelta(hours=settings.click_and_collect_hold_hours), on_attempt=on_attempt,
                   heartbeat_seconds=settings.pipeline_stale_seconds / BEATS_PER_STALE_WINDOW)

    def process_pending(self, on_batch: Callable[[str, str], None] | None = None) -> int:
        """Process the unfinished batches of every tenant this worker can lock and that is not waiting for a
        retry; returns how many batches were handled. An error with one tenant is logged and skips only it."""
        return self._round(on_batch)[0]

    def _round(self, on_batch: Callable[[str, str], None] | None = None) -> tuple[int, bool]:
        """process_pending's pass: (batches handled, whether a tenant ready was left for a later round: skipped by
        an error, or held by another worker)."""
        handled, left = 0, False
        for tenant_id in tenants_ready(self.engine, self.clock()):
            try:
                done = self.process_tenant(tenant_id, on_batch)
            except Exception as error:
                done = None
                if is_transient(error):
                    log.warning("pipeline: tenant %s skipped this round, database error (%s)", tenant_id,
                                _cause(error))
                else:
                    log.exception("pipeline: tenant %s skipped this round", tenant_id)
            handled, left = handled + (done or 0), left or done is None
        return handled, left

    def process_tenant(self, tenant_id: str, on_batch: Callable[[str, str], None] | None = None) -> int | None:
        """Process the tenant's unfinished batches in order until one must wait for a retry; None when another
        worker has the tenant."""
        with self.locks.hold(tenant_id) as held:
            if not held:
                return None
            handled = 0
            while line := in_line(self.engine, tenant_id, limit=COALESCE_BATCHES):
                if line[0].retry_at is not None and line[0].retry_at > self.clock():
                    break
                group = self._coalescible(line)
                progresses = (self._process_group(tenant_id, [row.batch_id for row in group]) if len(group) > 1
                              else [self._process_named(tenant_id, line[0].batch_id)])
                handled += len(progresses)
                if on_batch:
                    for row in group[:len(progresses)]:
                        on_batch(tenant_id, row.batch_id)
                self._beat_if_due()
                if progresses[-1] == PROCESSING:  # waits for its retry, and the tenant's later batches with it
                    break
            return handled

    def _coalescible(self, line: list[sa.Row]) -> list[sa.Row]:
        """The batches at the head of the line to apply together: consecutive ones of the first one's kind, none
        tried before, up to coalesce_items items (the first one alone when it was tried before)."""
        group, items = line[:1], line[0].item_count
        for row in line[1:] if self.coalesce_items else ():
            items += row.item_count
            if group[0].attempts or row.attempts or row.kind != group[0].kind or items > self.coalesce_items:
                break
            group.append(row)
        return group

    def _process_group(self, tenant_id: str, batch_ids: list[str]) -> list[str]:
        """One attempt at the batches together; the progress of each one processed, in order (after one left
        PROCESSING, the rest wait)."""
        try:
            batches = get_batches(self.engine, tenant_id, batch_ids)
        except Exception as error:
            if is_transient(error):
                raise
            return [self._process_named(tenant_id, batch_ids[0])]  # a row that cannot be read is failed alone
        loaded: list[tuple[sa.Row, pa.Table]] = []
        for batch in batches:
            try:
                loaded.append((batch, read_staged(self.staging_dir, batch.staged_path)))
            except (OSError, pa.ArrowException):
                break  # that batch is failed alone when its turn comes, with what went wrong
        if len(loaded) < 2:
            return [self.process(batches[0])]
        started = self.clock()
        mark_processing(self.engine, tenant_id, [batch.batch_id for batch, _ in loaded], started)
        try:
            progresses = self._apply_together(tenant_id, loaded)
        except Exception as error:
            log.warning("batches %s/%s…: applying %d together failed (%s); applying them one by one", tenant_id,
                        loaded[0][0].batch_id, len(loaded), _cause(error))
            progresses = []
            for batch, items in loaded:  # their attempt is the one just counted
                progresses.append(self._apply(batch, items, attempt=batch.attempts + 1))
                if progresses[-1] == PROCESSING:
                    break
        for (batch, _), progress in zip(loaded, progresses, strict=False):
            self._report(batch, progress, started)
        return progresses

    def _apply_together(self, tenant_id: str, loaded: list[tuple[sa.Row, pa.Table]]) -> list[str]:
        with self.engine.begin() as conn:
            self._limit_lock_waits(conn)
            outcomes = apply_batches(conn, tenant_id, loaded[0][0].kind,
                                     [BatchItems(batch.batch_id, batch.generated_at, items) for batch, items in loaded],
                                     self.clock())
            now = self.clock()
            return [finish_batch(conn, tenant_id, batch.batch_id, counts=outcome.counts,
                                 rejected_items=outcome.rejected_items,
                                 rejected_items_truncated=outcome.rejected_items_truncated, now=now)
                    for (batch, _), outcome in zip(loaded, outcomes, strict=True)]

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
        self._report(batch, progress, started)
        return progress

    def _report(self, batch: sa.Row, progress: str, started: datetime) -> None:
        if self.on_attempt is not None:
            waited = (started - batch.received_time).total_seconds() if batch.attempts == 0 else None
            self.on_attempt(Attempt(batch.kind, progress, waited, (self.clock() - started).total_seconds()))

    def _attempt(self, batch: sa.Row) -> str:
        tenant_id, batch_id = batch.tenant_id, batch.batch_id
        if batch.attempts >= self.retry.max_attempts:
            # Earlier attempts ended with no outcome recorded: workers killed mid-batch (by this batch, maybe).
            return self._fail(tenant_id, batch_id, f"Gave up after {batch.attempts} attempts: each was interrupted "
                              "before it finished (the worker stopped or lost its database); nothing was applied.")
        mark_processing(self.engine, tenant_id, [batch_id], self.clock())
        try:
            items = read_staged(self.staging_dir, batch.staged_path)
        except FileNotFoundError:
            log.error("batch %s/%s: staged file %s is missing", tenant_id, batch_id, batch.staged_path)
            return self._fail(tenant_id, batch_id, "The staged batch file is missing; nothing was applied.")
        except (OSError, pa.ArrowException) as error:
            log.error("batch %s/%s: staged file unreadable: %s", tenant_id, batch_id, error)
            return self._fail(tenant_id, batch_id, "The staged batch file cannot be read.")
        return self._apply(batch, items, attempt=batch.attempts + 1)

    def _apply(self, batch: sa.Row, items: pa.Table, attempt: int) -> str:
        """The batch applied alone with its status in one transaction; on failure, its retry or its end."""
        tenant_id, batch_id = batch.tenant_id, batch.batch_id
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
        """Process until stopped; sleep poll_seconds when idle unless woken (on DuckDB an idle worker's rounds ask
        the database only once something was committed or a retry has come: db.polls). Beats its heartbeat every
        heartbeat_seconds and removes expired data every retention_interval_seconds."""
        wake = wake or threading.Event()
        self._beat_every = self.heartbeat_seconds
        gate = PollGate(self.engine)
        try:
            while not stop.is_set():
                woken = wake.is_set()
                wake.clear()
                handled = 0
                try:
                    self._beat_if_due()
                    if woken or gate.open():
                        gate.polling()
                        handled, left = self._round()
                        if not handled and not left:
                            now = self.clock()
                            gate.idle(next_retry_time(self.engine, now), now)
                except Exception as error:
                    if not is_transient(error):
                        raise
                    log.warning("pipeline: database unavailable (%s); retrying", _cause(error))
                self._remove_expired_if_due()
                self._expire_carts_if_due()
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
                    leftovers = drop_stale_ingested(self.engine, _STALE_INGESTED_SECONDS)
                    log.info("retention: removed %s and %d tables left by failed applies", removed, leftovers)
        except Exception:
            log.exception("retention failed; next try in %.0f s", self.retention_interval_seconds)


    def _expire_carts_if_due(self) -> None:
        """Expire the carts whose hold has passed, then sleep until the oldest cart left falls due; a cart made later
        falls due a hold from now at the earliest, so that bounds the wait."""
        now = self.clock()
        if self.cart_hold is None or (self._carts_due is not None and now < self._carts_due):
            return
        try:
            next_due = expire_carts(self.engine, now, self.cart_hold)
        except Exception:
            log.exception("expiring click and collect carts failed; next try in %.0f s", _CART_RETRY.total_seconds())
            self._carts_due = now + _CART_RETRY
            return
        self._carts_due = min(next_due or now + self.cart_hold, now + self.cart_hold)


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
