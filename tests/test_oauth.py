"""The token endpoints: client credentials, RFC 6749 §5.2 errors, signed JWTs, key rotation."""

import base64
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial

import httpx
import pytest
import sqlalchemy as sa
from joserfc import jwt
from joserfc.jwk import ECKey, KeySet
from joserfc.jws import extract_compact

from db.clients import get_client, update_client
from db.engine import create_engine
from db.ids import new_id
from db.secrets import secret_box
from serving.tokens import KEY_REREAD_SECONDS, TokenAuthority, rotate_signing_key
from tests.conftest import bearer, client_of, get_token, wait_for

pytestmark = pytest.mark.without_shop


def _form(world: dict, client: dict, **extra: str) -> dict[str, str]:
    data = {"grant_type": "client_credentials", "scope": client["scope"], "tenant_id": world["id"]}
    if client["resource"]:
        data["resource"] = client["resource"]
    return {**data, **extra}


def test_basic_auth_form_body_gives_bearer_token(http: httpx.Client, world: dict) -> None:
    client = client_of(world, "ecom")
    response = http.post("/oauth2/token", data=_form(world, client),
                         auth=(client["clientId"], client["clientSecret"]))
    assert response.status_code == 200
    body = response.json()
    assert body["token_type"] == "Bearer" and body["expires_in"] == 3600 and body["access_token"]
    assert response.headers["Cache-Control"] == "no-store"


def test_body_credentials_as_json(http: httpx.Client, world: dict) -> None:
    client = client_of(world, "demand_planning")
    body = _form(world, client, client_id=client["clientId"], client_secret=client["clientSecret"])
    response = http.post("/oauth2/token", json=body)
    assert response.status_code == 200, response.text


def test_legacy_tenant_endpoint_with_body_credentials(http: httpx.Client, world: dict) -> None:
    client = client_of(world, "loyalty_programs")
    data = _form(world, client, client_id=client["clientId"], client_secret=client["clientSecret"])
    del data["tenant_id"]
    response = http.post(f"/v1/tenants/{world['id']}/oauth2/v2.0/token", data=data)
    assert response.status_code == 200, response.text
    token = response.json()["access_token"]
    path = f"/v1/tenants/{world['id']}/loyalty_programs/{client['resource']}/retail_stores"
    assert http.get(path, headers=bearer(token)).status_code == 200


def test_token_is_a_jwt_signed_by_a_published_key(http: httpx.Client, world: dict) -> None:
    client = client_of(world, "ecom")
    token = get_token(http, world, client)
    keys = KeySet.import_key_set(http.get("/.well-known/jwks.json").json())
    decoded = jwt.decode(token, keys, algorithms=["ES256"])
    assert decoded.header["kid"] and decoded.header["typ"] == "at+jwt"
    assert decoded.claims["client_id"] == client["clientId"]
    assert decoded.claims["tenant_id"] == world["id"]
    assert decoded.claims["scope"] == "ecom" and decoded.claims["resource"] == client["resource"]
    assert decoded.claims["exp"] - decoded.claims["iat"] == 3600
    assert "d" not in http.get("/.well-known/jwks.json").json()["keys"][0]  # no private part published


def test_server_metadata_points_at_token_endpoint_and_keys(http: httpx.Client, server) -> None:
    for path in ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"):
        metadata = http.get(path).json()
        assert metadata["issuer"] == server.url
        assert metadata["token_endpoint"] == f"{server.url}/oauth2/token"
        assert metadata["jwks_uri"].endswith("/.well-known/jwks.json")
        assert metadata["grant_types_supported"] == ["client_credentials"]
        assert http.get(metadata["jwks_uri"]).json()["keys"]


@pytest.mark.parametrize(("change", "status", "error"), [
    ({"client_secret": "wrong"}, 401, "invalid_client"),
    ({"client_id": "00000000-0000-7000-8000-000000000000"}, 401, "invalid_client"),
    ({"grant_type": "password"}, 400, "unsupported_grant_type"),
    ({"grant_type": None}, 400, "invalid_request"),
    ({"tenant_id": None}, 400, "invalid_request"),
    ({"scope": "demand_planning"}, 400, "invalid_scope"),
    ({"scope": "ecom loyalty_programs"}, 400, "invalid_scope"),
    ({"resource": "00000000-0000-7000-8000-000000000000"}, 400, "invalid_target"),
    ({"client_secret": None}, 401, "invalid_client"),
])
def test_token_errors_follow_rfc6749(http: httpx.Client, world: dict, change: dict, status: int,
                                     error: str) -> None:
    client = client_of(world, "ecom")
    data = _form(world, client, client_id=client["clientId"], client_secret=client["clientSecret"])
    for name, value in change.items():
        if value is None:
            data.pop(name)
        else:
            data[name] = value
    response = http.post("/oauth2/token", data=data)
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == error and body["error_description"]
    assert response.headers["Cache-Control"] == "no-store"
    if status == 401:
        assert response.headers["WWW-Authenticate"].startswith("Basic")


def test_client_of_another_tenant_is_unknown(http: httpx.Client, world: dict, other_world: dict) -> None:
    client = client_of(world, "demand_planning")
    data = _form(other_world, client)
    response = http.post("/oauth2/token", data=data, auth=(client["clientId"], client["clientSecret"]))
    assert response.status_code == 401 and response.json()["error"] == "invalid_client"


def test_demand_planning_takes_no_resource(http: httpx.Client, world: dict) -> None:
    client = client_of(world, "demand_planning")
    data = _form(world, client, resource=world["ecomStores"][0]["id"])
    response = http.post("/oauth2/token", data=data, auth=(client["clientId"], client["clientSecret"]))
    assert response.status_code == 400 and response.json()["error"] == "invalid_target"


@pytest.mark.parametrize(("body", "content_type"), [
    (b"grant_type=client_credentials&grant_type=client_credentials", "application/x-www-form-urlencoded"),
    (b"{not json", "application/json"),
    (b"[1, 2]", "application/json"),
    (b"grant_type=client_credentials", "text/plain"),
])
def test_malformed_requests_are_invalid_request(http: httpx.Client, world: dict, body: bytes,
                                                content_type: str) -> None:
    client = client_of(world, "ecom")
    response = http.post("/oauth2/token", content=body, headers={"Content-Type": content_type},
                         auth=(client["clientId"], client["clientSecret"]))
    assert response.status_code == 400 and response.json()["error"] == "invalid_request"


def test_basic_and_body_credentials_together_are_refused(http: httpx.Client, world: dict) -> None:
    client = client_of(world, "ecom")
    data = _form(world, client, client_id=client["clientId"], client_secret=client["clientSecret"])
    response = http.post("/oauth2/token", data=data, auth=(client["clientId"], client["clientSecret"]))
    assert response.status_code == 400 and response.json()["error"] == "invalid_request"


def test_undecodable_basic_credentials(http: httpx.Client, world: dict) -> None:
    client = client_of(world, "ecom")
    response = http.post("/oauth2/token", data=_form(world, client),
                         headers={"Authorization": "Basic !!!"})
    assert response.status_code == 401 and response.json()["error"] == "invalid_client"
    no_colon = base64.b64encode(client["clientId"].encode()).decode()
    response = http.post("/oauth2/token", data=_form(world, client),
                         headers={"Authorization": f"Basic {no_colon}"})
    assert response.status_code == 401


def test_disabled_client_gets_no_token_and_its_tokens_stop_working(http: httpx.Client, world: dict,
                                                                   engine, settings) -> None:
    client = client_of(world, "demand_planning")
    token = get_token(http, world, client)
    path = f"/v1/tenants/{world['id']}/demand_planning/limits"
    assert http.get(path, headers=bearer(token)).status_code == 200
    update_client(engine, world["id"], client["clientId"], enabled=False)
    response = http.post("/oauth2/token", data=_form(world, client),
                         auth=(client["clientId"], client["clientSecret"]))
    assert response.status_code == 401 and response.json()["error"] == "invalid_client"
    # The server remembers the client for PIA_CLIENT_CACHE_SECONDS: its tokens stop working within that time.
    wait_for(lambda: http.get(path, headers=bearer(token)).status_code == 401, 4 * settings.client_cache_seconds,
             "the disabled client's token to be refused")
    update_client(engine, world["id"], client["clientId"], enabled=True)
    wait_for(lambda: http.get(path, headers=bearer(token)).status_code == 200, 4 * settings.client_cache_seconds,
             "the enabled client's token to be accepted again")


def _kid(token: str) -> str:
    return extract_compact(token.encode()).headers()["kid"]


def _published_kids(http: httpx.Client) -> set[str]:
    return {key["kid"] for key in http.get("/.well-known/jwks.json").json()["keys"]}


def _signed_elsewhere(world: dict, client: dict, issuer: str, kid: str) -> str:
    """Right in every claim, but signed by a key the service never had, under the given kid."""
    key = ECKey.generate_key("P-256", parameters={"kid": kid})
    now = int(time.time())
    claims = {"iss": issuer, "aud": issuer, "exp": now + 600, "iat": now, "jti": new_id(),
              "client_id": client["clientId"], "tenant_id": world["id"], "scope": client["scope"]}
    return jwt.encode({"alg": "ES256", "kid": kid, "typ": "at+jwt"}, claims, key)


def test_key_rotated_by_another_process_is_accepted_at_once_by_a_warm_server(
        http: httpx.Client, world: dict, server, settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("serving.tokens.KEY_CACHE_SECONDS", 3600.0)  # the server's copy does not age out here
    client = client_of(world, "demand_planning")
    path = f"/v1/tenants/{world['id']}/demand_planning/limits"
    old_token = get_token(http, world, client)
    assert http.get(path, headers=bearer(old_token)).status_code == 200
    # A JWKS request makes the server read the store just before the rotation: its next reread must wait.
    published_before = _published_kids(http)

    # Another process (a replica, `pia admin rotate-key`): its own engine and key copy on the same store.
    elsewhere = create_engine(settings)
    try:
        new_kid = rotate_signing_key(elsewhere, secret_box(settings))
        replica = TokenAuthority(elsewhere, server.url, settings.token.lifetime_seconds,
                                 partial(secret_box, settings))
        new_token, _ = replica.issue(get_client(elsewhere, world["id"], client["clientId"]))
    finally:
        elsewhere.dispose()
    assert _kid(new_token) == new_kid and new_kid not in published_before

    for token in (new_token, old_token):
        assert http.get(path, headers=bearer(token)).status_code == 200
    unknown = _signed_elsewhere(world, client, server.url, kid=new_id())
    assert http.get(path, headers=bearer(unknown)).status_code == 401
    assert {_kid(old_token), new_kid} <= _published_kids(http)


def test_unknown_kids_reread_the_store_at_most_once_a_second(http: httpx.Client, world: dict, server,
                                                             engine) -> None:
    client = client_of(world, "demand_planning")
    path = f"/v1/tenants/{world['id']}/demand_planning/limits"
    assert http.get(path, headers=bearer(get_token(http, world, client))).status_code == 200
    reads: list[str] = []

    def count_key_reads(conn, cursor, statement: str, *args) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "signing_keys" in statement:
            reads.append(statement)

    sa.event.listen(engine, "before_cursor_execute", count_key_reads)
    try:
        # Not a kid this service could have made (ours are UUIDv7): refused without reading the store.
        made_up = _signed_elsewhere(world, client, server.url, kid="made-up")
        assert http.get(path, headers=bearer(made_up)).status_code == 401
        assert reads == []
        # Kids shaped like ours: each could be a key created a moment ago, so the store is read, but spaced out.
        unknown = [_signed_elsewhere(world, client, server.url, kid=new_id()) for _ in range(24)]
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=12) as pool:
            statuses = list(pool.map(lambda token: http.get(path, headers=bearer(token)).status_code, unknown))
        elapsed = time.monotonic() - started
    finally:
        sa.event.remove(engine, "before_cursor_execute", count_key_reads)
    assert statuses == [401] * len(unknown)
    # One read per KEY_REREAD_SECONDS, plus one the server's copy may owe to its age.
    assert 1 <= len(reads) <= 2 + elapsed / KEY_REREAD_SECONDS, (len(reads), elapsed)
