"""Loyalty programs scope: /v1/tenants/{tenantId}/loyalty_programs/{loyaltyProgramId}/…"""

from quart import Blueprint, Response

from serving.jsonio import blocking, json_response
from serving.protection import protect
from serving.routes.stores import retail_store_json
from serving.services import services
from store.reference import program_retail_stores

blueprint = Blueprint("loyalty_programs", __name__,
                      url_prefix="/v1/tenants/<tenantId>/loyalty_programs/<loyaltyProgramId>")
protect(blueprint, "loyalty_programs", resource_arg="loyaltyProgramId")


@blueprint.get("/retail_stores")
async def retail_stores(tenantId: str, loyaltyProgramId: str) -> Response:
    rows = await blocking(program_retail_stores, services().engine, tenantId, loyaltyProgramId)
    return json_response({"items": [retail_store_json(row) for row in rows]})
