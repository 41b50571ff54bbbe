"""OAuth 2.0 client credentials token endpoints; errors per RFC 6749 §5.2 (and RFC 8707 for resource)."""

import base64
import binascii
from typing import Any
from urllib.parse import parse_qs, unquote_plus

import orjson
from quart import Blueprint, Response, request
from quart_schema import document_request, document_response, tag
from quart_schema.validation import DataSource

from contracts.formats import control_problem
from contracts.meta import (
    ClientAuthenticationFailed,
    TokenAttemptsThrottled,
    TokenRequest,
    TokenRequestRefused,
    TokenResponse,
)
from db.clients import Client, get_client
from serving.credentials import DUMMY_HASH
from serving.jsonio import blocking, json_response
from serving.openapi import also_accepts
from serving.secret_verifier import VerifierBusy
from serving.services import services

blueprint = Blueprint("oauth", __name__)
_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
# A waiting slot frees as soon as any running secret check ends.
_BUSY_RETRY_AFTER_SECONDS = 1


class TokenError(Exception):
    def __init__(self, status: int, error: str, description: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(description)
        self.status, self.error, self.description = status, error, description
        self.headers = headers or {}

    def response(self) -> Response:
        # error_description is RFC 6749's name; message keeps the service's uniform error body.
        body = {"error": self.error, "error_description": self.description, "message": self.description}
        headers = {**_NO_STORE, **self.headers}
        if self.status == 401:
            headers["WWW-Authenticate"] = 'Basic realm="pia"'
        return json_response(body, self.status, headers)


def _invalid_request(description: str) -> TokenError:
    return TokenError(400, "invalid_request", description)


def _slow_down(description: str, retry_after_seconds: int) -> TokenError:
    # RFC 6749 names no error for throttling; slow_down is the registered token-endpoint code (RFC 8628 §3.5).
    return TokenError(429, "slow_down", f"{description} Retry after {retry_after_seconds} s.",
                      {"Retry-After": str(retry_after_seconds)})


async def _parameters() -> dict[str, str]:
    raw = await request.get_data(cache=False)
    mimetype = request.mimetype
    if mimetype == "application/x-www-form-urlencoded":
        try:
            pairs = parse_qs(raw.decode(), keep_blank_values=True, strict_parsing=bool(raw))
        except (UnicodeDecodeError, ValueError):
            raise _invalid_request("The form body could not be parsed.") from None
        repeated = sorted(name for name, values in pairs.items() if len(values) > 1)
        if repeated:
            raise _invalid_request(f"Parameters given more than once: {', '.join(repeated)}.")
        return {name: values[0] for name, values in pairs.items()}
    if mimetype == "application/json":
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise _invalid_request("The JSON body could not be parsed.") from None
        if not isinstance(body, dict) or not all(isinstance(v, str) for v in body.values() if v is not None):
            raise _invalid_request("The JSON body must be an object of string parameters.")
        return {name: value for name, value in body.items() if value is not None}
    raise _invalid_request("Send the parameters as application/x-www-form-urlencoded or application/json.")


def _basic_credentials() -> tuple[str, str] | None:
    header = request.headers.get("Authorization")
    if not header:
        return None
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        raise TokenError(401, "invalid_client", "Client authentication must use HTTP Basic.")
    try:
        client_id, separator, secret = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise TokenError(401, "invalid_client", "The Basic credentials could not be decoded.") from None
    if not separator:
        raise TokenError(401, "invalid_client", "The Basic credentials must be client_id:client_secret.")
    # RFC 6749 §2.3.1: both parts are form-urlencoded before Basic encoding.
    return unquote_plus(client_id), unquote_plus(secret)


def _credentials(params: dict[str, str]) -> tuple[str, str]:
    basic = _basic_credentials()
    in_body = "client_id" in params or "client_secret" in params
    if basic and in_body:
        raise _invalid_request("Authenticate the client by HTTP Basic or by the body, not both.")
    if basic:
        return basic
    if not params.get("client_id") or not params.get("client_secret"):
        raise TokenError(401, "invalid_client", "Client credentials are missing.")
    return params["client_id"], params["client_secret"]


async def _charge_attempt(tenant_id: str, client_id: str) -> None:
    refusal = await services().token_attempts.charge(request.remote_addr, tenant_id, client_id)
    if refusal is None:
        return
    if refusal.budget == "address":
        description = f"More than {refusal.limit} token requests a minute from this address."
    else:
        description = f"More than {refusal.limit} token requests a minute for this client from this address."
    raise _slow_down(description, refusal.retry_after_seconds)


async def _authenticated_client(tenant_id: str, client_id: str, secret: str) -> Client:
    verifier = services().secret_verifier
    proof = verifier.proof(tenant_id, client_id, secret)
    # A secret that passed lately costs nothing and is never throttled; anything else may cost a hash.
    if not verifier.recently_proven(proof):
        await _charge_attempt(tenant_id, client_id)
    client = await blocking(get_client, services().engine, tenant_id, client_id)
    try:
        # Hash even for an unknown client, so timing does not tell which client ids exist.
        matches = await verifier.matches(proof, secret, client.secret_hash if client else DUMMY_HASH)
    except VerifierBusy:
        raise _slow_down("Too many client secrets are being checked at once.", _BUSY_RETRY_AFTER_SECONDS) from None
    if client is None or not matches:
        raise TokenError(401, "invalid_client", "Client authentication failed.")
    if not client.enabled:
        raise TokenError(401, "invalid_client", "The API client is disabled.")
    return client


def _check_grant(client: Client, params: dict[str, str]) -> None:
    grant_type = params.get("grant_type")
    if not grant_type:
        raise _invalid_request("grant_type is required.")
    if grant_type != "client_credentials":
        raise TokenError(400, "unsupported_grant_type", "Only grant_type=client_credentials is supported.")
    scope = params.get("scope") or client.scope
    if scope != client.scope:
        raise TokenError(400, "invalid_scope", f"This API client may only request scope {client.scope}.")
    resource = params.get("resource")
    if client.resource_id is None and resource:
        raise TokenError(400, "invalid_target", f"The {client.scope} scope takes no resource.")
    if client.resource_id is not None and resource not in (None, "", client.resource_id):
        raise TokenError(400, "invalid_target", "The resource is not the one this API client is bound to.")


async def _token_response(tenant_id: str | None) -> Response:
    try:
        params = await _parameters()
        if tenant_id and params.get("tenant_id") not in (None, tenant_id):
            raise _invalid_request("tenant_id in the body differs from the tenant in the path.")
        tenant_id = tenant_id or params.get("tenant_id")
        client_id, secret = _credentials(params)
        if not tenant_id:
            raise _invalid_request("tenant_id is required.")
        for name, value in (("tenant_id", tenant_id), ("client_id", client_id)):
            if problem := control_problem(value):  # such an id names no client, and PostgreSQL cannot look it up
                raise _invalid_request(f"{name} {problem}")
        client = await _authenticated_client(tenant_id, client_id, secret)
        _check_grant(client, params)
    except TokenError as error:
        return error.response()
    token, _ = await blocking(services().tokens.issue, client)
    body: dict[str, Any] = {"access_token": token, "token_type": "Bearer",
                            "expires_in": services().tokens.lifetime_seconds, "scope": client.scope}
    return json_response(body, 200, _NO_STORE)


def _documented(func):
    """Both token endpoints take the same body and give the same answers."""
    for status, model in ((200, TokenResponse), (400, TokenRequestRefused), (401, ClientAuthenticationFailed),
                          (429, TokenAttemptsThrottled)):
        func = document_response(model, status)(func)
    func = also_accepts("application/json")(func)
    return tag(["Authentication"])(document_request(TokenRequest, source=DataSource.FORM)(func))


@blueprint.post("/oauth2/token")
@_documented
async def token() -> Response:
    """Exchange client credentials for an access token."""
    return await _token_response(None)


@blueprint.post("/v1/tenants/<tenantId>/oauth2/v2.0/token")
@_documented
async def tenant_token(tenantId: str) -> Response:
    """Token endpoint kept for existing integrations (tenant in the path)."""
    return await _token_response(tenantId)
