"""Demand planning scope: /v1/tenants/{tenantId}/demand_planning/…"""

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from quart import Blueprint, Response, g, request

from contracts.batch_kinds import REPLENISHMENT_PARAMETER, SALES_FORECAST
from contracts.errors import NotFound, ValidationFailed
from contracts.limits import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, published_limits
from ingest.accept import accept_upload, canonical_batch_id
from ingest.body import check_media_type
from serving.jsonio import blocking, json_response
from serving.paging import decode_cursor, encode_cursor
from serving.protection import protect
from serving.rendering import batch_status, held_forecast, held_parameter
from serving.routes.stores import ecom_store_json, retail_store_json
from serving.services import services
from store.batches import get_batch
from store.held import ForecastKey, ParameterKey, replenishment_parameter_page, sales_forecast_page
from store.ids import utc_now
from store.reference import list_ecom_stores, list_retail_stores

blueprint = Blueprint("demand_planning", __name__, url_prefix="/v1/tenants/<tenantId>/demand_planning")
protect(blueprint, "demand_planning")

_COLLECTIONS = {SALES_FORECAST: "sales_forecast_batches", REPLENISHMENT_PARAMETER: "replenishment_parameter_batches"}


@blueprint.get("/retail_stores")
async def retail_stores(tenantId: str) -> Response:
    rows = await blocking(list_retail_stores, services().engine, tenantId)
    return json_response({"items": [retail_store_json(row) for row in rows]})


@blueprint.get("/ecom_stores")
async def ecom_stores(tenantId: str) -> Response:
    rows = await blocking(list_ecom_stores, services().engine, tenantId)
    return json_response({"items": [ecom_store_json(row) for row in rows]})


@blueprint.get("/limits")
async def limits(tenantId: str) -> Response:
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


@blueprint.put("/sales_forecast_batches/<batchId>")
async def put_sales_forecast_batch(tenantId: str, batchId: str) -> Response:
    return await _upload(tenantId, batchId, SALES_FORECAST)


@blueprint.get("/sales_forecast_batches/<batchId>")
async def get_sales_forecast_batch(tenantId: str, batchId: str) -> Response:
    return await _status(tenantId, batchId, SALES_FORECAST)


@blueprint.put("/replenishment_parameter_batches/<batchId>")
async def put_replenishment_parameter_batch(tenantId: str, batchId: str) -> Response:
    return await _upload(tenantId, batchId, REPLENISHMENT_PARAMETER)


@blueprint.get("/replenishment_parameter_batches/<batchId>")
async def get_replenishment_parameter_batch(tenantId: str, batchId: str) -> Response:
    return await _status(tenantId, batchId, REPLENISHMENT_PARAMETER)


# Held data


def _limit() -> int:
    raw = request.args.get("limit")
    if raw is None:
        return DEFAULT_PAGE_SIZE
    if not raw.isdigit():
        raise _query_error("limit", "INVALID_TYPE", "limit must be a positive integer.")
    if not 1 <= int(raw) <= MAX_PAGE_SIZE:
        raise _query_error("limit", "OUT_OF_RANGE", f"limit must be between 1 and {MAX_PAGE_SIZE}.")
    return int(raw)


def _cursor(decode: Callable[[dict[str, Any]], Any]) -> Any:
    try:
        return decode_cursor(request.args.get("cursor"), decode)
    except ValueError:
        raise _query_error("cursor", "INVALID_CURSOR", "cursor must be a nextCursor value from this list.") from None


def _page_response(items: list[dict[str, Any]], next_key: Any) -> Response:
    return json_response({"items": items, "nextCursor": encode_cursor(next_key)})


@blueprint.get("/sales_forecasts")
async def sales_forecasts(tenantId: str) -> Response:
    retail, ecom = request.args.get("retailStoreNumber"), request.args.get("ecomStoreNumber")
    if retail is not None and ecom is not None:
        raise _query_error("ecomStoreNumber", "STORE_KEY_SHAPE",
                           "Filter by retailStoreNumber or by ecomStoreNumber, not both.")
    limit, after = _limit(), _cursor(ForecastKey.from_dict)
    page = await blocking(sales_forecast_page, services().engine, tenantId, retail_store_number=retail,
                          ecom_store_number=ecom, after=after, limit=limit, today=utc_now().date())
    return _page_response([held_forecast(row) for row in page.rows], page.next)


def _modified_since() -> datetime | None:
    raw = request.args.get("modifiedSince")
    if raw is None:
        return None
    try:
        # An unencoded "+" of the offset arrives as a space; read it as the caller meant it.
        value = datetime.fromisoformat(raw.replace(" ", "+"))
    except ValueError:
        value = None
    if value is None or value.tzinfo is None:
        raise _query_error("modifiedSince", "INVALID_TIMESTAMP",
                           "modifiedSince must be an ISO 8601 timestamp with an offset.")
    return value.astimezone(UTC)


@blueprint.get("/replenishment_parameters")
async def replenishment_parameters(tenantId: str) -> Response:
    limit, after, since = _limit(), _cursor(ParameterKey.from_dict), _modified_since()
    page = await blocking(replenishment_parameter_page, services().engine, tenantId,
                          retail_store_number=request.args.get("retailStoreNumber"), modified_since=since,
                          after=after, limit=limit)
    return _page_response([held_parameter(row) for row in page.rows], page.next)
