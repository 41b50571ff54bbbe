"""`pia admin`: tenants, clients, secrets, keys, back-office load and the audit trail, from the command line."""

import json

import pytest
import sqlalchemy as sa
from argon2 import PasswordHasher
from click.testing import CliRunner

from serving.cli import main
from store.schema import api_clients, skus
from tests.conftest import bearer, client_of, get_token, wait_for


@pytest.fixture
def pia(settings):
    env = {"PIA_DATA_DIR": str(settings.data_dir), "PIA_DATABASE_URL": settings.database_url,
           "PIA_SECRET_KEY": settings.secret_key.get_secret_value()}

    def run(*args: str, expect: int = 0):
        result = CliRunner().invoke(main, list(args), env=env)
        assert result.exit_code == expect, result.output
        return result

    return run


def _json(result) -> object:
    return json.loads(result.stdout)


def test_tenant_and_client_lifecycle(pia, engine, http, world, settings) -> None:
    tenant = _json(pia("admin", "create-tenant", "Acme", "--test"))
    assert tenant["test"] is True
    assert tenant["tenantId"] in {t["tenantId"] for t in _json(pia("admin", "list-tenants"))}

    program = world["loyaltyPrograms"][0]["id"]
    created = _json(pia("admin", "create-client", "--tenant", world["id"], "--scope", "loyalty_programs",
                        "--resource", program))
    secret = created["clientSecret"]
    assert len(secret) >= 43  # 32 random bytes, URL-safe base64
    with engine.connect() as conn:
        stored = conn.execute(sa.select(api_clients.c.secret_hash)
                              .where(api_clients.c.id == created["clientId"])).scalar_one()
    assert stored.startswith("$argon2id$") and secret not in stored
    assert PasswordHasher().verify(stored, secret)

    listed = _json(pia("admin", "list-clients", "--tenant", world["id"]))
    assert created["clientId"] in {c["clientId"] for c in listed}
    assert all("clientSecret" not in c for c in listed)

    world_client = {**created, "resource": program}
    token = bearer(get_token(http, world, world_client))
    stores = f"/v1/tenants/{world['id']}/loyalty_programs/{program}/retail_stores"
    assert http.get(stores, headers=token).status_code == 200  # the server now remembers the client
    assert _json(pia("admin", "disable-client", created["clientId"]))["enabled"] is False
    refused = http.post("/oauth2/token", data={"grant_type": "client_credentials", "tenant_id": world["id"]},
                        auth=(created["clientId"], secret))
    assert refused.status_code == 401
    # Nothing tells the server (in production `pia admin` is another process): its remembered client expires
    # after PIA_CLIENT_CACHE_SECONDS, and from then on the token already issued is refused too.
    cache_seconds = settings.client_cache_seconds
    wait_for(lambda: http.get(stores, headers=token).status_code == 401, 4 * cache_seconds,
             "the disabled client's token to be refused")
    assert _json(pia("admin", "enable-client", created["clientId"]))["enabled"] is True
    get_token(http, world, world_client)
    wait_for(lambda: http.get(stores, headers=token).status_code == 200, 4 * cache_seconds,
             "the enabled client's token to be accepted again")


@pytest.mark.parametrize("args", [
    ["--scope", "ecom"],                                                  # ecom needs its store
    ["--scope", "ecom", "--resource", "00000000-0000-7000-8000-000000000000"],  # not this tenant's
    ["--scope", "demand_planning", "--resource", "x"],                    # demand planning takes none
    ["--scope", "ecom", "--demand-planning-permission"],
])
def test_client_creation_refuses_wrong_bindings(pia, world, args) -> None:
    result = pia("admin", "create-client", "--tenant", world["id"], *args, expect=1)
    assert "Error" in result.output


def test_demand_planning_client_with_and_without_permission(pia, world) -> None:
    with_permission = _json(pia("admin", "create-client", "--tenant", world["id"], "--scope",
                                "demand_planning", "--demand-planning-permission"))
    without = _json(pia("admin", "create-client", "--tenant", world["id"], "--scope", "demand_planning"))
    assert with_permission["permissions"] == ["demand_planning"] and without["permissions"] == []


def test_rotate_key_is_published_at_once_by_a_warm_server(pia, http, monkeypatch) -> None:
    monkeypatch.setattr("serving.tokens.KEY_CACHE_SECONDS", 3600.0)  # the server's copy does not age out here
    before = {key["kid"] for key in http.get("/.well-known/jwks.json").json()["keys"]}
    kid = _json(pia("admin", "rotate-key"))["kid"]
    after = {key["kid"] for key in http.get("/.well-known/jwks.json").json()["keys"]}
    assert kid not in before and after >= before | {kid}


def test_audit_records_every_authenticated_request(pia, http, world) -> None:
    client = client_of(world, "demand_planning")
    token = get_token(http, world, client)
    base = f"/v1/tenants/{world['id']}/demand_planning"
    http.get(f"{base}/limits", headers=bearer(token))
    http.get(f"{base}/retail_stores?x=1", headers=bearer(token))
    http.get(f"/v1/tenants/{world['id']}/ecom_stores/{client_of(world, 'ecom')['resource']}/retail_stores",
             headers=bearer(token))  # 403: still audited
    http.get(f"{base}/limits")  # no token: nobody to attribute it to, not audited

    def three_events() -> list | None:
        events = _json(pia("admin", "audit", "--client", client["clientId"]))
        return events if len(events) >= 3 else None

    # Audit rows are written in batches after the answers go out: wait for the three (and see no more).
    events = wait_for(three_events, 10, "three audit rows")
    assert [(e["method"], e["path"].split("/")[-1], e["status"]) for e in events] == [
        ("GET", "retail_stores", 403), ("GET", "retail_stores?x=1", 200), ("GET", "limits", 200)]
    assert all(e["tokenId"] and e["requestId"] and e["durationMs"] >= 0 and e["time"].endswith("Z")
               for e in events)


def test_load_is_all_or_nothing_and_idempotent(pia, engine, world, tmp_path) -> None:
    document = {"skus": [{"number": "CLI-1", "name": "Cli sku"}]}
    good = tmp_path / "good.json"
    good.write_text(json.dumps(document))
    assert _json(pia("admin", "load", str(good), "--tenant", world["id"]))["changed"] is True
    assert _json(pia("admin", "load", str(good), "--tenant", world["id"]))["changed"] is False
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"skus": [{"number": "CLI-2", "name": "ok"}, {"number": "", "name": 5}]}))
    result = pia("admin", "load", str(bad), "--tenant", world["id"], expect=1)
    assert "skus[1].number" in result.stderr and "skus[1].name" in result.stderr
    with engine.connect() as conn:
        assert conn.execute(sa.select(skus.c.id).where(skus.c.tenant_id == world["id"],
                                                       skus.c.number == "CLI-2")).first() is None
