"""What the OpenAPI document says beyond the routes' own models: its title, the security schemes, a tag per
scope, the path parameters' meaning and the answers every protected route may give.

The document itself is generated from the routes (`serving/openapi.py`); this module holds the words.
"""

from typing import Any

TITLE = "Public Integration API"
DESCRIPTION = ("Integration API of the retail back office. Demand planning is experimental. Every error answers "
               "the Error body ({\"error\", \"message\", \"details\"}), also for unknown routes (404 NOT_FOUND) and "
               "methods (405 METHOD_NOT_ALLOWED, with Allow).")

# The OAuth 2.0 scopes, each with the tag its routes are listed under.
SCOPES = {
    "ecom": "E-commerce",
    "loyalty_programs": "Loyalty programs",
    "demand_planning": "Demand planning",
    "admin": "Back-office admin",
}
_TAG_DESCRIPTIONS = {
    "E-commerce": "An eCom store's routes; ecom-scope clients bound to the store.",
    "Loyalty programs": "A loyalty program's routes; loyalty_programs-scope clients bound to the program.",
    "Demand planning": "Experimental.",
    "Back-office admin": "The back office's own routes under /admin/v1; admin-scope clients only.",
    "Authentication": "OAuth 2.0 client credentials: tokens, server metadata, signing keys.",
    "Operations": "Health and this document.",
}

PATH_PARAMETERS = {
    "tenantId": "Tenant id.",
    "eComStoreId": "eCom store id the token was issued for.",
    "loyaltyProgramId": "Loyalty program id the token was issued for.",
    "batchId": "Client-generated UUID of the batch.",
}
# The path parameters the server refuses (400) unless they are UUIDs: their schema says so.
UUID_PATH_PARAMETERS = ("batchId", "customerId")

# Answers of every protected route (status → description), besides the 500 every route may give.
PROTECTED_ERRORS = {
    401: "Missing, invalid or expired token, or a disabled client (WWW-Authenticate: Bearer).",
    403: "The token was not issued for this tenant, resource or scope.",
    429: "Rate limit exceeded; retry after Retry-After seconds.",
}
SERVER_ERROR = "Server failure; the message quotes the request id."
# Answers of the routes whose requests are checked before they run (e-commerce, loyalty, admin).
UNSUPPORTED_MEDIA_TYPE = "UNSUPPORTED_MEDIA_TYPE: the body was not sent as application/json (charset utf-8 only)."
INVALID_PATH_PARAMETER = ("INVALID_REQUEST: a path parameter holds a control character (details.errors names it, "
                          "code INVALID_PATH_PARAMETER); nothing was read or stored.")


def tags() -> dict[str, str]:
    """Every tag with its description: one per scope, then the open routes' own."""
    return {name: _TAG_DESCRIPTIONS.get(name, "") for name in (*SCOPES.values(), *_TAG_DESCRIPTIONS)}


def security_schemes(issuer: str) -> dict[str, dict[str, Any]]:
    return {
        "OAuth2": {"type": "oauth2", "flows": {"clientCredentials": {
            "tokenUrl": f"{issuer}/oauth2/token", "scopes": SCOPES}}},
        "BearerAuth": {"type": "http", "scheme": "bearer", "bearer_format": "JWT"},
    }


def security_of(scope: str) -> list[dict[str, list[str]]]:
    """Either scheme grants access: the OAuth 2.0 flow for the scope, or a bearer token got from it."""
    return [{"OAuth2": [scope]}, {"BearerAuth": []}]
