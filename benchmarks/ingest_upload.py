"""Benchmark: checking a 5,000-item, 30-day forecast batch against two baselines measured in the same run.

    uv run python -m benchmarks.ingest_upload

Prints the median of RUNS rounds of: orjson.loads of the decompressed body (parsing alone, no checks);
decompress_body + check_batch from the gzipped body (everything an upload does before staging); accept_batch,
the whole server-side handling of an upload (decompress, parse, check, stage as synced Parquet, record the
PENDING row in a DuckDB file; no HTTP), in the calling thread; the same as the app runs it, with the work on the
body in a worker process (the body and the result cross a process boundary); pydantic v2
model_validate_json of the decompressed body with an equivalent model (strict types, decimal pattern, dates,
cross-field rules). The measurements alternate within each round, so drift in the machine's load hits them
alike, and each starts after a full garbage collection, with the collector on while it runs.
"""

import asyncio
import gc
import gzip
import random
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from contracts.batch_kinds import SALES_FORECAST
from contracts.formats import MAX_KEY_LENGTH
from contracts.limits import EXPECTED_HORIZON_DAYS, MAX_HORIZON_DAYS, MAX_ITEMS_PER_BATCH, RECOMMENDED_ITEMS_PER_BATCH
from db.engine import create_engine
from db.migrate import upgrade
from db.tenants import create_tenant
from ingest.accept import accept_batch, accept_upload
from ingest.body import decompress_body
from ingest.envelope import check_batch
from serving.threads import blocking
from serving.uploads import UploadWork
from settings import Settings

RUNS = 30
TODAY = date(2026, 11, 21)
SERVER_SIDE = "accept_batch (… + stage + record)"
IN_WORKER = "… with a worker process (the app)"


def forecast_batch(items: int = RECOMMENDED_ITEMS_PER_BATCH, days: int = EXPECTED_HORIZON_DAYS) -> bytes:
    """Forecasts of 50 retail stores and 5 web shops; mostly small quantities, some zero, some with decimals."""
    rng = random.Random(7)
    quantities = ["0", "1", "2", "3", "5", "8", "12", "0.5", "1.25", "2.75", "14.3333", "120"]
    end = TODAY + timedelta(days=days - 1)
    return orjson.dumps({"generatedAt": "2026-11-21T02:00:00Z", "batchIndex": 1, "batchTotal": 4,
                         "itemCount": items, "items": [{
                             ("ecomStoreNumber" if index % 10 == 9 else "retailStoreNumber"): f"{1000 + index % 55}",
                             "skuNumber": f"{70000000 + index}", "horizonStartDate": TODAY.isoformat(),
                             "horizonEndDate": end.isoformat(),
                             "quantities": [rng.choice(quantities) for _ in range(days)]} for index in range(items)]})


def pydantic_validator() -> Callable[[bytes], Any] | None:
    try:
        from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StringConstraints, model_validator
    except ImportError:
        return None
    from typing import Annotated

    quantity = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,14}(\.[0-9]{1,4})?$")]
    key = Annotated[str, StringConstraints(min_length=1, max_length=MAX_KEY_LENGTH)]
    oldest = TODAY - timedelta(days=7)

    class Item(BaseModel):
        model_config = ConfigDict(strict=True, extra="allow")
        retailStoreNumber: key | None = None  # noqa: N815 (the wire names)
        ecomStoreNumber: key | None = None  # noqa: N815
        skuNumber: key  # noqa: N815
        horizonStartDate: date  # noqa: N815
        horizonEndDate: date  # noqa: N815
        quantities: Annotated[list[quantity], Field(min_length=1, max_length=MAX_HORIZON_DAYS)]
        ext: dict[str, Any] | None = None

        @model_validator(mode="after")
        def rules(self) -> "Item":
            if (self.retailStoreNumber is None) == (self.ecomStoreNumber is None):
                raise ValueError("STORE_KEY_SHAPE")
            if self.horizonStartDate < oldest:
                raise ValueError("HORIZON_START_TOO_OLD")
            if self.horizonEndDate != self.horizonStartDate + timedelta(days=len(self.quantities) - 1):
                raise ValueError("HORIZON_LENGTH_MISMATCH")
            return self

    class Envelope(BaseModel):
        model_config = ConfigDict(strict=True, extra="allow")
        generatedAt: AwareDatetime  # noqa: N815
        batchIndex: int | None = None  # noqa: N815
        batchTotal: int | None = None  # noqa: N815
        itemCount: int  # noqa: N815
        items: Annotated[list[Item], Field(max_length=MAX_ITEMS_PER_BATCH)]
        ext: dict[str, Any] | None = None

        @model_validator(mode="after")
        def rules(self) -> "Envelope":
            if self.itemCount != len(self.items):
                raise ValueError("ITEM_COUNT_MISMATCH")
            if (self.batchIndex is None) != (self.batchTotal is None):
                raise ValueError("BATCH_INDEX_SHAPE")
            if self.batchIndex is not None and not 1 <= self.batchIndex <= (self.batchTotal or 0):
                raise ValueError("BATCH_INDEX_RANGE")
            if len({(i.retailStoreNumber, i.ecomStoreNumber, i.skuNumber) for i in self.items}) != len(self.items):
                raise ValueError("DUPLICATE_KEY_IN_BATCH")
            return self

    return Envelope.model_validate_json


def accept_in(folder: Path, sent: bytes) -> Callable[[], object]:
    """accept_batch against a fresh DuckDB file in folder, a new batch id each call."""
    settings = Settings(data_dir=folder)
    engine = create_engine(settings)
    upgrade(engine)
    tenant_id = create_tenant(engine, "bench", is_test=True)
    now = datetime.combine(TODAY, datetime.min.time(), UTC)
    return lambda: accept_batch(engine, settings.resolved_staging_dir, tenant_id, str(uuid.uuid4()), SALES_FORECAST,
                                body=sent, content_type="application/json", content_encoding="gzip", now=now)


def accept_in_worker(folder: Path, sent: bytes) -> tuple[Callable[[], object], Callable[[], None]]:
    """accept_upload as the app runs it, against a fresh DuckDB file in folder; and how to stop its worker."""
    settings = Settings(data_dir=folder)
    engine = create_engine(settings)
    upgrade(engine)
    tenant_id = create_tenant(engine, "bench", is_test=True)
    now = datetime.combine(TODAY, datetime.min.time(), UTC)
    uploads, loop = UploadWork(processes=1, max_concurrent=1, wait_seconds=60), asyncio.new_event_loop()
    uploads.start()
    return (lambda: loop.run_until_complete(uploads.complete(accept_upload(
        engine, settings.resolved_staging_dir, tenant_id, str(uuid.uuid4()), SALES_FORECAST, body=sent,
        content_type="application/json", content_encoding="gzip", now=now, compute=uploads.compute,
        query=blocking))), lambda: loop.run_until_complete(uploads.close()))


def main() -> None:
    raw = forecast_batch()
    sent = gzip.compress(raw)
    folder = tempfile.TemporaryDirectory(prefix="pia-ingest-bench-")
    contenders: dict[str, Callable[[], object]] = {
        "orjson.loads": lambda: orjson.loads(raw),
        "decompress_body + check_batch": lambda: check_batch(
            SALES_FORECAST, decompress_body(sent, "application/json", "gzip"), TODAY),
        SERVER_SIDE: accept_in(Path(folder.name), sent),
    }
    contenders[IN_WORKER], stop_worker = accept_in_worker(Path(folder.name) / "worker", sent)
    if (validate := pydantic_validator()) is not None:
        contenders["pydantic model_validate_json"] = lambda: validate(raw)
    timings: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(RUNS + 1):  # the first round warms up and is dropped
        for name, run in contenders.items():
            gc.collect()
            started = time.perf_counter()
            run()
            timings[name].append(time.perf_counter() - started)
    # The median is the figure; the minimum shows the cost without interference from other work on the machine.
    stats = {name: (statistics.median(values[1:]) * 1000, min(values[1:]) * 1000) for name, values in timings.items()}
    print(f"forecast batch: {RECOMMENDED_ITEMS_PER_BATCH} items x {EXPECTED_HORIZON_DAYS} days, "
          f"{len(raw) / 1e6:.2f} MB JSON, {len(sent) / 1e6:.2f} MB gzipped; median (min) of {RUNS} runs")
    for name, (median, fastest) in stats.items():
        print(f"  {name:34s} {median:8.2f} ms ({fastest:.2f})")

    def ratio(slower: str, faster: str) -> str:
        (slower_median, slower_min), (faster_median, faster_min) = stats[slower], stats[faster]
        return f"{slower_median / faster_median:.2f}x ({slower_min / faster_min:.2f}x)"

    print(f"  check / orjson.loads             {ratio('decompress_body + check_batch', 'orjson.loads')}")
    print(f"  server-side / orjson.loads       {ratio(SERVER_SIDE, 'orjson.loads')}  target <= 3")
    print(f"  with a worker process / without  {ratio(IN_WORKER, SERVER_SIDE)}")
    if validate is None:
        print("  pydantic baseline skipped: pydantic is not installed")
    else:
        print(f"  pydantic / check                 "
              f"{ratio('pydantic model_validate_json', 'decompress_body + check_batch')}")
        print(f"  pydantic / server-side           {ratio('pydantic model_validate_json', SERVER_SIDE)}  target >= 2")
    stop_worker()
    folder.cleanup()


if __name__ == "__main__":
    main()
