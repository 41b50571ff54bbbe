"""Loyalty programs scope: /v1/tenants/{tenantId}/loyalty_programs/{loyaltyProgramId}/…"""

from quart import Blueprint, Response
from quart_schema import document_response

from contracts.catalogue import LoyaltyProgram, RetailStore
from contracts.errors import NotFound
from contracts.models import Items
from db.reference import loyalty_program, program_retail_stores
from serving.jsonio import json_response
from serving.protection import protect
from serving.rendering import catalogue as render
from serving.rendering.stores import retail_store_json
from serving.services import services
from serving.threads import blocking

blueprint = Blueprint("loyalty_programs", __name__,
                      url_prefix="/v1/tenants/<tenantId>/loyalty_programs/<loyaltyProgramId>")
protect(blueprint, "loyalty_programs", resource_arg="loyaltyProgramId")


# SPEC.md writes the scope's base address with a trailing slash; the address without it answers the same
# (no redirect, which some HTTP clients would not follow with the Authorization header).
@blueprint.get("/", strict_slashes=False)
@document_response(LoyaltyProgram)
async def program(tenantId: str, loyaltyProgramId: str) -> Response:
    row = await blocking(loyalty_program, services().engine, tenantId, loyaltyProgramId)
    if row is None:
        raise NotFound(f"No loyalty program {loyaltyProgramId}.")
    return json_response(render.loyalty_program(row))


@blueprint.get("/retail_stores")
@document_response(Items[RetailStore])
async def retail_stores(tenantId: str, loyaltyProgramId: str) -> Response:
    rows = await blocking(program_retail_stores, services().engine, tenantId, loyaltyProgramId)
    return json_response({"items": [retail_store_json(row) for row in rows]})
