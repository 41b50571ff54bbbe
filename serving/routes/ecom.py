"""E-commerce scope: /v1/tenants/{tenantId}/ecom_stores/{eComStoreId}/…

Everything read here is limited to the eCom store's assortment (db/catalogue.py says what that means).
"""

import uuid

import sqlalchemy as sa
from quart import Blueprint, Response, request
from quart_schema import document_querystring, document_response

from contracts import catalogue as shapes
from contracts.errors import InvalidRequest, NotFound, SkuNotFound
from contracts.events import INVENTORY_UPDATED, PRODUCT_UPDATED, REFERENCE_LISTS
from contracts.limits import MAX_PAGE_SIZE
from contracts.models import InvalidRequestError, Items, NotFoundError, SkuNotFoundError
from db.campaigns import current_campaigns
from db.catalogue import ProductKey, product_id_page, read_product, visible_product_ids, visible_skus
from db.ids import utc_now
from db.inventory import sku_inventory
from db.outbox import assortment_events
from db.reference import company_retail_stores, reference_list
from db.schema import skus
from serving.jsonio import json_response
from serving.paging import decode_cursor, encode_cursor
from serving.protection import protect
from serving.rendering import catalogue as render
from serving.rendering.stores import retail_store_json
from serving.services import services
from serving.threads import blocking

blueprint = Blueprint("ecom", __name__, url_prefix="/v1/tenants/<tenantId>/ecom_stores/<eComStoreId>")
protect(blueprint, "ecom", resource_arg="eComStoreId")


@blueprint.get("/retail_stores")
@document_response(Items[shapes.RetailStore])
async def retail_stores(tenantId: str, eComStoreId: str) -> Response:
    """The click and collect network: the retail stores of the eCom store's company."""
    rows = await blocking(company_retail_stores, services().engine, tenantId, eComStoreId)
    return json_response({"items": [retail_store_json(row) for row in rows]})


@blueprint.get("/product_schema/<listName>")
@document_response(Items[shapes.ReferenceEntry])
@document_response(NotFoundError, 404)
@document_response(NotFoundError, 404)
async def product_schema(tenantId: str, eComStoreId: str, listName: str) -> Response:
    """One of the 12 reference lists, tenant-wide, by code."""
    if listName not in REFERENCE_LISTS:
        raise NotFound(f"No reference list {listName}; the lists are {', '.join(REFERENCE_LISTS)}.")
    rows = await blocking(reference_list, services().engine, tenantId, listName)
    return json_response({"items": [render.reference_entry(listName, row) for row in rows]})


# --- products -------------------------------------------------------------------------------------------


def _query_problem(parameter: str, code: str, message: str) -> InvalidRequest:
    return InvalidRequest([{"path": parameter, "code": code, "message": message}],
                          f"Invalid query parameter {parameter}.")


def _flag(name: str) -> bool:
    raw = request.args.get(name, "false")
    if raw not in ("true", "false"):
        raise _query_problem(name, "INVALID_BOOLEAN", f"{name} must be true or false.")
    return raw == "true"


def _optional_limit() -> int | None:
    raw = request.args.get("limit")
    if raw is None:
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE_SIZE:
        raise _query_problem("limit", "OUT_OF_RANGE", f"limit must be an integer from 1 to {MAX_PAGE_SIZE}.")
    return int(raw)


@blueprint.get("/products")
@document_querystring(shapes.ProductQuery)
@document_response(shapes.ProductIds)
@document_response(InvalidRequestError, 400)
@document_response(InvalidRequestError, 400)
async def product_ids(tenantId: str, eComStoreId: str) -> Response:
    """Visible product ids by id; published only unless includeUnpublished=true; all at once without limit."""
    published_only, limit = not _flag("includeUnpublished"), _optional_limit()
    try:
        after = decode_cursor(request.args.get("cursor"), ProductKey.from_dict)
    except ValueError:
        raise _query_problem("cursor", "INVALID_CURSOR", "cursor must be a nextCursor value from this list.") from None
    ids, last = await blocking(product_id_page, services().engine, tenantId, eComStoreId,
                               published_only=published_only, after=after.id if after else None, limit=limit)
    return json_response({"items": ids, "nextCursor": encode_cursor(ProductKey(last) if last else None)})


def _canonical_id(raw: str) -> str | None:
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        return None


@blueprint.get("/products/<productId>")
@document_response(shapes.Product)
@document_response(NotFoundError, 404)
@document_response(NotFoundError, 404)
async def product(tenantId: str, eComStoreId: str, productId: str) -> Response:
    product_id = _canonical_id(productId)
    record = product_id and await blocking(read_product, services().engine, tenantId, eComStoreId, product_id)
    if not record:
        raise NotFound(f"No product {productId} in this eCom store's assortment.")
    return json_response(render.product(record))


@blueprint.get("/skus/<skuIdOrNumber>/inventory")
@document_response(shapes.SkuInventory)
@document_response(SkuNotFoundError, 404)
@document_response(SkuNotFoundError, 404)
async def inventory(tenantId: str, eComStoreId: str, skuIdOrNumber: str) -> Response:
    """Stock at the serving warehouses and the click and collect stores; the path names the SKU by id or number."""
    found = await blocking(sku_inventory, services().engine, tenantId, eComStoreId, skuIdOrNumber)
    if found is None:
        raise SkuNotFound(f"No SKU with id or number {skuIdOrNumber} in this eCom store's assortment.")
    return json_response(render.inventory(found))


@blueprint.get("/campaigns")
@document_response(shapes.Campaigns)
async def campaigns(tenantId: str, eComStoreId: str) -> Response:
    """Released campaigns not yet ended (on the UTC day of the request) that cover SKUs of the assortment."""
    today = utc_now().date()
    found = await blocking(current_campaigns, services().engine, tenantId, eComStoreId, today)
    return json_response({"campaigns": [render.campaign(campaign, today) for campaign in found]})


# --- trigger_events -------------------------------------------------------------------------------------


def _announce(tenant_id: str, ecom_store_id: str, subject: str, entities: sa.Select) -> int:
    """One event per entity, to this eCom store only, in one transaction."""
    with services().engine.begin() as conn:
        return assortment_events(conn, tenant_id, ecom_store_id, subject, entities)


@blueprint.post("/products/trigger_events")
@document_response(shapes.EventsTriggered)
async def trigger_product_events(tenantId: str, eComStoreId: str) -> Response:
    """A ProductUpdated event for every product of the assortment, published or not (initial synchronisation)."""
    count = await blocking(_announce, tenantId, eComStoreId, PRODUCT_UPDATED,
                           visible_product_ids(tenantId, eComStoreId, published_only=False))
    return json_response({"eventsTriggered": count,
                          "message": f"{PRODUCT_UPDATED} queued for {count} product(s) of the assortment."})


@blueprint.post("/inventory/trigger_events")
@document_response(shapes.EventsTriggered)
async def trigger_inventory_events(tenantId: str, eComStoreId: str) -> Response:
    """An InventoryUpdated event for every SKU of the assortment (initial synchronisation)."""
    count = await blocking(_announce, tenantId, eComStoreId, INVENTORY_UPDATED,
                           visible_skus(tenantId, eComStoreId).with_only_columns(skus.c.id).order_by(skus.c.id))
    return json_response({"eventsTriggered": count,
                          "message": f"{INVENTORY_UPDATED} queued for {count} SKU(s) of the assortment."})
