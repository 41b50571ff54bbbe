"""Demand planning batch rows: recorded at upload, claimed and finished by the pipeline."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import sqlalchemy as sa

from db.held import Page, PageKey
from db.schema import batches
from db.tenancy import across_tenants

PENDING, PROCESSING = "PENDING", "PROCESSING"
COMPLETED, COMPLETED_WITH_REJECTED_ITEMS, FAILED = "COMPLETED", "COMPLETED_WITH_REJECTED_ITEMS", "FAILED"
PROGRESS_STATES = (PENDING, PROCESSING, COMPLETED, COMPLETED_WITH_REJECTED_ITEMS, FAILED)
UNFINISHED = (PENDING, PROCESSING)
FINISHED = (COMPLETED, COMPLETED_WITH_REJECTED_ITEMS, FAILED)


@dataclass(frozen=True)
class StagedBatch:
    """A checked upload whose items are staged: what its batch row records of the body."""

    body_sha256: str
    staged_path: str
    generated_at: datetime
    batch_index: int | None
    batch_total: int | None
    item_count: int
    warnings: list[dict[str, Any]]


def _key(tenant_id: str, batch_id: str) -> sa.ColumnElement[bool]:
    return sa.and_(batches.c.tenant_id == tenant_id, batches.c.batch_id == batch_id)


def record_batch(engine: sa.Engine, tenant_id: str, batch_id: str, kind: str, batch: StagedBatch,
                 received_time: datetime) -> sa.Row | None:
    """Record an accepted batch as PENDING and return its row as stored; None when the id is already taken (a
    concurrent upload)."""
    values = {
        "tenant_id": tenant_id, "batch_id": batch_id, "kind": kind, "body_sha256": batch.body_sha256,
        "staged_path": batch.staged_path, "generated_at": batch.generated_at, "batch_index": batch.batch_index,
        "batch_total": batch.batch_total, "item_count": batch.item_count, "progress": PENDING,
        "received_time": received_time, "rejected_items_truncated": False,
        "warnings": orjson.dumps(batch.warnings).decode(), "attempts": 0,
    }
    try:
        with engine.begin() as conn:
            return conn.execute(batches.insert().values(values).returning(*batches.c)).one()
    except sa.exc.IntegrityError:
        return None


def get_batch(engine: sa.Engine, tenant_id: str, batch_id: str) -> sa.Row | None:
    with engine.connect() as conn:
        return conn.execute(sa.select(batches).where(_key(tenant_id, batch_id))).first()


@dataclass(frozen=True)
class BatchKey(PageKey):
    received_time: str  # ISO 8601, as the cursor carries it
    batch_id: str


def batch_page(engine: sa.Engine, tenant_id: str, kind: str, *, received_since: datetime | None,
               after: BatchKey | None, limit: int) -> Page[BatchKey]:
    """A tenant's batches of one kind in the order they were received (then by id), from received_since on."""
    query = sa.select(batches).where(batches.c.tenant_id == tenant_id, batches.c.kind == kind)
    if received_since is not None:
        query = query.where(batches.c.received_time >= received_since)
    if after is not None:
        query = query.where(sa.tuple_(batches.c.received_time, batches.c.batch_id)
                            > sa.tuple_(sa.literal(datetime.fromisoformat(after.received_time)),
                                        sa.literal(after.batch_id)))
    with engine.connect() as conn:
        rows = list(conn.execute(query.order_by(batches.c.received_time, batches.c.batch_id).limit(limit + 1)))
    page = rows[:limit]
    more = len(rows) > limit
    return Page(page, BatchKey(page[-1].received_time.isoformat(), page[-1].batch_id) if more else None)


def tenants_ready(engine: sa.Engine, now: datetime) -> list[str]:
    """Tenants with unfinished batches, less those waiting for a retry after a transient failure.

    Only unfinished rows are read: on PostgreSQL through the partial index ix_batches_unfinished.
    """
    waiting_until = sa.func.max(batches.c.retry_at)
    with engine.connect() as conn:
        return list(conn.scalars(across_tenants(
            sa.select(batches.c.tenant_id).where(batches.c.progress.in_(UNFINISHED))
            .group_by(batches.c.tenant_id).having(sa.or_(waiting_until.is_(None), waiting_until <= now))
            .order_by(batches.c.tenant_id), "the workers' poll serves every tenant")))


def next_retry_time(engine: sa.Engine, now: datetime) -> datetime | None:
    """The earliest retry still to come of any tenant's unfinished batch: when an idle worker polls again
    (db.polls)."""
    with engine.connect() as conn:
        return conn.scalar(across_tenants(
            sa.select(sa.func.min(batches.c.retry_at)).where(batches.c.progress.in_(UNFINISHED),
                                                               batches.c.retry_at > now),
            "the workers' poll serves every tenant"))


def in_line(engine: sa.Engine, tenant_id: str, limit: int = 1) -> list[sa.Row]:
    """The tenant's oldest unfinished batches, up to limit, in receivedTime order (the order they are processed
    in): batch_id, kind, attempts, item_count and retry_at of each.

    Only columns every row can decode are read, so a row holding a value the driver cannot decode is still named
    and can be failed.
    """
    with engine.connect() as conn:
        return list(conn.execute(sa.select(batches.c.batch_id, batches.c.kind, batches.c.attempts,
                                           batches.c.item_count, batches.c.retry_at)
                                 .where(batches.c.tenant_id == tenant_id, batches.c.progress.in_(UNFINISHED))
                                 .order_by(batches.c.received_time, batches.c.batch_id).limit(limit)))


def get_batches(engine: sa.Engine, tenant_id: str, batch_ids: list[str]) -> list[sa.Row]:
    """The tenant's batches of these ids, in receivedTime order."""
    with engine.connect() as conn:
        return list(conn.execute(sa.select(batches).where(batches.c.tenant_id == tenant_id,
                                                          batches.c.batch_id.in_(batch_ids))
                                 .order_by(batches.c.received_time, batches.c.batch_id)))


def mark_processing(engine: sa.Engine, tenant_id: str, batch_ids: list[str], now: datetime) -> None:
    """Counts an attempt at each of the batches, committed before the attempt, so one cut short counts too."""
    with engine.begin() as conn:
        conn.execute(batches.update().where(batches.c.tenant_id == tenant_id, batches.c.batch_id.in_(batch_ids))
                     .values(progress=PROCESSING, started_time=now, retry_at=None, attempts=batches.c.attempts + 1))


def retry_later(engine: sa.Engine, tenant_id: str, batch_id: str, retry_at: datetime) -> None:
    """After a transient failure: the batch stays PROCESSING (the contract has no way back to PENDING) and
    its tenant waits until retry_at."""
    with engine.begin() as conn:
        conn.execute(batches.update().where(_key(tenant_id, batch_id)).values(retry_at=retry_at))


def finish_batch(conn: sa.Connection, tenant_id: str, batch_id: str, *, counts: dict[str, int],
                 rejected_items: list[dict[str, Any]], rejected_items_truncated: bool, now: datetime) -> str:
    """Write the final status in the caller's transaction, the one that applied the items; returns it."""
    progress = COMPLETED_WITH_REJECTED_ITEMS if counts["rejected"] else COMPLETED
    conn.execute(batches.update().where(_key(tenant_id, batch_id)).values(
        progress=progress, completed_time=now, applied_count=counts["applied"],
        superseded_count=counts["superseded"], locked_count=counts["locked"], rejected_count=counts["rejected"],
        rejected_items=orjson.dumps(rejected_items).decode(), rejected_items_truncated=rejected_items_truncated,
        error_message=None))
    return progress


def fail_batch(engine: sa.Engine, tenant_id: str, batch_id: str, message: str, now: datetime) -> None:
    with engine.begin() as conn:
        conn.execute(batches.update().where(_key(tenant_id, batch_id))
                     .values(progress=FAILED, completed_time=now, retry_at=None, error_message=message))


def requeue_failed(engine: sa.Engine, tenant_id: str, batch_id: str) -> bool:
    """Put a FAILED batch back in line (at its original place), with its attempts counted afresh; False unless
    it was FAILED."""
    with engine.begin() as conn:
        result = conn.execute(batches.update().where(_key(tenant_id, batch_id), batches.c.progress == FAILED)
                              .values(progress=PENDING, started_time=None, completed_time=None, error_message=None,
                                      attempts=0))
    return result.rowcount == 1


def find_batch(engine: sa.Engine, batch_id: str) -> list[sa.Row]:
    """Operators name a batch by id alone; ids are the clients' own, so several tenants may share one."""
    with engine.connect() as conn:
        return list(conn.execute(across_tenants(sa.select(batches).where(batches.c.batch_id == batch_id),
                                                "an operator names a batch by id alone")))


def counts_by_progress(engine: sa.Engine, tenant_id: str | None = None) -> dict[str, int]:
    """Batches by progress state, of every tenant or of one."""
    query = sa.select(batches.c.progress, sa.func.count()).group_by(batches.c.progress)
    if tenant_id is not None:
        query = query.where(batches.c.tenant_id == tenant_id)
    with engine.connect() as conn:
        found = {progress: count for progress, count in conn.execute(
            query if tenant_id is not None else across_tenants(query, "the service's pipeline status"))}
    return {progress: found.get(progress, 0) for progress in PROGRESS_STATES}


def run_times(engine: sa.Engine, tenant_id: str, kind: str, *, before: datetime | None,
              limit: int) -> tuple[list[datetime], datetime | None]:
    """The generatedAt of the tenant's planning runs of one kind (the batches a run sent share it), newest first and
    older than `before`; with the generatedAt to continue before when older runs follow."""
    query = (sa.select(batches.c.generated_at).distinct()
             .where(batches.c.tenant_id == tenant_id, batches.c.kind == kind))
    if before is not None:
        query = query.where(batches.c.generated_at < before)
    with engine.connect() as conn:
        times = list(conn.scalars(query.order_by(batches.c.generated_at.desc()).limit(limit + 1)))
    return times[:limit], times[limit - 1] if len(times) > limit else None


def batches_of_runs(engine: sa.Engine, tenant_id: str, kind: str, generated_at: list[datetime]) -> list[sa.Row]:
    """The batches of these runs, newest run first, each run's in batchIndex order (then as received)."""
    with engine.connect() as conn:
        return list(conn.execute(
            sa.select(batches).where(batches.c.tenant_id == tenant_id, batches.c.kind == kind,
                                     batches.c.generated_at.in_(generated_at))
            .order_by(batches.c.generated_at.desc(), batches.c.batch_index, batches.c.received_time)))


def outcomes(engine: sa.Engine, keys: list[tuple[str, str]]) -> list[sa.Row]:
    """tenant_id, batch_id, progress and error_message of the batches named; only columns any row can decode."""
    if not keys:
        return []
    with engine.connect() as conn:
        return list(conn.execute(
            sa.select(batches.c.tenant_id, batches.c.batch_id, batches.c.progress, batches.c.error_message)
            .where(sa.tuple_(batches.c.tenant_id, batches.c.batch_id).in_(keys))
            .order_by(batches.c.tenant_id, batches.c.received_time)))


def oldest_unfinished(engine: sa.Engine, tenant_id: str | None = None) -> sa.Row:
    """The unfinished batches at a glance (healthcheck, metrics, the console), of every tenant or of one: whether
    there are any, how many wait (PENDING) and are being applied (PROCESSING), the receivedTime of the oldest
    PENDING one and the start of the oldest PROCESSING one."""
    pending, processing = batches.c.progress == PENDING, batches.c.progress == PROCESSING
    query = sa.select(
        sa.func.min(batches.c.received_time).filter(pending).label("oldest_pending"),
        (sa.func.count() > 0).label("any_unfinished"),
        sa.func.count().filter(pending).label("pending"),
        sa.func.count().filter(processing).label("processing"),
        sa.func.min(batches.c.started_time).filter(processing).label("oldest_processing"),
    ).where(batches.c.progress.in_(UNFINISHED))
    if tenant_id is not None:
        query = query.where(batches.c.tenant_id == tenant_id)
    with engine.connect() as conn:
        return conn.execute(
            query if tenant_id is not None else across_tenants(query, "the service's health and metrics")).one()


def unfinished_staged_paths(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.scalars(across_tenants(
            sa.select(batches.c.staged_path).where(batches.c.progress.in_(UNFINISHED)),
            "retention keeps every tenant's unfinished batches' files")))
