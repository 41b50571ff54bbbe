"""Every protected route, generated from the app's URL map, against every way a token can be wrong."""

import time
from functools import partial

import httpx
import pyarrow as pa
import pytest
from joserfc import jwt
from joserfc.jwk import ECKey
from quart import Blueprint

from contracts.held_datasets import ARROW_STREAM, REPLENISHMENT_PARAMETERS, SALES_FORECASTS
from db.clients import SCOPES, get_client
from db.secrets import secret_box
from serving.admin import issue_client
from serving.app import create_app
from serving.openapi import BROWSER_BLUEPRINTS
from serving.protection import protect, protected_scope
from serving.tokens import TokenAuthority
from settings import Settings
from tests.conftest import bearer, client_of, get_token, wait_for
from tests.probes import serving_with

NIL_ID = "00000000-0000-7000-8000-000000000000"
# The only routes anyone may call without a token; any other route must sit in a blueprint `protect` guards.
# /metrics is open like /healthcheck, for scrapers on the internal network (counts per eCom store id, no content).
OPEN_ENDPOINTS = {"meta.healthcheck", "meta.metrics", "meta.openapi", "meta.jwks", "meta.authorization_server_metadata",
                  "meta.openid_configuration", "oauth.token", "oauth.tenant_token"}


def _app():
    return create_app(Settings(data_dir="/nonexistent"), engine=None, issuer="http://x")  # type: ignore[arg-type]


def _protected_routes() -> list[tuple[str, str, str]]:
    """(method, rule, scope) for every route of a blueprint `protect` guards, read from the app's URL map."""
    app = _app()
    routes = []
    for rule in app.url_map.iter_rules():
        scope = protected_scope(app.blueprints.get(rule.endpoint.rpartition(".")[0]))
        if scope is not None:
            routes.extend((method, rule.rule, scope) for method in sorted(rule.methods - {"HEAD", "OPTIONS"}))
    return routes


PROTECTED = _protected_routes()


def test_every_route_but_the_open_ones_is_protected() -> None:
    app = _app()
    # The console's pages are guarded by its sessions instead (tests/test_console_http.py goes through each one).
    unprotected = {rule.endpoint for rule in app.url_map.iter_rules()
                   if protected_scope(app.blueprints.get(rule.endpoint.rpartition(".")[0])) is None
                   and rule.endpoint.partition(".")[0] not in BROWSER_BLUEPRINTS}
    assert unprotected == OPEN_ENDPOINTS
    assert {scope for _, _, scope in PROTECTED} >= {"ecom", "loyalty_programs", "demand_planning"}


def _client(engine, world: dict, scope: str, **which) -> dict:
    """The world's client of the scope; an admin client is issued the first time one is needed (the demo data
    may not hold one)."""
    try:
        return client_of(world, scope, **which)
    except IndexError:
        assert scope == "admin" and not which, f"the world has no {scope} client"
    client_id, secret = issue_client(engine, world["id"], "protection test admin", "admin", None, ())
    world["clients"].append({"clientId": client_id, "clientSecret": secret, "scope": "admin", "resource": None,
                             "permissions": []})
    return client_of(world, "admin")


def _path(rule: str, world: dict, scope: str) -> str:
    """Fill a rule's variables with the world's own tenant and resource (others get a fresh id)."""
    values = {"tenantId": world["id"], "eComStoreId": client_of(world, "ecom")["resource"],
              "loyaltyProgramId": client_of(world, "loyalty_programs")["resource"]}
    path = rule
    for part in rule.split("/"):
        if part.startswith("<"):
            name = part.strip("<>").split(":")[-1]
            path = path.replace(part, values.get(name, NIL_ID))
    return path


def _call(http: httpx.Client, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    return http.request(method, path, headers={**headers, "Content-Type": "application/json"}, content=b"{}")


def _foreign_key_token(world: dict, client: dict, issuer: str) -> str:
    """Well formed, unexpired, with every claim right, but signed by a key the service never published."""
    key = ECKey.generate_key("P-256", parameters={"kid": "foreign"})
    now = int(time.time())
    claims = {"iss": issuer, "aud": issuer, "exp": now + 600, "iat": now, "jti": "x",
              "client_id": client["clientId"], "tenant_id": world["id"], "scope": client["scope"]}
    return jwt.encode({"alg": "ES256", "kid": "foreign", "typ": "at+jwt"}, claims, key)


def _expired_token(engine, settings: Settings, world: dict, client: dict, issuer: str) -> str:
    """Signed by the service's own current key, but its hour is over."""
    expired_authority = TokenAuthority(engine, issuer, lifetime_seconds=-60, secrets=partial(secret_box, settings))
    return expired_authority.issue(get_client(engine, world["id"], client["clientId"]))[0]


@pytest.mark.parametrize(("method", "rule", "scope"), PROTECTED)
def test_unauthenticated_requests_get_401(http: httpx.Client, engine, settings, server, shared_world: dict,
                                          cached_token, method: str, rule: str, scope: str) -> None:
    world = shared_world
    path = _path(rule, world, scope)
    client = _client(engine, world, scope)
    good = cached_token(world, client)
    expired = bearer(_expired_token(engine, settings, world, client, server.url))
    header, payload, signature = good.split(".")
    tampered = f"{header}.{payload}.{signature[::-1]}"
    for headers in ({}, {"Authorization": "Basic abc"}, {"Authorization": "Bearer"}, bearer("not-a-jwt"),
                    bearer(tampered), bearer(_foreign_key_token(world, client, server.url)), expired):
        response = _call(http, method, path, headers)
        assert response.status_code == 401, (headers, response.text)
        assert response.json()["error"] == "UNAUTHORIZED"
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    # Refused for its age, not for anything else about it.
    assert "expired" in _call(http, method, path, expired).json()["message"]


def _wrong_uses(engine, world: dict, other_world: dict, scope: str) -> dict[str, tuple[dict, dict]]:
    """(world, client) whose tokens are valid but not for this route: each must be refused with 403. Every other
    scope's token is among them: admin tokens on integrator routes, integrator tokens on admin routes."""
    wrong = {"other tenant": (other_world, _client(engine, other_world, scope))}
    for other_scope in SCOPES:
        if other_scope != scope:
            wrong[f"{other_scope} token"] = (world, _client(engine, world, other_scope))
    if scope == "ecom":
        wrong["other eCom store"] = (world, client_of(world, "ecom", index=1))
    if scope == "demand_planning":
        wrong["no permission"] = (world, client_of(world, "demand_planning", permitted=False))
    return wrong


@pytest.mark.parametrize(("method", "rule", "scope"), PROTECTED)
def test_valid_token_used_elsewhere_gets_403(http: httpx.Client, engine, shared_world: dict,
                                             shared_other_world: dict, cached_token,
                                             method: str, rule: str, scope: str) -> None:
    path = _path(rule, shared_world, scope)
    for reason, (owner, client) in _wrong_uses(engine, shared_world, shared_other_world, scope).items():
        response = _call(http, method, path, bearer(cached_token(owner, client)))
        assert response.status_code == 403, (reason, response.text)
        assert response.json()["error"] == "FORBIDDEN"
        assert "X-RateLimit-Limit" in response.headers


@pytest.mark.parametrize(("method", "rule", "scope"), [r for r in PROTECTED if r[0] == "GET"])
def test_right_token_is_let_through(http: httpx.Client, engine, shared_world: dict, cached_token, method: str,
                                    rule: str, scope: str) -> None:
    """The route answers as for its owner: 200, or a 404 (always when the path names an id that does not exist:
    a route may also have nothing to show yet, such as an unset event destination)."""
    token = cached_token(shared_world, _client(engine, shared_world, scope))
    path = _path(rule, shared_world, scope)
    response = _call(http, method, path, bearer(token))
    if NIL_ID in path or response.status_code == 404:
        assert response.status_code == 404, response.text
        assert response.json()["error"].endswith("NOT_FOUND")
    elif response.headers["content-type"] == ARROW_STREAM:  # the held-data exports answer Arrow unless asked
        assert response.status_code == 200
        assert pa.ipc.open_stream(response.content).schema in (SALES_FORECASTS, REPLENISHMENT_PARAMETERS)
    else:
        assert response.status_code == 200, response.text
        assert isinstance(response.json(), dict)


def test_a_remembered_token_is_refused_once_it_expires(http: httpx.Client, engine, server, settings,
                                                      world: dict) -> None:
    """The server remembers a verified token only until its `exp`: an hour's cache must not outlive the token."""
    client = client_of(world, "demand_planning")
    lifetime = 2
    short_lived = TokenAuthority(engine, server.url, lifetime_seconds=lifetime,
                                 secrets=partial(secret_box, settings))
    token, _ = short_lived.issue(get_client(engine, world["id"], client["clientId"]))
    path = f"/v1/tenants/{world['id']}/demand_planning/limits"
    assert http.get(path, headers=bearer(token)).status_code == 200  # verified, and now remembered
    # exp, plus the 5 s of clock leeway verification allows, plus a generous margin.
    refused = wait_for(lambda: (response := http.get(path, headers=bearer(token))).status_code == 401 and response,
                       lifetime + 5 + 10, "the expired token to be refused")
    assert "expired" in refused.json()["message"]


def test_an_admin_scope_blueprint_is_guarded_and_documented_like_the_others(engine, settings,
                                                                           shared_world: dict) -> None:
    """What the matrix above does for the admin routes once they are registered, shown now on a probe blueprint
    under /admin/v1: only the tenant's admin token passes, every integrator token gets 403, and the document
    lists the route under the admin scope with its shared errors."""
    probe = Blueprint("admin_probe", __name__, url_prefix="/admin/v1/tenants/<tenantId>")
    protect(probe, "admin")

    @probe.get("/probe")
    async def answer(tenantId: str) -> dict:
        return {"tenantId": tenantId}

    with serving_with(settings, engine, probe) as live, httpx.Client(base_url=live.url, timeout=30) as http:
        path = f"/admin/v1/tenants/{shared_world['id']}/probe"
        admin = get_token(http, shared_world, _client(engine, shared_world, "admin"))
        assert http.get(path, headers=bearer(admin)).json() == {"tenantId": shared_world["id"]}
        for client in shared_world["clients"]:
            if client["scope"] != "admin":
                response = http.get(path, headers=bearer(get_token(http, shared_world, client)))
                assert response.status_code == 403, (client["scope"], response.text)
        operation = http.get("/v1/openapi.json").json()["paths"]["/admin/v1/tenants/{tenantId}/probe"]["get"]
    assert operation["security"] == [{"OAuth2": ["admin"]}, {"BearerAuth": []}]
    assert operation["tags"] == ["Back-office admin"]
    assert set(operation["responses"]) >= {"401", "403", "429", "500"}
