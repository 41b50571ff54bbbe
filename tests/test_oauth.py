"""The token endpoints: client credentials, RFC 6749 §5.2 errors, signed JWTs, key rotation."""

import base64

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import KeySet
from joserfc.jws import extract_compact

from serving.tokens import rotate_signing_key
from store.clients import update_client
from tests.conftest import bearer, client_of, get_token, wait_for


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


def test_token_from_before_a_key_rotation_keeps_working(http: httpx.Client, world: dict, engine,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    client = client_of(world, "demand_planning")
    old_token = get_token(http, world, client)
    old_kid = extract_compact(old_token.encode()).headers()["kid"]
    new_kid = rotate_signing_key(engine)
    # The server rereads keys at most every 30 s; make it reread now, as it would after that delay.
    monkeypatch.setattr("serving.tokens.KEY_CACHE_SECONDS", 0.0)
    published = {key["kid"] for key in http.get("/.well-known/jwks.json").json()["keys"]}
    assert {old_kid, new_kid} <= published
    new_token = get_token(http, world, client)
    assert extract_compact(new_token.encode()).headers()["kid"] == new_kid
    path = f"/v1/tenants/{world['id']}/demand_planning/limits"
    for token in (old_token, new_token):
        assert http.get(path, headers=bearer(token)).status_code == 200
