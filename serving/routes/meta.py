"""Unauthenticated routes: health, the published contract, OAuth server metadata and signing keys."""

import time

import sqlalchemy as sa
from quart import Blueprint, Response

from contracts.openapi import openapi_document
from serving.jsonio import blocking, json_response
from serving.services import services
from store.clients import SCOPES

blueprint = Blueprint("meta", __name__)


def _probe_database(engine: sa.Engine) -> float:
    started = time.perf_counter()
    with engine.connect() as conn:
        conn.execute(sa.text("SELECT 1"))
    return round((time.perf_counter() - started) * 1000, 2)


@blueprint.get("/healthcheck")
async def healthcheck() -> Response:
    try:
        latency = await blocking(_probe_database, services().engine)
    except Exception as error:  # any failure to reach the database means unavailable
        check = {"status": "unavailable", "error": type(error).__name__}
        return json_response({"status": "unavailable", "checks": {"database": check}}, 503,
                             {"Cache-Control": "no-store"})
    check = {"status": "ok", "latencyMs": latency}
    return json_response({"status": "ok", "checks": {"database": check}}, 200, {"Cache-Control": "no-store"})


@blueprint.get("/v1/openapi.json")
async def openapi() -> Response:
    return json_response(openapi_document(services().tokens.issuer))


@blueprint.get("/.well-known/jwks.json")
async def jwks() -> Response:
    keys = await services().tokens.public_jwks()
    return json_response(keys, headers={"Cache-Control": "public, max-age=300"})


def _server_metadata() -> dict:
    issuer = services().tokens.issuer
    return {
        "issuer": issuer,
        "token_endpoint": f"{issuer}/oauth2/token",
        "jwks_uri": f"{issuer}/.well-known/jwks.json",
        "grant_types_supported": ["client_credentials"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "scopes_supported": list(SCOPES),
        "response_types_supported": ["token"],
        "service_documentation": f"{issuer}/v1/openapi.json",
    }


@blueprint.get("/.well-known/oauth-authorization-server")
async def authorization_server_metadata() -> Response:
    return json_response(_server_metadata())


@blueprint.get("/.well-known/openid-configuration")
async def openid_configuration() -> Response:
    # Only the discovery fields that mean something for a client-credentials-only server.
    return json_response({**_server_metadata(), "subject_types_supported": ["public"],
                          "id_token_signing_alg_values_supported": ["ES256"]})
