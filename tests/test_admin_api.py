"""The admin API over a real socket, on both backends: who may call it, and what each operation stores and
writes to the outbox."""

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from contracts import events
from contracts.admin import EventDestination, LoadReport, ReleasedRetailStore, StockLevel
from db.audit import client_events
from db.destinations import DestinationSettings, set_destination
from db.ids import new_id
from db.reference import list_retail_stores
from db.schema import (
    assortments,
    ecom_store_event_destinations,
    ecom_stores,
    event_outbox,
    retail_stores,
    skus,
    stock_levels,
    warehouses,
)
from db.secrets import KEY_FILE, SecretBox, new_secret_key, secret_box
from db.tenants import create_tenant
from serving.admin import issue_client
from serving.cli import main
from serving.demo import seed_demo_tenant
from serving.demo_data import BASE_CODE
from tests.conftest import bearer, client_of, get_token, wait_for

WEBHOOK_SECRET = "whsec-" + "s3cr3t-value-0123456789"
SAS_KEY = "SharedAccessKeyValue+" + "A" * 23


def _admin_client(engine: sa.Engine, world: dict[str, Any]) -> dict[str, Any]:
    client_id, secret = issue_client(engine, world["id"], "test admin", "admin", None, ())
    return {"clientId": client_id, "clientSecret": secret, "scope": "admin", "resource": None, "permissions": []}


@pytest.fixture
def world(engine) -> dict[str, Any]:
    """A tenant without the demo web shop (whose seeding writes events): these tests count the outbox rows of the
    audience they build themselves."""
    return seed_demo_tenant(engine, f"admin api {new_id()}", is_test=False, shop=False)


@pytest.fixture
def admin(engine, http, world) -> dict[str, Any]:
    """The world's own admin client, its token headers, and the admin API base path."""
    client = _admin_client(engine, world)
    return {"client": client, "headers": bearer(get_token(http, world, client)),
            "base": f"/admin/v1/tenants/{world['id']}"}


@pytest.fixture
def shop(engine, world) -> dict[str, Any]:
    """The world's eCom stores sell the BASE assortment, and a warehouse W1 exists, so stock changes have an
    audience in the outbox."""
    with engine.begin() as conn:
        base = conn.scalar(sa.select(assortments.c.id).where(assortments.c.tenant_id == world["id"],
                                                             assortments.c.code == BASE_CODE))
        conn.execute(ecom_stores.update().where(ecom_stores.c.tenant_id == world["id"])
                     .values(base_assortment_id=base))
        company = conn.scalar(sa.select(ecom_stores.c.company_id).where(ecom_stores.c.tenant_id == world["id"]))
        warehouse_id = new_id()
        conn.execute(warehouses.insert().values(id=warehouse_id, tenant_id=world["id"], company_id=company,
                                                number="W1", name="Sentrallager"))
        sku_id = conn.scalar(sa.select(skus.c.id).where(skus.c.tenant_id == world["id"], skus.c.number == "100001"))
    return {"warehouse": warehouse_id, "sku": sku_id, "ecomStores": sorted(s["id"] for s in world["ecomStores"])}


def _outbox(engine: sa.Engine, tenant_id: str, subject: str) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        return sorted(conn.execute(sa.select(event_outbox.c.ecom_store_id, event_outbox.c.entity_id)
                                   .where(event_outbox.c.tenant_id == tenant_id,
                                          event_outbox.c.subject == subject)).all())


ADMIN_ROUTES = [("POST", "/backoffice"), ("POST", "/stock_adjustments"), ("POST", "/retail_stores/1004/release"),
                ("PUT", "/ecom_stores/x/event_destination"), ("GET", "/ecom_stores/x/event_destination"),
                ("DELETE", "/ecom_stores/x/event_destination")]


def _store_events(engine: sa.Engine, tenant_id: str, retail_store_id: str) -> list[tuple[str, str]]:
    return [row for row in _outbox(engine, tenant_id, events.RETAIL_STORE_UPDATED) if row[1] == retail_store_id]


def _call(http: httpx.Client, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    return http.request(method, path, headers={**headers, "Content-Type": "application/json"}, content=b"{}")


# --- who may call -----------------------------------------------------------------------------------------

def test_admin_routes_need_a_valid_token(http, shared_world) -> None:
    base = f"/admin/v1/tenants/{shared_world['id']}"
    for method, path in ADMIN_ROUTES:
        for headers in ({}, bearer("not-a-jwt"), {"Authorization": "Basic abc"}):
            response = _call(http, method, base + path, headers)
            assert response.status_code == 401, (method, path, response.text)
            assert response.json()["error"] == "UNAUTHORIZED"


def test_integrator_and_foreign_tokens_are_refused_on_admin_routes(engine, http, world, other_world,
                                                                  cached_token) -> None:
    base = f"/admin/v1/tenants/{world['id']}"
    wrong = {scope: cached_token(world, client_of(world, scope))
             for scope in ("ecom", "loyalty_programs", "demand_planning")}
    other_admin = _admin_client(engine, other_world)
    wrong["other tenant's admin"] = get_token(http, other_world, other_admin)
    for method, path in ADMIN_ROUTES:
        for reason, token in wrong.items():
            response = _call(http, method, base + path, bearer(token))
            assert response.status_code == 403, (reason, method, path, response.text)
            assert response.json()["error"] == "FORBIDDEN"


def test_admin_token_is_refused_on_integrator_routes_and_admin_calls_are_limited_and_audited(
        engine, http, world, admin) -> None:
    tenant = world["id"]
    for path in (f"/v1/tenants/{tenant}/ecom_stores/{client_of(world, 'ecom')['resource']}/retail_stores",
                 f"/v1/tenants/{tenant}/loyalty_programs/{client_of(world, 'loyalty_programs')['resource']}"
                 "/retail_stores",
                 f"/v1/tenants/{tenant}/demand_planning/limits"):
        response = http.get(path, headers=admin["headers"])
        assert response.status_code == 403, (path, response.text)
        assert "admin" in response.json()["message"]
    answered = http.post(f"{admin['base']}/retail_stores/1001/release", headers=admin["headers"])
    assert answered.status_code == 200 and int(answered.headers["X-RateLimit-Remaining"]) >= 0
    client_id = admin["client"]["clientId"]
    rows = wait_for(lambda: [e for e in client_events(engine, tenant, client_id, 10) if e.status == 200], 10,
                    "the admin call's audit row")
    assert rows[0].path == f"{admin['base']}/retail_stores/1001/release" and rows[0].method == "POST"


# --- load -------------------------------------------------------------------------------------------------

def test_load_answers_the_report_and_refuses_a_bad_document_whole(engine, http, world, admin) -> None:
    url = f"{admin['base']}/backoffice"
    document = {"skus": [{"number": "API-1", "name": "Over the API"}]}
    first = http.post(url, json=document, headers=admin["headers"])
    assert first.status_code == 200, first.text
    assert LoadReport.model_validate(first.json()).counts["skus"].created == 1 and first.json()["changed"] is True
    assert http.post(url, json=document, headers=admin["headers"]).json()["changed"] is False

    bad = {"skus": [{"number": "API-2", "name": "fine"}, {"number": "", "name": 5}],
           "retailStores": [{"number": "9", "name": "x", "companyNumber": "nope", "released": True}]}
    refused = http.post(url, json=bad, headers=admin["headers"])
    assert refused.status_code == 400
    body = refused.json()
    assert body["error"] == "INVALID_REQUEST"
    paths = {problem["path"] for problem in body["details"]["errors"]}
    assert {"skus[1].number", "skus[1].name", "retailStores[0].companyNumber"} <= paths
    assert all(problem["code"] and problem["message"] for problem in body["details"]["errors"])
    with engine.connect() as conn:
        assert conn.scalar(sa.select(skus.c.id).where(skus.c.tenant_id == world["id"],
                                                      skus.c.number == "API-2")) is None

    not_json = http.post(url, content=b"{nope", headers={**admin["headers"], "Content-Type": "application/json"})
    assert not_json.status_code == 400 and not_json.json()["error"] == "BAD_REQUEST"


# --- stock ------------------------------------------------------------------------------------------------

def test_stock_adjustments_store_the_count_and_write_inventory_events_only_on_change(engine, http, world, admin,
                                                                                     shop) -> None:
    url, headers, tenant = f"{admin['base']}/stock_adjustments", admin["headers"], world["id"]
    added = http.post(url, json={"locationNumber": "W1", "skuNumber": "100001", "onHandDelta": "5",
                                 "reason": "goods received"}, headers=headers)
    assert added.status_code == 200, added.text
    level = added.json()
    assert level | {"modifiedTime": None} == {
        "locationId": shop["warehouse"], "locationNumber": "W1", "locationName": "Sentrallager",
        "locationType": "WAREHOUSE", "skuId": shop["sku"], "skuNumber": "100001", "onHand": "5", "reserved": "0",
        "available": "5", "modifiedTime": None, "changed": True, "released": []}
    assert level["modifiedTime"].endswith("Z") and StockLevel.model_validate(level)
    expected = [(store, shop["sku"]) for store in shop["ecomStores"]]
    assert _outbox(engine, tenant, events.INVENTORY_UPDATED) == expected

    counted = http.post(url, json={"locationNumber": "W1", "skuNumber": "100001", "onHand": "5.0000"},
                        headers=headers)
    assert counted.json()["changed"] is False and counted.json()["onHand"] == "5"
    assert _outbox(engine, tenant, events.INVENTORY_UPDATED) == expected  # nothing changed, nothing written

    removed = http.post(url, json={"locationNumber": "W1", "skuNumber": "100001", "onHandDelta": "-1.5"},
                        headers=headers)
    assert removed.json()["onHand"] == "3.5"
    assert len(_outbox(engine, tenant, events.INVENTORY_UPDATED)) == 2 * len(expected)
    refusals = [
        ({"onHandDelta": "-4"}, 400, "onHandDelta", "NEGATIVE_ON_HAND"),
        ({"onHandDelta": "1", "onHand": "1"}, 400, "onHand", "ONE_OF_REQUIRED"),
        ({"onHandDelta": 1}, 400, "onHandDelta", "INVALID_DECIMAL"),
        ({"onHandDelta": "99999999999999"}, 400, "onHandDelta", "OUT_OF_RANGE"),
        ({"onHandDelta": "1", "skuNumber": "nope"}, 404, None, "NOT_FOUND"),
        ({"onHandDelta": "1", "locationNumber": "nope"}, 404, None, "NOT_FOUND"),
        ({"onHandDelta": "1", "locationNumber": "W1", "locationType": "RETAIL_STORE"}, 404, None, "NOT_FOUND"),
    ]
    for change, status, path, code in refusals:
        response = http.post(url, json={"locationNumber": "W1", "skuNumber": "100001", **change}, headers=headers)
        assert response.status_code == status, (change, response.text)
        if path is None:
            assert response.json()["error"] == code
        else:
            assert {"path": path, "code": code} in [{"path": e["path"], "code": e["code"]}
                                                    for e in response.json()["details"]["errors"]], response.text
    with engine.connect() as conn:
        assert conn.scalar(sa.select(stock_levels.c.on_hand).where(
            stock_levels.c.tenant_id == tenant, stock_levels.c.location_id == shop["warehouse"])) == 3.5
    assert len(_outbox(engine, tenant, events.INVENTORY_UPDATED)) == 2 * len(expected)


def test_a_number_shared_by_a_warehouse_and_a_store_needs_the_location_type(engine, http, world, admin,
                                                                           shop) -> None:
    with engine.begin() as conn:
        conn.execute(warehouses.insert().values(id=new_id(), tenant_id=world["id"], company_id=new_id(),
                                                number="1001", name="Lager 1001"))
    body = {"locationNumber": "1001", "skuNumber": "100002", "onHandDelta": "3"}
    url = f"{admin['base']}/stock_adjustments"
    ambiguous = http.post(url, json=body, headers=admin["headers"])
    assert ambiguous.status_code == 400
    assert ambiguous.json()["details"]["errors"][0] | {"message": ""} == {
        "path": "locationType", "code": "AMBIGUOUS_LOCATION", "message": ""}
    store = http.post(url, json={**body, "locationType": "RETAIL_STORE"}, headers=admin["headers"])
    assert store.status_code == 200 and store.json()["locationType"] == "RETAIL_STORE"
    assert store.json()["locationName"].startswith("Fjordmarked")


def test_concurrent_adjustments_lose_no_update(engine, http, world, admin, shop) -> None:
    body = {"locationNumber": "W1", "skuNumber": "100003", "onHandDelta": "1"}

    def adjust(_: int) -> int:
        return http.post(f"{admin['base']}/stock_adjustments", json=body, headers=admin["headers"]).status_code

    with ThreadPoolExecutor(20) as pool:
        assert list(pool.map(adjust, range(20))) == [200] * 20
    with engine.connect() as conn:
        on_hand = conn.scalar(sa.select(stock_levels.c.on_hand).where(
            stock_levels.c.tenant_id == world["id"], stock_levels.c.location_id == shop["warehouse"],
            stock_levels.c.sku_id == sa.select(skus.c.id).where(skus.c.tenant_id == world["id"],
                                                                skus.c.number == "100003").scalar_subquery()))
    assert on_hand == 20
    assert len(_outbox(engine, world["id"], events.INVENTORY_UPDATED)) == 20 * len(shop["ecomStores"])


# --- release ----------------------------------------------------------------------------------------------

def test_release_writes_retail_store_events_once(engine, http, world, admin) -> None:
    url = f"{admin['base']}/retail_stores/1004/release"
    store_id = next(store.id for store in list_retail_stores(engine, world["id"]) if store.number == "1004")
    loaded = _store_events(engine, world["id"], store_id)  # loading the world announced the new store
    released = http.post(url, headers=admin["headers"])
    assert released.status_code == 200, released.text
    store = released.json()
    assert (store["number"], store["status"], store["changed"]) == ("1004", "RELEASED", True)
    assert store["visitAddress"]["city"] == "Stavanger" and ReleasedRetailStore.model_validate(store)
    # Both eCom stores belong to the store's company: its click and collect network.
    expected = sorted(loaded + [(ecom["id"], store_id) for ecom in world["ecomStores"]])
    assert _store_events(engine, world["id"], store_id) == expected

    again = http.post(url, headers=admin["headers"])
    assert again.status_code == 200 and again.json()["changed"] is False
    assert _store_events(engine, world["id"], store_id) == expected
    with engine.connect() as conn:
        assert conn.scalar(sa.select(retail_stores.c.released).where(retail_stores.c.id == store["id"])) is True

    unknown = http.post(f"{admin['base']}/retail_stores/9999/release", headers=admin["headers"])
    assert unknown.status_code == 404 and unknown.json()["error"] == "NOT_FOUND"


# --- event destinations -----------------------------------------------------------------------------------

def _sealed(engine: sa.Engine, ecom_store_id: str) -> str:
    with engine.connect() as conn:
        return conn.scalar(sa.select(ecom_store_event_destinations.c.sealed_secret)
                           .where(ecom_store_event_destinations.c.ecom_store_id == ecom_store_id))


def test_event_destination_is_stored_sealed_and_never_shown(engine, http, world, other_world, admin, settings,
                                                           caplog) -> None:
    caplog.set_level(logging.DEBUG)
    store = world["ecomStores"][0]["id"]
    url, headers = f"{admin['base']}/ecom_stores/{store}/event_destination", admin["headers"]
    answers = [http.get(url, headers=headers)]
    assert answers[0].status_code == 404

    webhook = {"kind": "WEBHOOK", "url": "https://hooks.example.com/pia", "secret": WEBHOOK_SECRET}
    answers.append(http.put(url, json=webhook, headers=headers))
    assert answers[-1].status_code == 200, answers[-1].text
    shown = answers[-1].json()
    assert shown | {"modifiedTime": None} == {"ecomStoreId": store, "kind": "WEBHOOK",
                                              "url": "https://hooks.example.com/pia", "secretSet": True,
                                              "modifiedTime": None}
    answers.append(http.get(url, headers=headers))
    assert answers[-1].json() == shown and EventDestination.model_validate(shown)
    sealed = _sealed(engine, store)
    assert WEBHOOK_SECRET not in sealed and secret_box(settings).open(sealed) == WEBHOOK_SECRET

    service_bus = {"kind": "SERVICE_BUS", "endpoint": "sb://Nordlys.servicebus.windows.net/",
                   "entityPath": "pia-events", "sharedAccessKeyName": "Send", "sharedAccessKey": SAS_KEY}
    answers.append(http.put(url, json=service_bus, headers=headers))
    assert answers[-1].status_code == 200
    assert {name: answers[-1].json()[name] for name in ("kind", "endpoint", "entityPath", "sharedAccessKeyName")} \
        == {"kind": "SERVICE_BUS", "endpoint": "nordlys.servicebus.windows.net", "entityPath": "pia-events",
            "sharedAccessKeyName": "Send"}
    assert "url" not in answers[-1].json() and EventDestination.model_validate(answers[-1].json())
    assert secret_box(settings).open(_sealed(engine, store)) == SAS_KEY

    refusals = [
        ({**webhook, "url": "http://hooks.example.com/pia"}, "url", "INSECURE_URL"),
        ({**webhook, "url": "https://user:pw@hooks.example.com/"}, "url", "INVALID_URL"),
        ({**webhook, "secret": "short"}, "secret", None),
        ({**service_bus, "endpoint": "https://nordlys.servicebus.windows.net"}, "endpoint", "INVALID_HOST_NAME"),
        ({**service_bus, "entityPath": "-bad"}, "entityPath", None),
        ({**service_bus, "sharedAccessKey": None}, "sharedAccessKey", None),
        ({"kind": "KAFKA", "secret": WEBHOOK_SECRET}, "kind", None),
    ]
    for body, path, code in refusals:
        answers.append(http.put(url, json=body, headers=headers))
        assert answers[-1].status_code == 400, (body, answers[-1].text)
        problems = answers[-1].json()["details"]["errors"]
        assert path in [p["path"] for p in problems] and (code is None or code in [p["code"] for p in problems])
    assert secret_box(settings).open(_sealed(engine, store)) == SAS_KEY  # refusals stored nothing

    # The allowed http exception: a receiver on the same machine.
    local = {**webhook, "url": "http://localhost:8099/events"}
    answers.append(http.put(url, json=local, headers=headers))
    assert answers[-1].status_code == 200
    foreign = f"{admin['base']}/ecom_stores/{other_world['ecomStores'][0]['id']}/event_destination"
    answers.append(http.put(foreign, json=webhook, headers=headers))
    assert answers[-1].status_code == 404

    for answer in answers:
        assert WEBHOOK_SECRET not in answer.text and SAS_KEY not in answer.text
    assert WEBHOOK_SECRET not in caplog.text and SAS_KEY not in caplog.text


def test_rotate_secret_key_reseals_event_destination_secrets(own_store) -> None:
    settings, engine = own_store
    old_box = secret_box(settings)  # PostgreSQL: PIA_SECRET_KEY; DuckDB: the key file it generates
    old = settings.secret_key.get_secret_value() or (settings.data_dir / KEY_FILE).read_text().strip()
    tenant = create_tenant(engine, "rotation", False)
    store_id = new_id()
    with engine.begin() as conn:
        conn.execute(ecom_stores.insert().values(id=store_id, tenant_id=tenant, company_id=new_id(), number="1",
                                                 name="Web", released=True))
    set_destination(engine, old_box, tenant, store_id, DestinationSettings(
        "WEBHOOK", "https://hooks.example.com/", None, None, WEBHOOK_SECRET))
    before = _sealed(engine, store_id)

    new = new_secret_key()
    env = {"PIA_DATA_DIR": str(settings.data_dir), "PIA_DATABASE_URL": settings.database_url,
           "PIA_SECRET_KEY": f"{new},{old}"}
    result = CliRunner().invoke(main, ["admin", "rotate-secret-key"], env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"resealed": 1}  # no signing key yet: the destination's secret alone
    after = _sealed(engine, store_id)
    assert after != before and WEBHOOK_SECRET not in after
    assert SecretBox(new, "new key alone").open(after) == WEBHOOK_SECRET
    with pytest.raises(Exception, match="does not hold"):
        SecretBox(old, "old key alone").open(after)
