"""One upload run: its items split into batches with deterministic ids, sent, and followed to their final state.

A rerun of the same file with the same `generatedAt` (against the same limits) makes the very same batches: the
same ids (uuid5 of generatedAt, kind and index) and byte-identical JSON, so the server answers 200 for every batch
it already holds and accepts only the rest. Nothing is kept on the client's disk.
"""

import gzip
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import polars as pl

from contracts.formats import MAX_INTEGER
from pia_client.api import PiaClient
from pia_client.retries import ApiCallFailed, is_transient
from pia_client.upload_file import ECOM, RETAIL, SKU, Item

# The namespace of pia upload's batch ids; changing it would make every rerun a new run.
BATCH_ID_NAMESPACE = uuid.UUID("5d1c2f0e-7c1a-5b8e-9f43-3b6f0a2d9c17")
FINAL = frozenset({"COMPLETED", "COMPLETED_WITH_REJECTED_ITEMS", "FAILED"})


def batch_id(generated_at: str, kind: str, index: int) -> str:
    return str(uuid.uuid5(BATCH_ID_NAMESPACE, f"{generated_at}|{kind}|{index}"))


def generated_at_of_file(path: Path) -> str:
    """The run's generatedAt when none is given: the file's modification time, in UTC. It stays the same across
    reruns of the file, and a newer export of the planning run is a later one, as SPEC wants of generatedAt."""
    modified = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    return modified.isoformat(timespec="microseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class Batch:
    index: int  # 1-based, as batchIndex
    total: int
    batch_id: str
    items: tuple[Item, ...]
    content: bytes
    content_encoding: str | None


def _envelope(generated_at: str, index: int, total: int, items: tuple[Item, ...]) -> dict[str, Any]:
    return {"generatedAt": generated_at, "batchIndex": index, "batchTotal": total, "itemCount": len(items),
            "items": [item.body for item in items]}


def _encoded(document: dict[str, Any], limits: dict[str, int]) -> tuple[bytes, str | None, int]:
    """The body as sent, its Content-Encoding and its decompressed size. Gzip (mtime 0, so the bytes repeat),
    unless the data compresses beyond the server's maxCompressionRatio: then plain JSON."""
    raw = orjson.dumps(document)
    packed = gzip.compress(raw, compresslevel=6, mtime=0)  # 9: 10x the CPU for 6% less (20,000 forecasts)
    if len(raw) > len(packed) * limits["maxCompressionRatio"]:
        return raw, None, len(raw)
    return packed, "gzip", len(raw)


def _fits(document: dict[str, Any], limits: dict[str, int]) -> bool:
    content, encoding, decompressed = _encoded(document, limits)
    if encoding is None:
        return len(content) <= limits["maxRequestBytes"]
    return len(content) <= limits["recommendedRequestBytes"] and decompressed <= limits["maxDecompressedBytes"]


def _sized(chunk: tuple[Item, ...], generated_at: str, limits: dict[str, int]) -> list[tuple[Item, ...]]:
    """`chunk` halved until each part's body is within the recommended request size (the largest index digits
    stand in for the final ones)."""
    if len(chunk) == 1 or _fits(_envelope(generated_at, MAX_INTEGER, MAX_INTEGER, chunk), limits):
        return [chunk]
    half = len(chunk) // 2
    return _sized(chunk[:half], generated_at, limits) + _sized(chunk[half:], generated_at, limits)


def plan_batches(items: list[Item], kind: str, generated_at: str, limits: dict[str, int],
                 items_per_batch: int | None = None) -> list[Batch]:
    """The run's batches: recommendedItemsPerBatch items each (or fewer, when asked), fewer where the body would
    pass recommendedRequestBytes."""
    per_batch = min(limits["recommendedItemsPerBatch"], limits["maxItemsPerBatch"], items_per_batch or MAX_INTEGER)
    chunks = [part for start in range(0, len(items), per_batch)
              for part in _sized(tuple(items[start:start + per_batch]), generated_at, limits)]
    batches = []
    for index, chunk in enumerate(chunks, start=1):
        content, encoding, _ = _encoded(_envelope(generated_at, index, len(chunks), chunk), limits)
        batches.append(Batch(index, len(chunks), batch_id(generated_at, kind, index), chunk, content, encoding))
    return batches


@dataclass(frozen=True)
class Delivery:
    """What became of sending one batch: accepted (`created`: new, else a replay of an earlier send) or not."""

    batch: Batch
    status: dict[str, Any] | None
    created: bool = False
    error: Exception | None = None

    @property
    def delivered(self) -> bool:
        return self.status is not None


def send_batches(client: PiaClient, kind: str, batches: list[Batch],
                 on_delivery: Callable[[Delivery], None] = lambda _: None) -> list[Delivery]:
    """PUT the batches in order. A batch the server refuses (400, 409, 413, …) is reported and the next one is
    sent; when the server stays unreachable after the retries, the run stops there (a rerun sends the rest)."""
    deliveries = []
    for batch in batches:
        try:
            accepted = client.put_batch(kind, batch.batch_id, batch.content, batch.content_encoding)
            delivery = Delivery(batch, accepted.status, created=accepted.created)
        except (ApiCallFailed, httpx.TransportError) as error:
            delivery = Delivery(batch, None, error=error)
        deliveries.append(delivery)
        on_delivery(delivery)
        if delivery.error is not None and is_transient(delivery.error):
            break
    return deliveries


def wait_for_batches(client: PiaClient, kind: str, deliveries: list[Delivery], first_poll: float = 0.5,
                     longest_poll: float = 10.0,
                     on_final: Callable[[dict[str, Any]], None] = lambda _: None) -> dict[str, dict[str, Any]]:
    """Poll the delivered batches until each is in a final state; their last statuses by batch id."""
    statuses = {d.batch.batch_id: d.status for d in deliveries if d.status is not None}
    for status in statuses.values():
        if status["progress"] in FINAL:
            on_final(status)
    waiting = [batch_id for batch_id, status in statuses.items() if status["progress"] not in FINAL]
    pause = first_poll
    while waiting:
        time.sleep(pause)
        pause = min(pause * 2, longest_poll)
        for batch_id in list(waiting):
            status = statuses[batch_id] = client.batch_status(kind, batch_id)
            if status["progress"] in FINAL:
                waiting.remove(batch_id)
                on_final(status)
    return statuses


REJECTED_COLUMNS = ("batchIndex", "batchId", "itemIndex", "rows", RETAIL, ECOM, SKU, "code")


def rejected_items(deliveries: list[Delivery], statuses: dict[str, dict[str, Any]]) -> pl.DataFrame:
    """Every rejected item listed by the final statuses, with the rows of the file it came from."""
    records = []
    for delivery in deliveries:
        status = statuses.get(delivery.batch.batch_id) or {}
        for rejected in status.get("rejectedItems") or ():
            item = delivery.batch.items[rejected["index"]]
            records.append({"batchIndex": delivery.batch.index, "batchId": delivery.batch.batch_id,
                            "itemIndex": rejected["index"], "rows": " ".join(map(str, item.rows)),
                            RETAIL: rejected.get(RETAIL), ECOM: rejected.get(ECOM), SKU: rejected[SKU],
                            "code": rejected["code"]})
    return pl.DataFrame(records, schema={c: pl.Int64 if c in ("batchIndex", "itemIndex") else pl.String
                                         for c in REJECTED_COLUMNS})
