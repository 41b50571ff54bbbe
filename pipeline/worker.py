"""The pipeline worker: batches of a tenant one at a time, in receivedTime order, each applied with its status.

Order across processes comes from a per-tenant lock: a PostgreSQL session advisory lock when workers share a
PostgreSQL database (it dies with the worker's connection, so a killed worker never blocks its tenant), and an
in-process lock for the embedded DuckDB file (one process only). Whoever holds a tenant's lock owns all its
unfinished batches, so a batch left PROCESSING by a killed worker is simply processed again.
"""

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Protocol

import pyarrow as pa
import sqlalchemy as sa

from pipeline.apply import apply_batch
from store.batches import (
    fail_batch,
    finish_batch,
    mark_processing,
    next_unfinished_batch,
    tenants_with_unfinished_batches,
)
from store.engine import is_duckdb
from store.ids import utc_now
from store.staging import read_staged

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


class Pipeline:
    def __init__(self, engine: sa.Engine, staging_dir: Path, locks: TenantLocks,
                 clock: Callable[[], datetime] = utc_now) -> None:
        self.engine, self.staging_dir, self.locks, self.clock = engine, staging_dir, locks, clock

    def process_pending(self, on_batch: Callable[[sa.Row], None] | None = None) -> int:
        """Process every unfinished batch of every tenant this worker can lock; returns how many."""
        return sum(self.process_tenant(tenant_id, on_batch) or 0
                   for tenant_id in tenants_with_unfinished_batches(self.engine))

    def process_tenant(self, tenant_id: str, on_batch: Callable[[sa.Row], None] | None = None) -> int | None:
        """Process the tenant's unfinished batches in order; None when another worker has the tenant."""
        with self.locks.hold(tenant_id) as held:
            if not held:
                return None
            processed = 0
            while (batch := next_unfinished_batch(self.engine, tenant_id)) is not None:
                self.process(batch)
                processed += 1
                if on_batch:
                    on_batch(batch)
            return processed

    def process(self, batch: sa.Row) -> None:
        tenant_id, batch_id = batch.tenant_id, batch.batch_id
        mark_processing(self.engine, tenant_id, batch_id, self.clock())
        try:
            items = read_staged(self.staging_dir, batch.staged_path)
        except (OSError, pa.ArrowException) as error:
            log.error("batch %s/%s: staged file unreadable: %s", tenant_id, batch_id, error)
            fail_batch(self.engine, tenant_id, batch_id, "The staged batch file cannot be read.", self.clock())
            return
        try:
            with self.engine.begin() as conn:
                outcome = apply_batch(conn, tenant_id, batch.kind, batch_id, batch.generated_at, items, self.clock())
                finish_batch(conn, tenant_id, batch_id, counts=outcome.counts, rejected_items=outcome.rejected_items,
                             rejected_items_truncated=outcome.rejected_items_truncated, now=self.clock())
        except sa.exc.OperationalError:
            raise  # the database went away: the batch stays PROCESSING and is retried, nothing was applied
        except Exception:
            # Deterministic: the same file would fail the same way. Nothing of it was applied.
            log.exception("batch %s/%s failed", tenant_id, batch_id)
            fail_batch(self.engine, tenant_id, batch_id,
                       "Processing failed with an internal error; nothing was applied.", self.clock())

    def run(self, stop: threading.Event, wake: threading.Event | None = None, poll_seconds: float = 1.0) -> None:
        """Process until stopped; sleep poll_seconds when idle unless woken."""
        wake = wake or threading.Event()
        while not stop.is_set():
            wake.clear()
            try:
                processed = self.process_pending()
            except sa.exc.OperationalError as error:
                log.warning("pipeline: database unavailable (%s); retrying", error.orig)
                processed = 0
            if not processed:
                wake.wait(poll_seconds)
