"""Building demand planning upload bodies for tests, and waiting for their processing."""

import gzip
import time
import uuid
from datetime import UTC, date, datetime, timedelta
from typing import Any

import httpx
import orjson
import sqlalchemy as sa

from db.batches import fail_batch, get_batch
from db.ids import utc_now
from ingest.accept import accept_batch
from pia_client.api import PiaClient
from settings import Settings

FINISHED = {"COMPLETED", "COMPLETED_WITH_REJECTED_ITEMS", "FAILED"}


def forecast_item(sku: str, *, retail: str | None = "1001", ecom: str | None = None, start: date | None = None,
                  days: int = 30, quantity: str = "1.5") -> dict[str, Any]:
    start = start or datetime.now(UTC).date()
    item: dict[str, Any] = {"skuNumber": sku, "horizonStartDate": start.isoformat(),
                            "horizonEndDate": (start + timedelta(days=days - 1)).isoformat(),
                            "quantities": [quantity] * days}
    if retail:
        item["retailStoreNumber"] = retail
    if ecom:
        item["ecomStoreNumber"] = ecom
    return item


def replenishment_item(sku: str, store: str = "1001", reorder: str = "5", maximum: str = "20") -> dict[str, Any]:
    return {"retailStoreNumber": store, "skuNumber": sku, "reorderPoint": reorder, "maximumInventory": maximum}


def envelope(items: list[dict[str, Any]], generated_at: str = "2026-11-21T02:00:00Z", **extra: Any) -> dict:
    return {"generatedAt": generated_at, "itemCount": len(items), "items": items, **extra}


def body(document: dict, gzipped: bool = True) -> tuple[bytes, dict[str, str]]:
    raw = orjson.dumps(document)
    headers = {"Content-Type": "application/json"}
    if gzipped:
        headers["Content-Encoding"] = "gzip"
        raw = gzip.compress(raw)
    return raw, headers


def new_batch_id() -> str:
    return str(uuid.uuid4())


def wait_finished(http: httpx.Client, location: str, headers: dict[str, str], timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = http.get(location, headers=headers).json()
        if status["progress"] in FINISHED:
            return status
        time.sleep(0.05)
    raise AssertionError(f"batch not finished in {timeout} s: {status}")


def final_status(client: PiaClient, kind: str, batch_id: str, timeout: float = 30) -> dict:
    """The batch's status once processed, read through the Python client."""
    deadline = time.monotonic() + timeout
    while (status := client.batch_status(kind, batch_id))["progress"] not in FINISHED:
        if time.monotonic() > deadline:
            raise AssertionError(f"batch {batch_id} not finished in {timeout} s: {status}")
        time.sleep(0.05)
    return status


def failed_batch(settings: Settings, engine: sa.Engine, tenant_id: str, generated_at: str, timeout: float = 30) -> str:
    """A forecast batch (one item, SKU 100001 at store 1001) staged, processed by the running server's worker, then
    marked FAILED as a deterministic failure leaves it, its staged file kept: a batch a rerun can process. Failed
    only once the worker is done with it, so the two never race."""
    raw, headers = body(envelope([forecast_item("100001")], generated_at=generated_at))
    batch_id = accept_batch(engine, settings.resolved_staging_dir, tenant_id, new_batch_id(), "SALES_FORECAST",
                            body=raw, content_type=headers["Content-Type"],
                            content_encoding=headers["Content-Encoding"], now=utc_now()).batch.batch_id
    deadline = time.monotonic() + timeout
    while get_batch(engine, tenant_id, batch_id).progress not in FINISHED:
        if time.monotonic() > deadline:
            raise AssertionError(f"batch {batch_id} not processed in {timeout} s")
        time.sleep(0.05)
    fail_batch(engine, tenant_id, batch_id, "The staged batch file cannot be read.", utc_now())
    return batch_id
