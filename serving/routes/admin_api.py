"""The back office's admin API: /admin/v1/tenants/{tenantId}/… for admin-scope clients only.

Each route parses its body and runs the shared operation (serving/admin_operations.py) off the event loop.
"""

from typing import Any

from quart import Blueprint, Response, request
from quart_schema import document_request, document_response

from contracts.admin import (
    BackofficeDocument,
    EventDestination,
    EventDestinationRequest,
    LoadReport,
    ReleasedRetailStore,
    StockAdjustment,
    StockLevel,
)
from contracts.models import InvalidRequestError, NotFoundError
from serving import admin_operations
from serving.jsonio import blocking, json_response
from serving.protection import protect
from serving.services import services
from serving.validation import parse_json
from store.secrets import secret_box

blueprint = Blueprint("admin_api", __name__, url_prefix="/admin/v1/tenants/<tenantId>")
protect(blueprint, "admin")


async def _json() -> Any:
    # A back-office document can be megabytes: parsed off the event loop too.
    return await blocking(parse_json, await request.get_data())


@blueprint.post("/backoffice")
@document_request(BackofficeDocument)
@document_response(LoadReport, 200)
@document_response(InvalidRequestError, 400)
async def load_backoffice(tenantId: str) -> Response:
    """Load a back-office document (partial upsert, all or nothing; contracts/backoffice.schema.json)."""
    return json_response(await blocking(admin_operations.load, services().engine, tenantId, await _json()))


@blueprint.post("/stock_adjustments")
@document_request(StockAdjustment)
@document_response(StockLevel, 200)
@document_response(InvalidRequestError, 400)
@document_response(NotFoundError, 404)
async def stock_adjustment(tenantId: str) -> Response:
    """Add to on hand at a location, or set the counted quantity; InventoryUpdated when it changed."""
    return json_response(await blocking(admin_operations.adjust, services().engine, tenantId, await _json()))


@blueprint.post("/retail_stores/<retailStoreNumber>/release")
@document_response(ReleasedRetailStore, 200)
@document_response(NotFoundError, 404)
async def release_retail_store(tenantId: str, retailStoreNumber: str) -> Response:
    """Release the store; RetailStoreUpdated when it was not released yet."""
    return json_response(await blocking(admin_operations.release, services().engine, tenantId, retailStoreNumber))


@blueprint.put("/ecom_stores/<eComStoreId>/event_destination")
@document_request(EventDestinationRequest)
@document_response(EventDestination, 200)
@document_response(InvalidRequestError, 400)
@document_response(NotFoundError, 404)
async def put_event_destination(tenantId: str, eComStoreId: str) -> Response:
    """Set where the eCom store's events go; the secret is sealed at rest and never returned."""
    body = await _json()
    box = await blocking(secret_box, services().settings)  # may read the embedded key file
    return json_response(await blocking(admin_operations.put_destination, services().engine, box, tenantId,
                                        eComStoreId, body))


@blueprint.get("/ecom_stores/<eComStoreId>/event_destination")
@document_response(EventDestination, 200)
@document_response(NotFoundError, 404)
async def get_event_destination(tenantId: str, eComStoreId: str) -> Response:
    return json_response(await blocking(admin_operations.show_destination, services().engine, tenantId,
                                        eComStoreId))
