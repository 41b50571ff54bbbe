"""Shapes of the open routes: health, OAuth 2.0 token endpoints and server metadata, signing keys."""

from typing import Any, ClassVar, Literal

from pydantic import Field, RootModel

from contracts.models import Instant, Shape


class DatabaseCheck(Shape):
    status: Literal["ok", "unavailable"]
    latencyMs: float | None = Field(default=None, description="Present while the database answers.")
    error: str | None = Field(default=None, description="Kind of failure, when unavailable.")


class PipelineCheck(Shape):
    """Reported only: a stalled pipeline leaves the status 200 while the database answers."""

    status: Literal["ok", "stalled", "unknown"]
    lastHeartbeat: Instant | None = None
    heartbeatAgeSeconds: float | None = None
    oldestPendingAgeSeconds: float | None = None
    error: str | None = None


class HealthChecks(Shape):
    database: DatabaseCheck
    pipeline: PipelineCheck


class Health(Shape):
    """The service and its database: 200 while the database answers, else 503."""

    status: Literal["ok", "unavailable"]
    checks: HealthChecks


class Metrics(RootModel[str]):
    """Prometheus text format (0.0.4): pia_http_request_duration_seconds (a histogram by route template, method
    and status); read from the database on each scrape, pia_batches_waiting and pia_batches_applying with their
    oldest's age, pia_orders_waiting with its oldest's age, and per eCom store of every tenant (labelled tenant_id
    and ecom_store_id) pia_event_backlog and pia_event_dead_letters; pia_batch_wait_seconds and
    pia_batch_attempt_seconds of an in-process pipeline; the process_* and python_* metrics. Open like
    /healthcheck: meant for the internal network, keep it off the public edge."""

    response_media_type: ClassVar[str] = "text/plain; version=0.0.4"


class JsonWebKey(Shape, extra="allow"):
    kty: str
    kid: str
    alg: str | None = None
    use: str | None = None


class JsonWebKeySet(Shape):
    """Public keys that verify access tokens (RFC 7517)."""

    keys: list[JsonWebKey]


class ServerMetadata(Shape):
    """Authorization server metadata (RFC 8414)."""

    issuer: str
    token_endpoint: str
    jwks_uri: str
    grant_types_supported: list[str]
    token_endpoint_auth_methods_supported: list[str]
    scopes_supported: list[str]
    response_types_supported: list[str]
    service_documentation: str


class OpenIdConfiguration(ServerMetadata):
    """OpenID provider configuration: the discovery fields that mean something for client credentials."""

    subject_types_supported: list[str]
    id_token_signing_alg_values_supported: list[str]


class OpenApiDocument(Shape, extra="allow"):
    """This document (OpenAPI 3.1)."""

    openapi: str
    info: dict[str, Any]
    paths: dict[str, Any]


class TokenRequest(Shape):
    """Client credentials grant (RFC 6749 §4.4), form-urlencoded or JSON. The client authenticates by HTTP Basic
    or by client_id and client_secret in the body, not both."""

    grant_type: Literal["client_credentials"]
    tenant_id: str | None = Field(default=None, description="Required at /oauth2/token; in the path of the "
                                  "tenant's token endpoint.")
    client_id: str | None = None
    client_secret: str | None = None
    scope: str | None = Field(default=None, description="The client's one scope; may be omitted.")
    resource: str | None = Field(default=None, description="RFC 8707: the eCom store or loyalty program id the "
                                 "client is bound to; may be omitted.")


class TokenResponse(Shape):
    """An access token (an ES256 JWT, RFC 9068)."""

    access_token: str
    token_type: Literal["Bearer"]
    expires_in: int = Field(examples=[3600])
    scope: str


class TokenError(Shape):
    """RFC 6749 §5.2 error; `message` repeats the description to match the service's error body."""

    error: str
    error_description: str
    message: str


class TokenRequestRefused(TokenError):
    """invalid_request, unsupported_grant_type, invalid_scope or invalid_target (RFC 6749 §5.2, RFC 8707)."""

    error: Literal["invalid_request", "unsupported_grant_type", "invalid_scope", "invalid_target"]


class ClientAuthenticationFailed(TokenError):
    """invalid_client: client authentication failed, or the client is disabled."""

    error: Literal["invalid_client"]


class TokenAttemptsThrottled(TokenError):
    """slow_down (RFC 8628 §3.5): too many token requests needing a secret check; retry after Retry-After
    seconds."""

    error: Literal["slow_down"]
