"""`pia pipeline export`: a tenant's held forecasts or replenishment parameters written to a Parquet file, with
the schema of the columnar reads (contracts/held_datasets.py), streamed a record batch at a time."""

import os
from collections.abc import Iterator
from datetime import date
from pathlib import Path

import pyarrow as pa
import sqlalchemy as sa

from contracts.held_datasets import (
    FORECAST_LAYOUTS,
    PARQUET,
    REPLENISHMENT_PARAMETERS,
    encoded,
)
from db.held_export import Layout, replenishment_parameter_batches, sales_forecast_batches


def export_held(engine: sa.Engine, tenant_id: str, dataset: str, out: Path, *, today: date,
                layout: Layout = "horizon") -> int:
    """Write the dataset ("forecasts" or "parameters") to `out`, all or nothing: a temporary file renamed over it
    when complete. Returns the number of rows written."""
    if dataset == "forecasts":
        batches = sales_forecast_batches(engine, tenant_id, today=today, layout=layout)
        schema = FORECAST_LAYOUTS[layout]
    else:
        batches = replenishment_parameter_batches(engine, tenant_id)
        schema = REPLENISHMENT_PARAMETERS
    rows = 0

    def counted() -> Iterator[pa.RecordBatch]:
        nonlocal rows
        for batch in batches:
            rows += batch.num_rows
            yield batch

    partial = out.with_name(f".{out.name}.partial")
    try:
        with partial.open("wb") as file:
            for chunk in encoded(counted(), schema, PARQUET):
                file.write(chunk)
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return rows
