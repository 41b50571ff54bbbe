"""The OpenAPI 3.1 document of every route the service serves, at /v1/openapi.json."""

from typing import Any

from contracts.formats import DECIMAL
from contracts.limits import published_limits

SCOPE_PREFIXES = {
    "ecom": "/v1/tenants/{tenantId}/ecom_stores/{eComStoreId}",
    "loyalty_programs": "/v1/tenants/{tenantId}/loyalty_programs/{loyaltyProgramId}",
    "demand_planning": "/v1/tenants/{tenantId}/demand_planning",
}
_PATH_PARAMETERS = {
    "tenantId": "Tenant id.",
    "eComStoreId": "eCom store id the token was issued for.",
    "loyaltyProgramId": "Loyalty program id the token was issued for.",
    "batchId": "Client-generated UUID of the batch.",
    "retailStoreNumber": "Retail store number.",
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


def _list_of(item: str) -> dict[str, Any]:
    return {"type": "object", "required": ["items"], "properties": {"items": {"type": "array", "items": _ref(item)}}}


def _protected(scope: str, summary: str, ok: dict[str, Any], tag: str, *, status: str = "200",
               more: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """An operation under a scope prefix: bearer security and the shared 401/403/429/500 answers."""
    responses = {
        status: ok,
        **(more or {}),
        "401": _error("Missing, invalid or expired token."),
        "403": _error(f"Token not issued for this tenant, resource or the {scope} scope."),
        "429": _error("Rate limit exceeded; wait Retry-After seconds."),
        "500": _error("Server failure."),
    }
    security = [{"OAuth2": [scope]}, {"BearerAuth": []}]
    return {"summary": summary, "tags": [tag], "security": security, "responses": responses, **extra}


def _parameters(path: str) -> list[dict[str, Any]]:
    return [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}, "description": text}
            for name, text in _PATH_PARAMETERS.items() if "{" + name + "}" in path]


def _token_operation(summary: str, legacy: bool) -> dict[str, Any]:
    fields = ["client_id", "client_secret", "grant_type", "scope", "resource"] + ([] if legacy else ["tenant_id"])
    request_schema = {"type": "object", "required": ["grant_type"] + ([] if legacy else ["tenant_id"]),
                      "properties": {name: {"type": "string"} for name in fields}}
    return {
        "summary": summary, "tags": ["Authentication"], "security": [],
        "requestBody": {"required": True, "content": {
            "application/x-www-form-urlencoded": {"schema": request_schema},
            "application/json": {"schema": request_schema}}},
        "responses": {
            "200": _json(_ref("TokenResponse"), "Access token."),
            "400": _json(_ref("TokenError"), "invalid_request, unsupported_grant_type, invalid_scope or "
                                             "invalid_target (RFC 6749 §5.2, RFC 8707)."),
            "401": _json(_ref("TokenError"), "invalid_client: client authentication failed or disabled."),
        },
    }


_SCHEMAS: dict[str, Any] = {
    "Error": {"type": "object", "required": ["error", "message"], "properties": {
        "error": {"type": "string", "description": "Stable machine-readable code."},
        "message": {"type": "string"}, "details": {"type": "object"}}},
    "TokenResponse": {"type": "object", "required": ["access_token", "token_type", "expires_in"], "properties": {
        "access_token": {"type": "string"}, "token_type": {"const": "Bearer"},
        "expires_in": {"type": "integer", "examples": [3600]}, "scope": {"type": "string"}}},
    "TokenError": {"type": "object", "required": ["error"], "properties": {
        "error": {"enum": ["invalid_request", "invalid_client", "unsupported_grant_type", "invalid_scope",
                           "invalid_target"]},
        "error_description": {"type": "string"}, "message": {"type": "string"}}},
    "StoreStatus": {"enum": ["RELEASED", "NOT_RELEASED"]},
    "RetailStore": {"type": "object", "required": ["id", "number", "name", "status"], "properties": {
        "id": {"type": "string"}, "number": {"type": "string"}, "name": {"type": "string"},
        "status": _ref("StoreStatus"),
        "visitAddress": {"type": "object", "properties": {
            name: {"type": ["string", "null"]} for name in ("street", "postCode", "city", "countryIsoCode")}}}},
    "EcomStore": {"type": "object", "required": ["id", "number", "name", "status"], "properties": {
        "id": {"type": "string"}, "number": {"type": "string"}, "name": {"type": "string"},
        "status": _ref("StoreStatus")}},
    "Limits": {"type": "object", "properties": {name: {"type": "integer"} for name in published_limits()}},
    "BatchStatus": {"type": "object", "required": ["batchId", "batchKind", "progress"], "properties": {
        "batchId": {"type": "string", "format": "uuid"},
        "batchKind": {"enum": ["SALES_FORECAST", "REPLENISHMENT_PARAMETER"]},
        "progress": {"enum": ["PENDING", "PROCESSING", "COMPLETED", "COMPLETED_WITH_REJECTED_ITEMS", "FAILED"]},
        "generatedAt": {"type": "string", "format": "date-time"},
        "batchIndex": {"type": ["integer", "null"]}, "batchTotal": {"type": ["integer", "null"]},
        "itemCount": {"type": "integer"},
        "receivedTime": {"type": "string", "format": "date-time"},
        "startedTime": {"type": ["string", "null"], "format": "date-time"},
        "completedTime": {"type": ["string", "null"], "format": "date-time"},
        "counts": {"type": ["object", "null"], "properties": {
            name: {"type": "integer"} for name in ("items", "applied", "superseded", "locked", "rejected")}},
        "rejectedItems": {"type": ["array", "null"], "items": {"type": "object", "properties": {
            "index": {"type": "integer"}, "retailStoreNumber": {"type": "string"},
            "ecomStoreNumber": {"type": "string"}, "skuNumber": {"type": "string"}, "code": {"type": "string"}}}},
        "rejectedItemsTruncated": {"type": "boolean"},
        "warnings": {"type": "array", "items": {"type": "object", "properties": {
            "code": {"type": "string"}, "field": {"type": ["string", "null"]}, "count": {"type": "integer"},
            "message": {"type": "string"}}}},
        "errorMessage": {"type": ["string", "null"]}}},
    "Envelope": {"type": "object", "required": ["generatedAt", "itemCount", "items"], "properties": {
        "generatedAt": {"type": "string", "format": "date-time"},
        "batchIndex": {"type": "integer", "minimum": 1}, "batchTotal": {"type": "integer", "minimum": 1},
        "itemCount": {"type": "integer"}, "ext": {"type": "object"}}},
    "SalesForecastBatch": {"allOf": [{"$ref": "#/components/schemas/Envelope"}, {"type": "object", "properties": {
        "items": {"type": "array", "maxItems": 20000, "items": {"type": "object", "required": [
            "skuNumber", "horizonStartDate", "horizonEndDate", "quantities"], "properties": {
            "retailStoreNumber": {"type": "string"}, "ecomStoreNumber": {"type": "string"},
            "skuNumber": {"type": "string"}, "horizonStartDate": {"type": "string", "format": "date"},
            "horizonEndDate": {"type": "string", "format": "date"},
            "quantities": {"type": "array", "minItems": 1, "maxItems": 62, "items": _ref("DecimalString")},
            "ext": {"type": "object"}}}}}}]},
    "ReplenishmentParameterBatch": {"allOf": [{"$ref": "#/components/schemas/Envelope"}, {
        "type": "object", "properties": {"items": {"type": "array", "maxItems": 20000, "items": {
            "type": "object", "required": ["retailStoreNumber", "skuNumber", "reorderPoint", "maximumInventory"],
            "properties": {"retailStoreNumber": {"type": "string"}, "skuNumber": {"type": "string"},
                           "reorderPoint": _ref("DecimalString"), "maximumInventory": _ref("DecimalString"),
                           "ext": {"type": "object"}}}}}}]},
    "DecimalString": {"type": "string", "pattern": DECIMAL.json_schema, "examples": ["12", "0.5"]},
    "SalesForecast": {"type": "object", "properties": {
        "retailStoreNumber": {"type": ["string", "null"]}, "ecomStoreNumber": {"type": ["string", "null"]},
        "skuNumber": {"type": "string"}, "horizonStartDate": {"type": "string", "format": "date"},
        "horizonEndDate": {"type": "string", "format": "date"},
        "quantities": {"type": "array", "items": _ref("DecimalString")},
        "generatedAt": {"type": "string", "format": "date-time"},
        "modifiedTime": {"type": "string", "format": "date-time"}}},
    "ReplenishmentParameter": {"type": "object", "properties": {
        "retailStoreNumber": {"type": "string"}, "skuNumber": {"type": "string"},
        "replenishmentType": {"enum": ["AUTO", "MANUAL"]},
        "reorderPoint": {"type": ["string", "null"]}, "maximumInventory": {"type": ["string", "null"]},
        "parameterSource": {"enum": ["RETAIL_STORE_SPECIFIC", "LOCAL_ASSORTMENT", "BASE_ASSORTMENT"]},
        "locked": {"type": "boolean"}, "modifiedTime": {"type": "string", "format": "date-time"}}},
    "Health": {"type": "object", "required": ["status", "checks"], "properties": {
        "status": {"enum": ["ok", "unavailable"]},
        "checks": {"type": "object", "properties": {
            "database": {"type": "object", "properties": {
                "status": {"enum": ["ok", "unavailable"]}, "latencyMs": {"type": "number"}}},
            # Reported only: a stalled pipeline leaves the status 200 while the database answers.
            "pipeline": {"type": "object", "properties": {
                "status": {"enum": ["ok", "stalled", "unknown"]},
                "lastHeartbeat": {"type": ["string", "null"], "format": "date-time"},
                "heartbeatAgeSeconds": {"type": ["number", "null"]},
                "oldestPendingAgeSeconds": {"type": ["number", "null"]}}}}}}},
}


def _page_of(item: str) -> dict[str, Any]:
    return {"type": "object", "required": ["items", "nextCursor"], "properties": {
        "items": {"type": "array", "items": _ref(item)}, "nextCursor": {"type": ["string", "null"]}}}


def _query(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": schema or {"type": "string"}}


def _paging() -> list[dict[str, Any]]:
    return [_query("limit", "Page size, default 1000, at most 5000.",
                   {"type": "integer", "minimum": 1, "maximum": 5000, "default": 1000}),
            _query("cursor", "nextCursor of the previous page.")]


def _batch_operations(envelope: str, noun: str) -> dict[str, Any]:
    status = _json(_ref("BatchStatus"), "Batch status.")
    upload = _protected(
        "demand_planning", f"Upload a {noun} batch (JSON, optionally gzip)", status, "Demand planning",
        status="202", more={
            "200": _json(_ref("BatchStatus"), "The same id and body were uploaded before: the current status."),
            "400": _error("VALIDATION_ERROR listing every field error, BAD_REQUEST for unparseable JSON; "
                          "nothing stored."),
            "409": _error("BATCH_ID_REUSED: the id was used for a different payload."),
            "413": _error("LIMIT_EXCEEDED: details.limit, max and received."),
            "415": _error("UNSUPPORTED_MEDIA_TYPE: not application/json, or an encoding other than gzip."),
            "503": _error("SERVICE_UNAVAILABLE: too many uploads are being checked; retry after Retry-After "
                          "seconds with the same batch id and body.")},
        requestBody={"required": True, "content": {"application/json": {"schema": _ref(envelope)}}},
        parameters=[{"name": "Content-Encoding", "in": "header", "required": False,
                     "schema": {"enum": ["gzip", "identity"]}}])
    upload["responses"]["202"]["headers"] = {"Location": {"schema": {"type": "string"},
                                                          "description": "The batch status."}}
    read = _protected("demand_planning", f"Status of a {noun} batch", status, "Demand planning",
                      more={"404": _error("No such batch for this tenant.")})
    return {"put": upload, "get": read}


def _paths() -> dict[str, dict[str, Any]]:
    ecom, loyalty, planning = (SCOPE_PREFIXES[s] for s in ("ecom", "loyalty_programs", "demand_planning"))
    return {
        "/healthcheck": {"get": {"summary": "Probe the service and its database", "tags": ["Operations"],
                                 "security": [], "responses": {
                                     "200": _json(_ref("Health"), "Healthy."),
                                     "503": _json(_ref("Health"), "The database cannot be reached.")}}},
        "/v1/openapi.json": {"get": {"summary": "This document", "tags": ["Operations"], "security": [],
                                     "responses": {"200": {"description": "OpenAPI 3.1 document."}}}},
        "/.well-known/jwks.json": {"get": {"summary": "Public token signing keys", "tags": ["Authentication"],
                                           "security": [], "responses": {"200": {"description": "JWK set."}}}},
        "/.well-known/oauth-authorization-server": {"get": {
            "summary": "Authorization server metadata (RFC 8414)", "tags": ["Authentication"], "security": [],
            "responses": {"200": {"description": "Metadata."}}}},
        "/.well-known/openid-configuration": {"get": {
            "summary": "OpenID provider configuration", "tags": ["Authentication"], "security": [],
            "responses": {"200": {"description": "Metadata."}}}},
        "/oauth2/token": {"post": _token_operation("Exchange client credentials for a token", legacy=False)},
        "/v1/tenants/{tenantId}/oauth2/v2.0/token": {
            "post": _token_operation("Token endpoint kept for existing integrations", legacy=True)},
        f"{ecom}/retail_stores": {"get": _protected(
            "ecom", "Retail stores of the eCom store's company (click and collect network)",
            _json(_list_of("RetailStore"), "Retail stores."), "E-commerce")},
        f"{loyalty}/retail_stores": {"get": _protected(
            "loyalty_programs", "Retail stores of the loyalty program",
            _json(_list_of("RetailStore"), "Retail stores."), "Loyalty programs")},
        f"{planning}/retail_stores": {"get": _protected(
            "demand_planning", "Retail stores with their numbers",
            _json(_list_of("RetailStore"), "Retail stores."), "Demand planning")},
        f"{planning}/ecom_stores": {"get": _protected(
            "demand_planning", "eCom stores with their numbers",
            _json(_list_of("EcomStore"), "eCom stores."), "Demand planning")},
        f"{planning}/limits": {"get": _protected(
            "demand_planning", "Published limits", _json(_ref("Limits"), "Limits."), "Demand planning")},
        f"{planning}/sales_forecast_batches/{{batchId}}": _batch_operations("SalesForecastBatch", "sales forecast"),
        f"{planning}/replenishment_parameter_batches/{{batchId}}": _batch_operations(
            "ReplenishmentParameterBatch", "replenishment parameter"),
        f"{planning}/sales_forecasts": {"get": _protected(
            "demand_planning", "Held sales forecasts, retail stores first, a page never spanning two stores",
            _json(_page_of("SalesForecast"), "A page."), "Demand planning",
            parameters=[_query("retailStoreNumber", "Only this retail store."),
                        _query("ecomStoreNumber", "Only this eCom store (not with retailStoreNumber)."),
                        *_paging()], more={"400": _error("Invalid query parameter.")})},
        f"{planning}/replenishment_parameters": {"get": _protected(
            "demand_planning", "Replenishment parameters in use, resolved store-specific, local, base",
            _json(_page_of("ReplenishmentParameter"), "A page."), "Demand planning",
            parameters=[_query("retailStoreNumber", "Only this retail store."),
                        _query("modifiedSince", "Only lines modified after this instant (ISO 8601 with offset).",
                               {"type": "string", "format": "date-time"}),
                        *_paging()], more={"400": _error("Invalid query parameter.")})},
        **_admin_paths(),
    }


def _admin_paths() -> dict[str, dict[str, Any]]:
    """The back office's admin API, in outline (its models are in contracts/admin.py)."""
    admin, body = "/admin/v1/tenants/{tenantId}", {"required": True, "content": {"application/json": {
        "schema": {"type": "object"}}}}

    def operation(summary: str, **extra: Any) -> dict[str, Any]:
        return _protected("admin", summary, _json({"type": "object"}, "Done."), "Admin",
                          more={"400": _error("INVALID_REQUEST with every problem's path."),
                                "404": _error("Unknown tenant data named by the request.")}, **extra)

    return {
        f"{admin}/backoffice": {"post": operation("Load a back-office document", requestBody=body)},
        f"{admin}/stock_adjustments": {"post": operation("Adjust stock on hand", requestBody=body)},
        f"{admin}/retail_stores/{{retailStoreNumber}}/release": {"post": operation("Release a retail store")},
        f"{admin}/ecom_stores/{{eComStoreId}}/event_destination": {
            "put": operation("Set the eCom store's event destination", requestBody=body),
            "get": operation("The eCom store's event destination, without its secret")},
    }


def openapi_document(base_url: str) -> dict[str, Any]:
    paths = _paths()
    for path, item in paths.items():
        if parameters := _parameters(path):
            item["parameters"] = parameters
    return {
        "openapi": "3.1.0",
        "info": {"title": "Public Integration API", "version": "latest",
                 "description": "Integration API of the retail back office. Demand planning is experimental."},
        "servers": [{"url": base_url}],
        "tags": [{"name": "Demand planning", "description": "Experimental."}],
        "security": [{"OAuth2": []}, {"BearerAuth": []}],
        "paths": paths,
        "components": {
            "schemas": _SCHEMAS,
            "securitySchemes": {
                "OAuth2": {"type": "oauth2", "flows": {"clientCredentials": {
                    "tokenUrl": f"{base_url}/oauth2/token",
                    "scopes": {"ecom": "E-commerce", "loyalty_programs": "Loyalty programs",
                               "demand_planning": "Demand planning", "admin": "Back office"}}}},
                "BearerAuth": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
            },
        },
    }
