"""Demand planning batch rows: recorded at upload, claimed and finished by the pipeline."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import sqlalchemy as sa

from store.schema import batches

PENDING, PROCESSING = "PENDING", "PROCESSING"
COMPLETED, COMPLETED_WITH_REJECTED_ITEMS, FAILED = "COMPLETED", "COMPLETED_WITH_REJECTED_ITEMS", "FAILED"
PROGRESS_STATES = (PENDING, PROCESSING, COMPLETED, COMPLETED_WITH_REJECTED_ITEMS, FAILED)
UNFINISHED = (PENDING, PROCESSING)


@dataclass(frozen=True)
class NewBatch:
    batch_id: str
    kind: str
    body_sha256: str
    staged_path: str
    generated_at: datetime
    batch_index: int | None
    batch_total: int | None
    item_count: int
    warnings: list[dict[str, Any]]
    received_time: datetime


def _key(tenant_id: str, batch_id: str) -> sa.ColumnElement[bool]:
    return sa.and_(batches.c.tenant_id == tenant_id, batches.c.batch_id == batch_id)


def record_batch(engine: sa.Engine, tenant_id: str, batch: NewBatch) -> bool:
    """Record an accepted batch as PENDING; False when the id is already taken (a concurrent upload)."""
    values = {
        "tenant_id": tenant_id, "batch_id": batch.batch_id, "kind": batch.kind, "body_sha256": batch.body_sha256,
        "staged_path": batch.staged_path, "generated_at": batch.generated_at, "batch_index": batch.batch_index,
        "batch_total": batch.batch_total, "item_count": batch.item_count, "progress": PENDING,
        "received_time": batch.received_time, "rejected_items_truncated": False,
        "warnings": orjson.dumps(batch.warnings).decode(), "attempts": 0,
    }
    try:
        with engine.begin() as conn:
            conn.execute(batches.insert().values(values))
    except sa.exc.IntegrityError:
        return False
    return True


def get_batch(engine: sa.Engine, tenant_id: str, batch_id: str) -> sa.Row | None:
    with engine.connect() as conn:
        return conn.execute(sa.select(batches).where(_key(tenant_id, batch_id))).first()


def tenants_with_unfinished_batches(engine: sa.Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.scalars(sa.select(batches.c.tenant_id).distinct()
                                 .where(batches.c.progress.in_(UNFINISHED)).order_by(batches.c.tenant_id)))


def next_unfinished_batch(engine: sa.Engine, tenant_id: str) -> sa.Row | None:
    """The tenant's oldest batch not yet finished: batches are processed in receivedTime order."""
    with engine.connect() as conn:
        return conn.execute(sa.select(batches)
                            .where(batches.c.tenant_id == tenant_id, batches.c.progress.in_(UNFINISHED))
                            .order_by(batches.c.received_time, batches.c.batch_id).limit(1)).first()


def mark_processing(engine: sa.Engine, tenant_id: str, batch_id: str, now: datetime) -> None:
    with engine.begin() as conn:
        conn.execute(batches.update().where(_key(tenant_id, batch_id))
                     .values(progress=PROCESSING, started_time=now, attempts=batches.c.attempts + 1))


def finish_batch(conn: sa.Connection, tenant_id: str, batch_id: str, *, counts: dict[str, int],
                 rejected_items: list[dict[str, Any]], rejected_items_truncated: bool, now: datetime) -> None:
    """Write the final status in the caller's transaction, the one that applied the items."""
    progress = COMPLETED_WITH_REJECTED_ITEMS if counts["rejected"] else COMPLETED
    conn.execute(batches.update().where(_key(tenant_id, batch_id)).values(
        progress=progress, completed_time=now, applied_count=counts["applied"],
        superseded_count=counts["superseded"], locked_count=counts["locked"], rejected_count=counts["rejected"],
        rejected_items=orjson.dumps(rejected_items).decode(), rejected_items_truncated=rejected_items_truncated,
        error_message=None))


def fail_batch(engine: sa.Engine, tenant_id: str, batch_id: str, message: str, now: datetime) -> None:
    with engine.begin() as conn:
        conn.execute(batches.update().where(_key(tenant_id, batch_id))
                     .values(progress=FAILED, completed_time=now, error_message=message))


def requeue_failed(engine: sa.Engine, tenant_id: str, batch_id: str) -> bool:
    """Put a FAILED batch back in line (at its original place); False unless it was FAILED."""
    with engine.begin() as conn:
        result = conn.execute(batches.update().where(_key(tenant_id, batch_id), batches.c.progress == FAILED)
                              .values(progress=PENDING, started_time=None, completed_time=None, error_message=None))
    return result.rowcount == 1


def find_batch(engine: sa.Engine, batch_id: str) -> list[sa.Row]:
    """Operators name a batch by id alone; ids are the clients' own, so several tenants may share one."""
    with engine.connect() as conn:
        return list(conn.execute(sa.select(batches).where(batches.c.batch_id == batch_id)))


def counts_by_progress(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(batches.c.progress, sa.func.count()).group_by(batches.c.progress))
        found = {progress: count for progress, count in rows}
    return {progress: found.get(progress, 0) for progress in PROGRESS_STATES}
