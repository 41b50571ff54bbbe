"""Store rows rendered as the contract's JSON documents."""

from typing import Any

import orjson
import sqlalchemy as sa

from contracts.rendering import instant


def batch_status(row: sa.Row) -> dict[str, Any]:
    """The batch status as the contract shows it."""
    finished = row.applied_count is not None
    counts = {"items": row.item_count, "applied": row.applied_count, "superseded": row.superseded_count,
              "locked": row.locked_count, "rejected": row.rejected_count} if finished else None
    return {
        "batchId": row.batch_id, "batchKind": row.kind, "progress": row.progress,
        "generatedAt": instant(row.generated_at), "batchIndex": row.batch_index, "batchTotal": row.batch_total,
        "itemCount": row.item_count, "receivedTime": instant(row.received_time),
        "startedTime": instant(row.started_time), "completedTime": instant(row.completed_time),
        "counts": counts,
        "rejectedItems": orjson.loads(row.rejected_items) if row.rejected_items is not None else None,
        "rejectedItemsTruncated": row.rejected_items_truncated,
        "warnings": orjson.loads(row.warnings), "errorMessage": row.error_message,
    }
