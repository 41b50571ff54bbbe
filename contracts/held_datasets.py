"""The held demand planning datasets as analysts get them: the Arrow schemas of the columnar reads and exports.

These are data contracts. The Arrow pages of `GET …/sales_forecasts` and `GET …/replenishment_parameters`, the
tenant-wide exports (Arrow or Parquet), `pia pipeline export` and the Python client's DataFrames all have exactly
these schemas; field names are the JSON items' names. Quantities and parameter values are exact decimals
(the store's DECIMAL(18,4)), days are dates and instants are UTC timestamps.
"""

from collections.abc import Generator, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

ARROW_STREAM = "application/vnd.apache.arrow.stream"
PARQUET = "application/vnd.apache.parquet"
# An Arrow page has no envelope: the cursor of the next page travels in this header, absent on the last page.
NEXT_CURSOR_HEADER = "X-Next-Cursor"

DECIMAL = pa.decimal128(18, 4)
INSTANT = pa.timestamp("us", tz="UTC")

# One row per held forecast, as the JSON items: its quantities are one per day from horizonStartDate.
# A forecast is held for either a retail store or an eCom store: exactly one of the two numbers is set.
SALES_FORECASTS = pa.schema([
    pa.field("retailStoreNumber", pa.string()),
    pa.field("ecomStoreNumber", pa.string()),
    pa.field("skuNumber", pa.string(), nullable=False),
    pa.field("horizonStartDate", pa.date32(), nullable=False),
    pa.field("horizonEndDate", pa.date32(), nullable=False),
    pa.field("quantities", pa.list_(pa.field("item", DECIMAL, nullable=False)), nullable=False),
    pa.field("generatedAt", INSTANT, nullable=False),
    pa.field("modifiedTime", INSTANT, nullable=False),
])

# The long layout planners and analysts work in: one row per store, SKU and day of a held forecast.
SALES_FORECAST_DAYS = pa.schema([
    pa.field("retailStoreNumber", pa.string()),
    pa.field("ecomStoreNumber", pa.string()),
    pa.field("skuNumber", pa.string(), nullable=False),
    pa.field("date", pa.date32(), nullable=False),
    pa.field("quantity", DECIMAL, nullable=False),
    pa.field("generatedAt", INSTANT, nullable=False),
    pa.field("modifiedTime", INSTANT, nullable=False),
])

# The forecast exports' layouts and their schemas.
FORECAST_LAYOUTS = {"horizon": SALES_FORECASTS, "daily": SALES_FORECAST_DAYS}

# One row per retail store and SKU of its assortment: the values in use and where they come from.
REPLENISHMENT_PARAMETERS = pa.schema([
    pa.field("retailStoreNumber", pa.string(), nullable=False),
    pa.field("skuNumber", pa.string(), nullable=False),
    pa.field("replenishmentType", pa.string()),
    pa.field("reorderPoint", DECIMAL),
    pa.field("maximumInventory", DECIMAL),
    pa.field("parameterSource", pa.string(), nullable=False),
    pa.field("locked", pa.bool_(), nullable=False),
    pa.field("modifiedTime", INSTANT, nullable=False),
])


class _Chunks:
    """A write-only file that keeps what is written until it is taken: the bytes of a stream as they are made."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def take(self) -> bytes:
        data = b"".join(self._parts)
        self._parts.clear()
        return data


def encoded(batches: Iterable[pa.RecordBatch], schema: pa.Schema, media_type: str) -> Generator[bytes, None, None]:
    """The batches as an Arrow IPC stream (ARROW_STREAM) or a Parquet file (PARQUET), a chunk per batch as it is
    written; no batches make a stream of the schema alone (or a Parquet file without rows)."""
    sink = _Chunks()
    stream = pa.PythonFile(sink, mode="w")
    writer = pa.ipc.new_stream(stream, schema) if media_type == ARROW_STREAM else pq.ParquetWriter(stream, schema)
    with writer:
        for batch in batches:
            # Each batch is a row group of the Parquet file: its pages go out as soon as it is written.
            writer.write_batch(batch)
            if chunk := sink.take():
                yield chunk
    yield sink.take()
