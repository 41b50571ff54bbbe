"""Shapes of the demand planning routes, for the OpenAPI document.

The batch bodies are *declared* here but checked by the uploads' own fast checker (`ingest/envelope.py`), which
reports every problem of a 20,000-item batch far faster than a pydantic model could; the patterns come from the
same rule set (`contracts/formats.py`).
"""

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, create_model

from contracts.batch_kinds import REPLENISHMENT_PARAMETER, SALES_FORECAST
from contracts.formats import DATE, DECIMAL, KEY, MAX_INTEGER, SAFE_TIMESTAMP
from contracts.limits import (
    DEFAULT_BATCH_PAGE_SIZE,
    MAX_BATCH_PAGE_SIZE,
    MAX_HORIZON_DAYS,
    MAX_ITEMS_PER_BATCH,
    MAX_PAGE_SIZE,
    published_limits,
)
from contracts.models import Day, Error, Instant, Shape, absent_or_given, exactly_one_of

# The patterns go into the schema only (pydantic's regex engine has no look-ahead; nothing validates with these).
Key = Annotated[str, Field(json_schema_extra={"pattern": KEY.json_schema}, examples=["S001"])]
Decimal = Annotated[str, Field(json_schema_extra={"pattern": DECIMAL.json_schema}, examples=["12", "0.5"])]
BatchDay = Annotated[str, Field(json_schema_extra={"pattern": DATE.json_schema, "format": "date"})]
Timestamp = Annotated[str, Field(json_schema_extra={"pattern": SAFE_TIMESTAMP.json_schema},
                                 examples=["2026-11-21T02:00:00Z"])]
Extension = Annotated[dict[str, Any], Field(description="Free-form extension data, stored as sent.")]

# One field per published limit, so the document cannot drift from GET /limits.
Limits = create_model("Limits", __base__=Shape, __doc__="Published limits.",
                      **{name: (int, ...) for name in published_limits()})


# Uploads


class Envelope(Shape):
    model_config = ConfigDict(json_schema_extra={"dependentRequired": {"batchIndex": ["batchTotal"],
                                                                       "batchTotal": ["batchIndex"]}})

    generatedAt: Timestamp
    batchIndex: int = Field(default=1, ge=1, le=MAX_INTEGER)
    batchTotal: int = Field(default=1, ge=1, le=MAX_INTEGER)
    itemCount: int = Field(ge=0, le=MAX_INTEGER, description="Number of items; must match the items sent.")
    ext: Extension | None = None


class SalesForecastItem(Shape):
    model_config = ConfigDict(json_schema_extra=exactly_one_of("retailStoreNumber", "ecomStoreNumber"))

    retailStoreNumber: Key | None = Field(default=None, description="Exactly one of retailStoreNumber and "
                                          "ecomStoreNumber.", json_schema_extra=absent_or_given)
    ecomStoreNumber: Key | None = Field(default=None, json_schema_extra=absent_or_given)
    skuNumber: Key
    horizonStartDate: BatchDay
    horizonEndDate: BatchDay
    quantities: list[Decimal] = Field(min_length=1, max_length=MAX_HORIZON_DAYS,
                                      description="One quantity per day of the horizon.")
    ext: Extension | None = None


class SalesForecastBatch(Envelope):
    """A sales forecast batch: JSON, optionally gzip (Content-Encoding: gzip)."""

    items: list[SalesForecastItem] = Field(max_length=MAX_ITEMS_PER_BATCH)


class ReplenishmentParameterItem(Shape):
    retailStoreNumber: Key
    skuNumber: Key
    reorderPoint: Decimal
    maximumInventory: Decimal
    ext: Extension | None = None


class ReplenishmentParameterBatch(Envelope):
    """A replenishment parameter batch: JSON, optionally gzip (Content-Encoding: gzip)."""

    items: list[ReplenishmentParameterItem] = Field(max_length=MAX_ITEMS_PER_BATCH)


class UploadHeaders(Shape):
    content_encoding: Literal["gzip", "identity"] | None = Field(default=None, description="gzip when compressed.")


class BatchCounts(Shape):
    items: int
    applied: int
    superseded: int
    locked: int
    rejected: int


class RejectedItem(Shape):
    index: int = Field(description="Position of the item in the batch, from 0.")
    retailStoreNumber: str | None = None
    ecomStoreNumber: str | None = None
    skuNumber: str
    code: str


class BatchWarning(Shape):
    code: str = Field(examples=["UNKNOWN_FIELD"])
    field: str | None
    count: int
    message: str | None = None


class BatchStatus(Shape):
    """The batch's progress and, once finished, its outcome."""

    batchId: str = Field(json_schema_extra={"format": "uuid"})
    batchKind: Literal[SALES_FORECAST, REPLENISHMENT_PARAMETER]  # type: ignore[valid-type]
    progress: Literal["PENDING", "PROCESSING", "COMPLETED", "COMPLETED_WITH_REJECTED_ITEMS", "FAILED"]
    generatedAt: Instant
    batchIndex: int | None
    batchTotal: int | None
    itemCount: int
    receivedTime: Instant
    startedTime: Instant | None
    completedTime: Instant | None
    counts: BatchCounts | None = Field(description="Null until the batch is finished.")
    rejectedItems: list[RejectedItem] | None = Field(description="Null until the batch is finished.")
    rejectedItemsTruncated: bool
    warnings: list[BatchWarning]
    errorMessage: str | None


class BatchLocation(Shape):
    location: str = Field(alias="Location", description="Where the batch status is read.")


class RetryAfter(Shape):
    retry_after: int = Field(alias="Retry-After", description="Seconds to wait before retrying.")


# Errors of the uploads (narrower than Error, so the document names their codes)


class UploadRefused(Error):
    """VALIDATION_ERROR listing every field error (details.errors, details.errorsTruncated), or BAD_REQUEST for a
    body that is not JSON or not gzip; nothing was stored."""

    error: Literal["VALIDATION_ERROR", "BAD_REQUEST"]


class BatchIdReused(Error):
    """BATCH_ID_REUSED: the batch id was used for a different payload."""

    error: Literal["BATCH_ID_REUSED"]


class UploadTooLarge(Error):
    """LIMIT_EXCEEDED: details.limit, max and received."""

    error: Literal["LIMIT_EXCEEDED"]


class UnsupportedUpload(Error):
    """UNSUPPORTED_MEDIA_TYPE: not application/json, or an encoding other than gzip."""

    error: Literal["UNSUPPORTED_MEDIA_TYPE"]


class UploadsBusy(Error):
    """SERVICE_UNAVAILABLE: too many uploads are being checked; retry after Retry-After seconds with the same batch
    id and body."""

    error: Literal["SERVICE_UNAVAILABLE"]


class BatchNotFound(Error):
    """No such batch of this kind for the tenant."""

    error: Literal["NOT_FOUND"]


class QueryRefused(Error):
    """VALIDATION_ERROR naming the query parameter in details.errors[].path."""

    error: Literal["VALIDATION_ERROR"]


# Held data


class SalesForecast(Shape):
    retailStoreNumber: str | None
    ecomStoreNumber: str | None
    skuNumber: str
    horizonStartDate: Day
    horizonEndDate: Day
    quantities: list[Decimal]
    generatedAt: Instant
    modifiedTime: Instant


class ReplenishmentParameter(Shape):
    retailStoreNumber: str
    skuNumber: str
    replenishmentType: Literal["AUTO", "MANUAL"]
    reorderPoint: Decimal | None
    maximumInventory: Decimal | None
    parameterSource: Literal["RETAIL_STORE_SPECIFIC", "LOCAL_ASSORTMENT", "BASE_ASSORTMENT"]
    locked: bool
    modifiedTime: Instant


class SalesForecastPage(Shape):
    """A page, retail stores first, never spanning two stores."""

    items: list[SalesForecast]
    nextCursor: str | None = Field(description="Pass as cursor for the next page; null on the last.")


class ReplenishmentParameterPage(Shape):
    """A page of the parameters in use, resolved store-specific, local, base."""

    items: list[ReplenishmentParameter]
    nextCursor: str | None = Field(description="Pass as cursor for the next page; null on the last.")


class BatchStatusPage(Shape):
    """A page of batch statuses in the order they were received."""

    items: list[BatchStatus]
    nextCursor: str | None = Field(description="Pass as cursor for the next page; null on the last.")


class BatchListQuery(Shape):
    limit: int | None = Field(default=None, ge=1, le=MAX_BATCH_PAGE_SIZE,
                              description=f"Page size, default {DEFAULT_BATCH_PAGE_SIZE}.")
    cursor: str | None = Field(default=None, description="nextCursor of the previous page.")
    receivedSince: str | None = Field(default=None, json_schema_extra={"format": "date-time",
                                                                       "pattern": SAFE_TIMESTAMP.json_schema},
                                      description="Only batches received at or after this instant (ISO 8601 with "
                                                  "offset).")


class Paging(Shape):
    limit: int | None = Field(default=None, ge=1, le=MAX_PAGE_SIZE, description="Page size, default 1000.")
    cursor: str | None = Field(default=None, description="nextCursor of the previous page.")


class SalesForecastQuery(Paging):
    retailStoreNumber: Key | None = Field(default=None, description="Only this retail store.")
    ecomStoreNumber: Key | None = Field(default=None, description="Only this eCom store (not with "
                                        "retailStoreNumber).")


class ReplenishmentParameterQuery(Paging):
    retailStoreNumber: Key | None = Field(default=None, description="Only this retail store.")
    modifiedSince: str | None = Field(default=None, json_schema_extra={"format": "date-time",
                                                                       "pattern": SAFE_TIMESTAMP.json_schema},
                                      description="Only lines modified after this instant (ISO 8601 with offset).")


class SalesForecastExportQuery(Shape):
    layout: Literal["horizon", "daily"] | None = Field(
        default=None, description="horizon (default): a row per forecast with its quantities; daily: a row per "
        "store, SKU and day.")


# Words of the columnar answers (their bodies are Arrow or Parquet, described by the schemas of
# contracts/held_datasets.py, not by JSON Schema).
NEXT_CURSOR = {"X-Next-Cursor": "Arrow pages: pass as cursor for the next page; absent on the last."}
HELD_EXPORT = ("An Arrow IPC stream (default) or, with Accept: application/vnd.apache.parquet, a Parquet file; "
               "streamed in record batches.")
