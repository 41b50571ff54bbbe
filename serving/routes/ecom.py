"""E-commerce scope: /v1/tenants/{tenantId}/ecom_stores/{eComStoreId}/…"""

from quart import Blueprint, Response

from serving.jsonio import blocking, json_response
from serving.protection import protect
from serving.routes.stores import retail_store_json
from serving.services import services
from store.reference import company_retail_stores

blueprint = Blueprint("ecom", __name__, url_prefix="/v1/tenants/<tenantId>/ecom_stores/<eComStoreId>")
protect(blueprint, "ecom", resource_arg="eComStoreId")


@blueprint.get("/retail_stores")
async def retail_stores(tenantId: str, eComStoreId: str) -> Response:
    """The click and collect network: the retail stores of the eCom store's company."""
    rows = await blocking(company_retail_stores, services().engine, tenantId, eComStoreId)
    return json_response({"items": [retail_store_json(row) for row in rows]})
