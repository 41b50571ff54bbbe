"""An upload, from body to staged Parquet and a PENDING batch row, or the contract's refusal.

Order of refusals (DESIGN.md): 415, 413 body size, 413 decompression, 400 parse, 413 items, 400 validation.
A batch id already taken answers before validation: 200 for the same decompressed body, else 409, so a retry
of an accepted upload is never refused for a rule that depends on today's date.

The work on the body (`body_digest`, `stage_upload`: decompress, hash, parse, check, write the Parquet file) needs
no database and takes CPU for up to a second, so the app runs it in worker processes; `accept_upload` puts it in
the contract's order around the database calls, through whichever runners it is given, and `accept_batch` does the
same in the calling thread.
"""

import asyncio
import hashlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from contracts.errors import BatchIdReused, ValidationFailed
from db.batches import StagedBatch, get_batch, record_batch
from db.staging import stage_items, staged_name
from ingest.body import decompress_body
from ingest.envelope import check_batch

Runner = Callable[..., Awaitable[Any]]  # runs function(*args, **kwargs) somewhere and returns its result


@dataclass(frozen=True)
class Accepted:
    batch: sa.Row  # as recorded; the HTTP layer renders its status
    created: bool  # False: the same upload was accepted before


def canonical_batch_id(raw: str) -> str:
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        raise ValidationFailed("batchId must be a UUID; nothing was stored.", {"errors": [{
            "path": "batchId", "code": "INVALID_TYPE", "message": "batchId must be a UUID."}],
            "errorsTruncated": False}) from None


def body_digest(body: bytes, content_type: str | None, content_encoding: str | None) -> str:
    """SHA-256 of the decompressed body, after the 415 and 413 checks of decompression."""
    return hashlib.sha256(decompress_body(body, content_type, content_encoding)).hexdigest()


def stage_upload(staging_dir: Path, tenant_id: str, batch_id: str, kind: str, *, body: bytes,
                 content_type: str | None, content_encoding: str | None, today: date) -> StagedBatch:
    decompressed = decompress_body(body, content_type, content_encoding)
    body_sha256 = hashlib.sha256(decompressed).hexdigest()
    checked = check_batch(kind, decompressed, today)
    name = staged_name(tenant_id, batch_id, body_sha256)
    stage_items(staging_dir, name, checked.items)
    return StagedBatch(body_sha256, name, checked.generated_at, checked.batch_index, checked.batch_total,
                  checked.item_count, checked.warnings)


async def _run_here(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return function(*args, **kwargs)


def accept_batch(engine: sa.Engine, staging_dir: Path, tenant_id: str, raw_batch_id: str, kind: str, *, body: bytes,
                 content_type: str | None, content_encoding: str | None, now: datetime) -> Accepted:
    return asyncio.run(accept_upload(engine, staging_dir, tenant_id, raw_batch_id, kind, body=body,
                                     content_type=content_type, content_encoding=content_encoding, now=now,
                                     compute=_run_here, query=_run_here))


async def accept_upload(engine: sa.Engine, staging_dir: Path, tenant_id: str, raw_batch_id: str, kind: str, *,
                        body: bytes, content_type: str | None, content_encoding: str | None, now: datetime,
                        compute: Runner, query: Runner) -> Accepted:
    """compute runs the work on the body, query the database calls."""
    batch_id = canonical_batch_id(raw_batch_id)
    if existing := await query(get_batch, engine, tenant_id, batch_id):
        return _repeated(existing, kind, await compute(body_digest, body, content_type, content_encoding))
    staged = await compute(stage_upload, staging_dir, tenant_id, batch_id, kind, body=body,
                           content_type=content_type, content_encoding=content_encoding, today=now.date())
    return await query(_record, engine, staging_dir, tenant_id, batch_id, kind, staged, now)


def _repeated(row: sa.Row, kind: str, body_sha256: str) -> Accepted:
    if row.kind != kind or row.body_sha256 != body_sha256:
        raise BatchIdReused(f"Batch {row.batch_id} was already uploaded with a different payload; "
                            "read its status instead of retrying.")
    return Accepted(row, created=False)


def _record(engine: sa.Engine, staging_dir: Path, tenant_id: str, batch_id: str, kind: str, staged: StagedBatch,
            now: datetime) -> Accepted:
    try:
        recorded = record_batch(engine, tenant_id, batch_id, kind, staged, received_time=now)
    except sa.exc.SQLAlchemyError:
        _discard_unrecorded(engine, staging_dir, tenant_id, batch_id, staged.staged_path)
        raise
    if recorded is None:
        # A concurrent upload of the same id won the race. Its file has our name only if its body is ours.
        winner = get_batch(engine, tenant_id, batch_id)
        if winner.staged_path != staged.staged_path:
            (staging_dir / staged.staged_path).unlink(missing_ok=True)  # a refused upload leaves nothing behind
        return _repeated(winner, kind, staged.body_sha256)
    return Accepted(recorded, created=True)


def _discard_unrecorded(engine: sa.Engine, staging_dir: Path, tenant_id: str, batch_id: str, name: str) -> None:
    """Recording failed (the database went away, say): remove the staged file unless a concurrent upload of the same
    body recorded it. When the database cannot tell, keep it: a file too many is better than a batch without one."""
    try:
        holder = get_batch(engine, tenant_id, batch_id)
    except sa.exc.SQLAlchemyError:
        return
    if holder is None or holder.staged_path != name:
        (staging_dir / name).unlink(missing_ok=True)
