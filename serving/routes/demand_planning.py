"""Demand planning scope: /v1/tenants/{tenantId}/demand_planning/…"""

import threading
import uuid
from collections.abc import AsyncIterator, Callable, Generator
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pyarrow as pa
from quart import Blueprint, Response, g, request
from quart_schema import document_headers, document_querystring, document_request, document_response

from contracts.batch_kinds import REPLENISHMENT_PARAMETER, SALES_FORECAST
from contracts.demand_planning_models import (
    HELD_EXPORT,
    NEXT_CURSOR,
    BatchIdReused,
    BatchListQuery,
    BatchLocation,
    BatchNotFound,
    BatchStatus,
    BatchStatusPage,
    Limits,
    QueryRefused,
    ReplenishmentParameterBatch,
    ReplenishmentParameterPage,
    ReplenishmentParameterQuery,
    RetryAfter,
    SalesForecastBatch,
    SalesForecastExportQuery,
    SalesForecastPage,
    SalesForecastQuery,
    UnsupportedUpload,
    UploadHeaders,
    UploadRefused,
    UploadsBusy,
    UploadTooLarge,
)
from contracts.errors import NotFound, ValidationFailed
from contracts.held_datasets import (
    ARROW_STREAM,
    FORECAST_LAYOUTS,
    NEXT_CURSOR_HEADER,
    PARQUET,
    REPLENISHMENT_PARAMETERS,
    encoded,
)
from contracts.limits import (
    DEFAULT_BATCH_PAGE_SIZE,
    DEFAULT_PAGE_SIZE,
    MAX_BATCH_PAGE_SIZE,
    MAX_PAGE_SIZE,
    published_limits,
)
from contracts.models import Items
from contracts.stores import EcomStore, RetailStore
from db.batches import BatchKey, batch_page, get_batch
from db.held import ForecastKey, ParameterKey
from db.held_export import (
    LAYOUTS,
    ArrowPage,
    replenishment_parameter_arrow_page,
    replenishment_parameter_batches,
    sales_forecast_arrow_page,
    sales_forecast_batches,
)
from db.ids import utc_now
from db.reference import list_ecom_stores, list_retail_stores
from ingest.accept import accept_upload, canonical_batch_id
from ingest.body import check_media_type
from serving.jsonio import json_response
from serving.openapi import also_answers
from serving.paging import decode_cursor, encode_cursor
from serving.protection import protect
from serving.rendering.batches import batch_status
from serving.rendering.held_pages import page_arrow, page_json
from serving.rendering.stores import ecom_store_json, retail_store_json
from serving.services import services
from serving.threads import blocking

blueprint = Blueprint("demand_planning", __name__, url_prefix="/v1/tenants/<tenantId>/demand_planning")
# Uploads check their media type themselves (with Content-Encoding, before any size limit), and batch ids in the
# contract's own VALIDATION_ERROR shape.
protect(blueprint, "demand_planning", check_requests=False)

_COLLECTIONS = {SALES_FORECAST: "sales_forecast_batches", REPLENISHMENT_PARAMETER: "replenishment_parameter_batches"}


@blueprint.get("/retail_stores")
@document_response(Items[RetailStore], 200)
async def retail_stores(tenantId: str) -> Response:
    """Retail stores with their numbers."""
    rows = await blocking(list_retail_stores, services().engine, tenantId)
    return json_response({"items": [retail_store_json(row) for row in rows]})


@blueprint.get("/ecom_stores")
@document_response(Items[EcomStore], 200)
async def ecom_stores(tenantId: str) -> Response:
    """eCom stores with their numbers."""
    rows = await blocking(list_ecom_stores, services().engine, tenantId)
    return json_response({"items": [ecom_store_json(row) for row in rows]})


@blueprint.get("/limits")
@document_response(Limits, 200)
async def limits(tenantId: str) -> Response:
    """Published limits (rateLimitPerMinute is the calling client's)."""
    return json_response(published_limits(g.rate_limit.limit))


# Uploads and their status


def _query_error(parameter: str, code: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"Invalid query parameter {parameter}; nothing was read.",
                            {"errors": [{"path": parameter, "code": code, "message": message}],
                             "errorsTruncated": False})


def _location(tenant_id: str, kind: str, batch_id: str) -> str:
    return f"/v1/tenants/{tenant_id}/demand_planning/{_COLLECTIONS[kind]}/{batch_id}"


async def _upload(tenant_id: str, raw_batch_id: str, kind: str) -> Response:
    content_type, content_encoding = request.headers.get("Content-Type"), request.headers.get("Content-Encoding")
    canonical_batch_id(raw_batch_id)
    # 415 comes before any size limit, so look at the headers before receiving the body.
    check_media_type(content_type, content_encoding)
    body = await request.get_data(cache=False)
    uploads = services().uploads
    accepted = await uploads.complete(accept_upload(
        services().engine, services().settings.resolved_staging_dir, tenant_id, raw_batch_id, kind, body=body,
        content_type=content_type, content_encoding=content_encoding, now=utc_now(),
        compute=uploads.compute, query=blocking))
    if accepted.created:
        services().wake_pipeline()
    location = _location(tenant_id, kind, accepted.batch.batch_id)
    return json_response(batch_status(accepted.batch), 202 if accepted.created else 200, {"Location": location})


async def _status(tenant_id: str, raw_batch_id: str, kind: str) -> Response:
    try:
        batch_id = str(uuid.UUID(raw_batch_id))
    except ValueError:
        raise NotFound(f"No batch {raw_batch_id}.") from None
    row = await blocking(get_batch, services().engine, tenant_id, batch_id)
    if row is None or row.kind != kind:
        raise NotFound(f"No {kind.lower().replace('_', ' ')} batch {batch_id}.")
    return json_response(batch_status(row))


def _documented_upload(func):
    """The answers of both uploads. The body's model is declared only: the fast checker of ingest/ validates."""
    for status, model, headers in ((202, BatchStatus, BatchLocation), (200, BatchStatus, BatchLocation),
                                   (400, UploadRefused, None), (409, BatchIdReused, None),
                                   (413, UploadTooLarge, None), (415, UnsupportedUpload, None),
                                   (503, UploadsBusy, RetryAfter)):
        func = document_response(model, status, headers)(func)
    return document_headers(UploadHeaders)(func)


def _documented_status(func):
    return document_response(BatchNotFound, 404)(document_response(BatchStatus, 200)(func))


@blueprint.put("/sales_forecast_batches/<batchId>")
@document_request(SalesForecastBatch)
@_documented_upload
async def put_sales_forecast_batch(tenantId: str, batchId: str) -> Response:
    """Upload a sales forecast batch (JSON, optionally gzip).

    202 when accepted; 200 with the current status when the same id and body were uploaded before.
    """
    return await _upload(tenantId, batchId, SALES_FORECAST)


@blueprint.get("/sales_forecast_batches/<batchId>")
@_documented_status
async def get_sales_forecast_batch(tenantId: str, batchId: str) -> Response:
    """Status of a sales forecast batch."""
    return await _status(tenantId, batchId, SALES_FORECAST)


@blueprint.put("/replenishment_parameter_batches/<batchId>")
@document_request(ReplenishmentParameterBatch)
@_documented_upload
async def put_replenishment_parameter_batch(tenantId: str, batchId: str) -> Response:
    """Upload a replenishment parameter batch (JSON, optionally gzip).

    202 when accepted; 200 with the current status when the same id and body were uploaded before.
    """
    return await _upload(tenantId, batchId, REPLENISHMENT_PARAMETER)


@blueprint.get("/replenishment_parameter_batches/<batchId>")
@_documented_status
async def get_replenishment_parameter_batch(tenantId: str, batchId: str) -> Response:
    """Status of a replenishment parameter batch."""
    return await _status(tenantId, batchId, REPLENISHMENT_PARAMETER)


async def _batch_list(tenant_id: str, kind: str) -> Response:
    limit = _limit(DEFAULT_BATCH_PAGE_SIZE, MAX_BATCH_PAGE_SIZE)
    after, since = _cursor(BatchKey.from_dict), _instant_parameter("receivedSince")
    page = await blocking(batch_page, services().engine, tenant_id, kind, received_since=since, after=after,
                          limit=limit)
    return _page_response([batch_status(row) for row in page.rows], page.next)


def _documented_list(func):
    return document_querystring(BatchListQuery)(
        document_response(QueryRefused, 400)(document_response(BatchStatusPage, 200)(func)))


@blueprint.get("/sales_forecast_batches")
@_documented_list
async def list_sales_forecast_batches(tenantId: str) -> Response:
    """The tenant's sales forecast batches in the order they were received, with their status."""
    return await _batch_list(tenantId, SALES_FORECAST)


@blueprint.get("/replenishment_parameter_batches")
@_documented_list
async def list_replenishment_parameter_batches(tenantId: str) -> Response:
    """The tenant's replenishment parameter batches in the order they were received, with their status."""
    return await _batch_list(tenantId, REPLENISHMENT_PARAMETER)


# Held data


def _limit(default: int = DEFAULT_PAGE_SIZE, maximum: int = MAX_PAGE_SIZE) -> int:
    raw = request.args.get("limit")
    if raw is None:
        return default
    if not raw.isdigit():
        raise _query_error("limit", "INVALID_TYPE", "limit must be a positive integer.")
    if not 1 <= int(raw) <= maximum:
        raise _query_error("limit", "OUT_OF_RANGE", f"limit must be between 1 and {maximum}.")
    return int(raw)


def _cursor(decode: Callable[[dict[str, Any]], Any]) -> Any:
    try:
        return decode_cursor(request.args.get("cursor"), decode)
    except ValueError:
        raise _query_error("cursor", "INVALID_CURSOR", "cursor must be a nextCursor value from this list.") from None


def _page_response(items: list[dict[str, Any]], next_key: Any) -> Response:
    return json_response({"items": items, "nextCursor": encode_cursor(next_key)})


def _wants_arrow() -> bool:
    """Whether the Accept header prefers an Arrow page to JSON (JSON when it does not say, or says */*)."""
    return request.accept_mimetypes.best_match(["application/json", ARROW_STREAM]) == ARROW_STREAM


async def _held_page_response(read: Callable[[], ArrowPage]) -> Response:
    """The page `read` reads, as an Arrow stream when the Accept header prefers it, else as JSON; both from the same
    read. Read and rendered in a worker thread: a JSON page of 5,000 forecasts takes some 30 ms to render, which
    every other request on the event loop would wait for."""
    arrow = _wants_arrow()

    def read_and_render() -> tuple[bytes, str | None]:
        page = read()
        cursor = encode_cursor(page.next)
        return (page_arrow(page.table) if arrow else page_json(page.table, cursor)), cursor

    body, cursor = await blocking(read_and_render)
    if not arrow:
        return Response(body, content_type="application/json")
    return Response(body, content_type=ARROW_STREAM, headers={NEXT_CURSOR_HEADER: cursor} if cursor else None)


@blueprint.get("/sales_forecasts")
@document_querystring(SalesForecastQuery)
@document_response(SalesForecastPage, 200)
@also_answers(ARROW_STREAM, headers=NEXT_CURSOR)
@document_response(QueryRefused, 400)
async def sales_forecasts(tenantId: str) -> Response:
    """Held sales forecasts, retail stores first, a page never spanning two stores.

    With Accept: application/vnd.apache.arrow.stream the page is an Arrow IPC stream (schema SALES_FORECASTS of
    the Python client) and the next page's cursor is in X-Next-Cursor.
    """
    retail, ecom = request.args.get("retailStoreNumber"), request.args.get("ecomStoreNumber")
    if retail is not None and ecom is not None:
        raise _query_error("ecomStoreNumber", "STORE_KEY_SHAPE",
                           "Filter by retailStoreNumber or by ecomStoreNumber, not both.")
    limit, after = _limit(), _cursor(ForecastKey.from_dict)
    query = {"retail_store_number": retail, "ecom_store_number": ecom, "after": after, "limit": limit,
             "today": utc_now().date()}
    return await _held_page_response(partial(sales_forecast_arrow_page, services().engine, tenantId, **query))


def _instant_parameter(name: str) -> datetime | None:
    raw = request.args.get(name)
    if raw is None:
        return None
    try:
        # An unencoded "+" of the offset arrives as a space; read it as the caller meant it.
        value = datetime.fromisoformat(raw.replace(" ", "+"))
    except ValueError:
        value = None
    if value is None or value.tzinfo is None:
        raise _query_error(name, "INVALID_TIMESTAMP", f"{name} must be an ISO 8601 timestamp with an offset.")
    return value.astimezone(UTC)


@blueprint.get("/replenishment_parameters")
@document_querystring(ReplenishmentParameterQuery)
@document_response(ReplenishmentParameterPage, 200)
@also_answers(ARROW_STREAM, headers=NEXT_CURSOR)
@document_response(QueryRefused, 400)
async def replenishment_parameters(tenantId: str) -> Response:
    """Replenishment parameters in use, resolved store-specific, local, base.

    With Accept: application/vnd.apache.arrow.stream the page is an Arrow IPC stream (schema
    REPLENISHMENT_PARAMETERS of the Python client) and the next page's cursor is in X-Next-Cursor.
    """
    limit, after, since = _limit(), _cursor(ParameterKey.from_dict), _instant_parameter("modifiedSince")
    query = {"retail_store_number": request.args.get("retailStoreNumber"), "modified_since": since,
             "after": after, "limit": limit}
    return await _held_page_response(partial(replenishment_parameter_arrow_page, services().engine, tenantId,
                                             **query))


# Exports


def _export_media_type() -> str:
    """Parquet when the Accept header prefers it to an Arrow stream; else (no header, */*) the Arrow stream."""
    best = request.accept_mimetypes.best_match([ARROW_STREAM, PARQUET])
    return PARQUET if best == PARQUET else ARROW_STREAM


def _export_response(batches: Generator[pa.RecordBatch, None, None], schema: pa.Schema) -> Response:
    """The batches streamed as they are read, each read and encoded off the event loop."""
    media_type = _export_media_type()
    return Response(streamed(encoded(batches, schema, media_type), batches), content_type=media_type)


async def streamed(chunks: Generator[bytes, None, None],
                   batches: Generator[pa.RecordBatch, None, None]) -> AsyncIterator[bytes]:
    """The chunks as they are made, each in a worker thread; both generators closed however the stream ends, the
    client gone mid-stream included, which gives back the database connection the read holds. A request cancelled
    while a chunk is made leaves that thread running, and a running generator cannot be closed ("generator already
    executing"): the closing waits for it."""
    turn = threading.Lock()

    def next_chunk() -> bytes | None:
        with turn:
            return next(chunks, None)

    def close() -> None:
        with turn:
            chunks.close()
            batches.close()

    try:
        while (chunk := await blocking(next_chunk)) is not None:
            yield chunk
    finally:
        await blocking(close)


@blueprint.get("/sales_forecasts/export")
@document_querystring(SalesForecastExportQuery)
@also_answers(ARROW_STREAM, PARQUET, description=HELD_EXPORT)
@document_response(QueryRefused, 400)
async def export_sales_forecasts(tenantId: str) -> Response:
    """Every held sales forecast of the tenant, streamed as Arrow (default) or Parquet, by store then SKU.

    layout=horizon: a row per forecast (schema SALES_FORECASTS); layout=daily: a row per store, SKU and day
    (schema SALES_FORECAST_DAYS). Expired forecasts are left out, as in the list.
    """
    layout = request.args.get("layout", "horizon")
    if layout not in LAYOUTS:
        raise _query_error("layout", "INVALID_VALUE", f"layout must be one of {', '.join(LAYOUTS)}.")
    batches = sales_forecast_batches(services().engine, tenantId, today=utc_now().date(), layout=layout)
    return _export_response(batches, FORECAST_LAYOUTS[layout])


@blueprint.get("/replenishment_parameters/export")
@also_answers(ARROW_STREAM, PARQUET, description=HELD_EXPORT)
async def export_replenishment_parameters(tenantId: str) -> Response:
    """Every replenishment parameter in use of the tenant (schema REPLENISHMENT_PARAMETERS), streamed as Arrow
    (default) or Parquet, by store then SKU."""
    return _export_response(replenishment_parameter_batches(services().engine, tenantId), REPLENISHMENT_PARAMETERS)
