"""Unauthenticated routes: health, the published contract, OAuth server metadata and signing keys."""

import logging

from quart import Blueprint, Response, current_app
from quart_schema import document_response, tag

from contracts.meta import Health, JsonWebKeySet, Metrics, OpenApiDocument, OpenIdConfiguration, ServerMetadata
from db.clients import SCOPES
from serving.health import probe_database, probe_pipeline
from serving.jsonio import json_response
from serving.metrics import CONTENT_TYPE
from serving.openapi import openapi_json
from serving.services import services
from serving.threads import blocking

blueprint = Blueprint("meta", __name__)
log = logging.getLogger(__name__)


@blueprint.get("/healthcheck")
@tag(["Operations"])
@document_response(Health, 200)
@document_response(Health, 503)
async def healthcheck() -> Response:
    """Probe the service and its database.

    200 while the database answers, 503 when it cannot be reached; the pipeline check only reports.
    """
    engine, settings = services().engine, services().settings
    try:
        latency = await blocking(probe_database, engine)
    except Exception as error:  # any failure to reach the database means unavailable
        checks = {"database": {"status": "unavailable", "error": type(error).__name__},
                  "pipeline": {"status": "unknown"}}
        return json_response({"status": "unavailable", "checks": checks}, 503, {"Cache-Control": "no-store"})
    try:
        pipeline = await blocking(probe_pipeline, engine, settings.pipeline_stale_seconds)
    except Exception as error:
        log.exception("healthcheck: pipeline probe failed")
        pipeline = {"status": "unknown", "error": type(error).__name__}
    checks = {"database": {"status": "ok", "latencyMs": latency}, "pipeline": pipeline}
    return json_response({"status": "ok", "checks": checks}, 200, {"Cache-Control": "no-store"})


@blueprint.get("/metrics")
@tag(["Operations"])
@document_response(Metrics, 200)
async def metrics() -> Response:
    """Metrics for Prometheus: requests, queues, event delivery, the process; no token, like /healthcheck (serve
    it on the internal network only)."""
    exposition = await blocking(services().metrics.exposition)
    return Response(exposition, content_type=CONTENT_TYPE, headers={"Cache-Control": "no-store"})


@blueprint.get("/v1/openapi.json")
@tag(["Operations"])
@document_response(OpenApiDocument, 200)
async def openapi() -> Response:
    """This document."""
    return Response(openapi_json(current_app), content_type="application/json")


@blueprint.get("/.well-known/jwks.json")
@tag(["Authentication"])
@document_response(JsonWebKeySet, 200)
async def jwks() -> Response:
    """Public token signing keys."""
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
@tag(["Authentication"])
@document_response(ServerMetadata, 200)
async def authorization_server_metadata() -> Response:
    """Authorization server metadata (RFC 8414)."""
    return json_response(_server_metadata())


@blueprint.get("/.well-known/openid-configuration")
@tag(["Authentication"])
@document_response(OpenIdConfiguration, 200)
async def openid_configuration() -> Response:
    """OpenID provider configuration."""
    # Only the discovery fields that mean something for a client-credentials-only server.
    return json_response({**_server_metadata(), "subject_types_supported": ["public"],
                          "id_token_signing_alg_values_supported": ["ES256"]})
