"""Retention: what the service keeps only for a while, removed by age in bulk.

Staged Parquet files go a set time after upload (their mtime), unless their batch is unfinished; finished
batch rows a set time after they finished; audit rows a set time after their request; console sessions once they
expired. Deletes run in chunks of DELETE_CHUNK rows, each its own short transaction, so a first purge of a large
backlog never holds a long lock. Files no batch row names (an upload interrupted between staging and recording)
age out the same way.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from db.batches import FINISHED, unfinished_staged_paths
from db.schema import audit_events, batches, console_sessions, event_outbox, pipeline_workers
from db.tenancy import across_tenants
from settings import Settings

DELETE_CHUNK = 10_000
# A worker killed without retiring leaves its heartbeat row; a day is long enough to look at it afterwards.
DEAD_WORKER_ROWS_KEPT = timedelta(days=1)


@dataclass(frozen=True)
class RetentionPolicy:
    staged_files: timedelta
    finished_batches: timedelta
    audit_events: timedelta
    delivered_events: timedelta

    @classmethod
    def from_settings(cls, settings: Settings) -> "RetentionPolicy":
        return cls(staged_files=timedelta(days=settings.staged_retention_days),
                   finished_batches=timedelta(days=settings.batch_retention_days),
                   audit_events=timedelta(days=settings.audit_retention_days),
                   delivered_events=timedelta(days=settings.delivered_event_retention_days))


@dataclass(frozen=True)
class Removed:
    staged_files: int
    finished_batches: int
    audit_events: int
    worker_rows: int
    delivered_events: int
    console_sessions: int


def remove_expired(engine: sa.Engine, staging_dir: Path, policy: RetentionPolicy, now: datetime) -> Removed:
    return Removed(
        staged_files=remove_staged_files(engine, staging_dir, now - policy.staged_files),
        finished_batches=_delete_in_chunks(
            engine, batches, (batches.c.tenant_id, batches.c.batch_id),
            sa.and_(batches.c.progress.in_(FINISHED), batches.c.completed_time < now - policy.finished_batches)),
        audit_events=_delete_in_chunks(engine, audit_events, (audit_events.c.id,),
                                       audit_events.c.time < now - policy.audit_events),
        worker_rows=_delete_in_chunks(engine, pipeline_workers, (pipeline_workers.c.worker_id,),
                                      pipeline_workers.c.heartbeat_time < now - DEAD_WORKER_ROWS_KEPT),
        delivered_events=_delete_in_chunks(engine, event_outbox, (event_outbox.c.event_id,),
                                           event_outbox.c.delivered_time < now - policy.delivered_events),
        console_sessions=_delete_in_chunks(engine, console_sessions, (console_sessions.c.session_hash,),
                                           console_sessions.c.expires_time < now))


def remove_staged_files(engine: sa.Engine, staging_dir: Path, staged_before: datetime) -> int:
    """Remove staged files last written before staged_before, except those of unfinished batches."""
    if not staging_dir.is_dir():
        return 0
    # Read before the walk: a batch recorded meanwhile has a fresh file, which is too young to go anyway.
    kept = unfinished_staged_paths(engine)
    cutoff = staged_before.timestamp()
    removed = 0
    for path in staging_dir.rglob("*"):
        try:
            expired = path.is_file() and path.stat().st_mtime < cutoff
        except FileNotFoundError:  # another worker's purge was quicker
            continue
        if expired and path.relative_to(staging_dir).as_posix() not in kept:
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def _delete_in_chunks(engine: sa.Engine, table: sa.Table, key: tuple[sa.Column, ...],
                      condition: sa.ColumnElement[bool]) -> int:
    chosen = sa.select(*key).where(condition).limit(DELETE_CHUNK)
    matches = sa.tuple_(*key).in_(chosen) if len(key) > 1 else key[0].in_(chosen)
    delete = across_tenants(table.delete().where(matches), "retention removes every tenant's expired rows")
    total = 0
    while True:
        with engine.begin() as conn:
            deleted = conn.execute(delete).rowcount
        total += deleted
        if deleted < DELETE_CHUNK:
            return total
