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
from db.clients import Client
from serving.client_authentication import AttemptThrottled, AuthenticationFailed, authenticate_client
from serving.jsonio import json_response
from serving.openapi import also_accepts
from serving.services import services
from serving.threads import blocking

blueprint = Blueprint("oauth", __name__)
_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


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


def _slow_down(throttled: AttemptThrottled) -> TokenError:
    # RFC 6749 names no error for throttling; slow_down is the registered token-endpoint code (RFC 8628 §3.5).
    return TokenError(429, "slow_down", str(throttled), {"Retry-After": str(throttled.retry_after_seconds)})


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
        try:
            client = await authenticate_client(tenant_id, client_id, secret, request.remote_addr)
        except AttemptThrottled as throttled:
            raise _slow_down(throttled) from None
        except AuthenticationFailed as failed:
            raise TokenError(401, "invalid_client", str(failed)) from None
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
