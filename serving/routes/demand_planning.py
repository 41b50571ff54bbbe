"""Demand planning scope: /v1/tenants/{tenantId}/demand_planning/…"""

from quart import Blueprint, Response, g

from contracts.limits import published_limits
from serving.jsonio import blocking, json_response
from serving.protection import protect
from serving.routes.stores import ecom_store_json, retail_store_json
from serving.services import services
from store.reference import list_ecom_stores, list_retail_stores

blueprint = Blueprint("demand_planning", __name__, url_prefix="/v1/tenants/<tenantId>/demand_planning")
protect(blueprint, "demand_planning")


@blueprint.get("/retail_stores")
async def retail_stores(tenantId: str) -> Response:  # noqa: N803
    rows = await blocking(list_retail_stores, services().engine, tenantId)
    return json_response({"items": [retail_store_json(row) for row in rows]})


@blueprint.get("/ecom_stores")
async def ecom_stores(tenantId: str) -> Response:  # noqa: N803
    rows = await blocking(list_ecom_stores, services().engine, tenantId)
    return json_response({"items": [ecom_store_json(row) for row in rows]})


@blueprint.get("/limits")
async def limits(tenantId: str) -> Response:  # noqa: N803
    return json_response(published_limits(g.rate_limit.limit))
