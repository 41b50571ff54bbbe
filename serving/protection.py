"""Bearer authentication, authorization to tenant/scope/resource, rate limiting and audit.

Every scope blueprint calls `protect`, so no route under /v1/tenants/{tenantId}/… can be left open.
"""

import time

from quart import Blueprint, Request, Response, g, request
from quart.ctx import _AppCtxGlobals as RequestGlobals  # the type of `g`, which Quart names privately

from contracts.errors import Forbidden, TooManyRequests, Unauthorized
from db.audit import AuditEvent, AuditWriter
from db.clients import DEMAND_PLANNING_PERMISSION, Client
from db.ids import utc_now
from serving.authentication import Caller
from serving.ratelimit import RateLimitState
from serving.request_checks import check_request
from serving.services import Services, services


def bearer_token(current: Request) -> str:
    header = current.headers.get("Authorization")
    if not header:
        # RFC 6750 §3.1: no error code when the request carried no credentials at all.
        raise Unauthorized("An Authorization: Bearer header is required.", error="")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("The Authorization header must be 'Bearer <access token>'.", error="invalid_request")
    return token.strip()


def authorize(client: Client, tenant_id: str, scope: str, resource_id: str | None) -> None:
    if client.tenant_id != tenant_id:
        raise Forbidden("The token was issued for another tenant.")
    if client.scope != scope:
        raise Forbidden(f"The token's scope is {client.scope}, this path needs {scope}.")
    if resource_id is not None and client.resource_id != resource_id:
        raise Forbidden("The token was issued for another resource.")
    if scope == "demand_planning" and DEMAND_PLANNING_PERMISSION not in client.permissions:
        raise Forbidden("The API client lacks the Demand Planning permission.")


_SCOPE_ATTRIBUTE = "_pia_scope"
_CHECKED_ATTRIBUTE = "_pia_checks_requests"
_AUTHORIZED_ATTRIBUTE = "_pia_authorized_parameters"


def protected_scope(blueprint: Blueprint | None) -> str | None:
    """The scope `protect` guards the blueprint with; None for an open blueprint (the OpenAPI document and the
    protection tests read it, so a new scope blueprint is documented and tested without more code)."""
    return getattr(blueprint, _SCOPE_ATTRIBUTE, None)


def checks_requests(blueprint: Blueprint | None) -> bool:
    """Whether `protect` has the blueprint's requests checked (serving.validation.check_request)."""
    return getattr(blueprint, _CHECKED_ATTRIBUTE, False)


def authorized_parameters(blueprint: Blueprint | None) -> frozenset[str]:
    """The path parameters `protect` holds to the token (a mismatch, control characters included, is 403)."""
    return getattr(blueprint, _AUTHORIZED_ATTRIBUTE, frozenset())


def protect(blueprint: Blueprint, scope: str, resource_arg: str | None = None, *, check_requests: bool = True) -> None:
    """Guard every route of a scope's blueprint; resource_arg names the path variable of its resource. Once the
    caller is authorized, its requests are checked (path parameters, the body's media type) unless the blueprint
    does that itself (check_requests=False)."""
    setattr(blueprint, _SCOPE_ATTRIBUTE, scope)
    setattr(blueprint, _CHECKED_ATTRIBUTE, check_requests)
    setattr(blueprint, _AUTHORIZED_ATTRIBUTE, frozenset(filter(None, ("tenantId", resource_arg))))

    @blueprint.before_request
    async def guard() -> None:
        started = time.perf_counter()
        current, pia = request._get_current_object(), services()  # one proxy lookup (1–2 µs) each for all uses
        caller = await pia.authenticator.caller(bearer_token(current), started)
        await admit(caller, pia)
        args = current.view_args or {}
        authorize(caller.client, args["tenantId"], scope, args.get(resource_arg) if resource_arg else None)
        if check_requests:  # here rather than as a hook of its own: Quart's dispatch costs each hook a few µs
            await check_request(current)


async def admit(caller: Caller, pia: Services) -> None:
    """Count the request against its client's rate limit (the console's pages count like the client's API calls),
    and mark it for the rate-limit headers and the audit row of `finish_protected`."""
    request_globals = g._get_current_object()
    request_globals.caller = caller
    limit = caller.client.rate_limit_per_minute or pia.settings.rate_limit.per_minute
    request_globals.rate_limit = state = await pia.limiter.hit(f"client:{caller.client.id}", limit)
    if not state.allowed:
        raise TooManyRequests(f"More than {limit} requests in 60 seconds; retry after {state.reset_seconds} s.",
                              headers={"Retry-After": str(state.reset_seconds)})


def finish_protected(response: Response, request_globals: RequestGlobals, current: Request, audit: AuditWriter) -> None:
    """Rate-limit headers and an audit row for every request that carried a valid token (the request's `g`, the
    request and the audit writer given by the caller, which has looked them up already)."""
    caller: Caller | None = request_globals.get("caller")
    if caller is None:
        return
    state: RateLimitState | None = request_globals.get("rate_limit")
    if state is not None:
        for name, value in state.headers().items():
            # No response carries these before here: `add` skips `set`'s search for old ones, ~3 µs a header.
            response.headers.add(name, value)
    audit.submit(AuditEvent(
        tenant_id=caller.client.tenant_id, client_id=caller.client.id, token_id=caller.token_id,
        request_id=request_globals.request_id, method=current.method, path=current.full_path.rstrip("?"),
        status=response.status_code, duration_ms=round((time.perf_counter() - caller.started) * 1000, 3),
        time=utc_now()))
