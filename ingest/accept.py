"""An upload, from body to staged Parquet and a PENDING batch row, or the contract's refusal.

Order of refusals (DESIGN.md): 415, 413 body size, 413 decompression, 400 parse, 413 items, 400 validation.
A batch id already taken answers before validation: 200 for the same decompressed body, else 409, so a retry
of an accepted upload is never refused for a rule that depends on today's date.
"""

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import sqlalchemy as sa

from contracts.errors import BatchIdReused, ValidationFailed
from ingest.body import decompress_body
from ingest.envelope import check_batch
from store.batches import NewBatch, get_batch, record_batch
from store.staging import stage_items, staged_name


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


def _repeated(row: sa.Row, kind: str, body_sha256: str) -> Accepted:
    if row.kind != kind or row.body_sha256 != body_sha256:
        raise BatchIdReused(f"Batch {row.batch_id} was already uploaded with a different payload; "
                            "read its status instead of retrying.")
    return Accepted(row, created=False)


def accept_batch(engine: sa.Engine, staging_dir: Path, tenant_id: str, raw_batch_id: str, kind: str, *,
                 body: bytes, content_type: str | None, content_encoding: str | None, now: datetime) -> Accepted:
    batch_id = canonical_batch_id(raw_batch_id)
    decompressed = decompress_body(body, content_type, content_encoding)
    body_sha256 = hashlib.sha256(decompressed).hexdigest()
    if existing := get_batch(engine, tenant_id, batch_id):
        return _repeated(existing, kind, body_sha256)
    checked = check_batch(kind, decompressed, now.date())
    name = staged_name(tenant_id, batch_id, body_sha256)
    stage_items(staging_dir, name, checked.items)
    batch = NewBatch(batch_id=batch_id, kind=kind, body_sha256=body_sha256, staged_path=name,
                     generated_at=checked.generated_at, batch_index=checked.batch_index,
                     batch_total=checked.batch_total, item_count=checked.item_count, warnings=checked.warnings,
                     received_time=now)
    if not record_batch(engine, tenant_id, batch):
        # A concurrent upload of the same id won the race. Its file has our name only if its body is ours.
        winner = get_batch(engine, tenant_id, batch_id)
        if winner.staged_path != name:
            (staging_dir / name).unlink(missing_ok=True)  # a refused upload leaves nothing behind
        return _repeated(winner, kind, body_sha256)
    return Accepted(get_batch(engine, tenant_id, batch_id), created=True)
