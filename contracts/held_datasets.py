"""The held demand planning datasets as analysts get them: the Arrow schemas of the columnar reads and exports.

These are data contracts. The Arrow pages of `GET …/sales_forecasts` and `GET …/replenishment_parameters`, the
tenant-wide exports (Arrow or Parquet), `pia pipeline export` and the Python client's DataFrames all have exactly
these schemas; field names are the JSON items' names. Quantities and parameter values are exact decimals
(the store's DECIMAL(18,4)), days are dates and instants are UTC timestamps.
"""

import pyarrow as pa

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
