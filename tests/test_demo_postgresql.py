"""`pia demo` on PostgreSQL is everything in one process (issue 22 point 1), and `pia serve` keeps its defaults.

A real `pia demo` process on a fresh PostgreSQL database (PIA_DATABASE_URL, PIA_SECRET_KEY) seeds, migrates and
serves; the contract's demand planning checks that wait for processing (batches applied, items rejected, held data
read back) and its event checks (a destination set through the admin API gets the store's events, signed, from the
bridge in the demo's own process) pass against it with nothing else running. `pia serve` on PostgreSQL runs the API
and the order processor only, and says which commands to start beside it.
"""

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks.databases import scratch_postgres_url
from db.engine import create_engine
from db.migrate import upgrade
from db.secrets import new_secret_key
from serving.roles import Roles
from settings import KafkaSettings, Settings
from tests.batches import body, envelope, forecast_item, new_batch_id, replenishment_item, wait_finished
from tests.conftest import bearer, get_token, wait_for
from tests.demo_process import Demo
from tests.test_admin import Served
from tests.web_shop import new_order
from tests.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.timeout(300)  # a guard: start-up and the checks take well under a minute
SECRET = "demo on postgresql webhook secret"
# The demo's own processing, looked for often, so each check settles in a fraction of a second.
QUICK = {"PIA_WORKER_POLL_SECONDS": "0.2", "PIA_BRIDGE_POLL_SECONDS": "0.2", "PIA_ADMIN_URL": ""}


@pytest.fixture(scope="module")
def demo(postgres_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    with scratch_postgres_url("pia_demo") as database_url:  # postgres_url: skipped when the server is missing
        running = Demo(tmp_path_factory.mktemp("demo-postgresql"),
                       env={"PIA_DATABASE_URL": database_url, "PIA_SECRET_KEY": new_secret_key(), **QUICK})
        try:
            yield running
        finally:
            running.stop()


@pytest.fixture(scope="module")
def tenant(demo: Demo) -> dict[str, Any]:
    """The demo tenant (not the test one), each of its clients with a token."""
    credentials = json.loads((demo.data_dir / "demo-credentials.json").read_text())
    chosen = next(tenant for tenant in credentials["tenants"] if not tenant["test"])
    with httpx.Client(base_url=demo.url, timeout=30) as http:
        for client in chosen["clients"]:
            client["headers"] = bearer(get_token(http, chosen, client))
    return chosen


@pytest.fixture
def http(demo: Demo) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=demo.url, timeout=30) as client:
        yield client


def headers_of(tenant: dict[str, Any], scope: str, resource: str | None = None) -> dict[str, str]:
    """The token headers of the tenant's client of the scope (demand_planning: the one with the permission)."""
    return next(c["headers"] for c in tenant["clients"] if c["scope"] == scope and resource in (None, c["resource"])
                and (scope != "demand_planning" or c["permissions"]))


def test_the_demo_says_it_runs_every_role(demo: Demo) -> None:
    printed = "".join(demo.lines)
    assert ("running in this process: the API, the order processor, the pipeline worker, the event bridge (from "
            "the outbox)") in printed
    assert "start beside it" not in printed


def test_demand_planning_batches_are_processed_and_read_back(http: httpx.Client, tenant: dict[str, Any]) -> None:
    """Stores 1001–1003 are released, 1004 is not; 1002's line of SKU 100010 is locked, 100021 is AUTO in the base
    assortment (demo_data.py)."""
    headers, base = headers_of(tenant, "demand_planning"), f"/v1/tenants/{tenant['id']}/demand_planning"
    today = datetime.now(UTC).date()
    forecasts = [forecast_item("100001", retail="1001", start=today, days=14, quantity="2.5"),
                 forecast_item("100001", retail="1004", start=today), forecast_item("100001", retail="9999")]
    generated = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    raw, sent = body(envelope(forecasts, generated_at=generated))
    upload = http.put(f"{base}/sales_forecast_batches/{new_batch_id()}", content=raw, headers={**headers, **sent})
    assert upload.status_code == 202, upload.text
    status = wait_finished(http, upload.headers["Location"], headers)
    assert status["progress"] == "COMPLETED_WITH_REJECTED_ITEMS"
    assert status["counts"] == {"items": 3, "applied": 1, "superseded": 0, "locked": 0, "rejected": 2}
    assert sorted(item["code"] for item in status["rejectedItems"]) == ["RETAIL_STORE_NOT_RELEASED",
                                                                         "UNKNOWN_RETAIL_STORE"]
    held = http.get(f"{base}/sales_forecasts", params={"retailStoreNumber": "1001"}, headers=headers).json()
    (item,) = [item for item in held["items"] if item["skuNumber"] == "100001"]
    assert (item["quantities"], item["generatedAt"]) == (["2.5"] * 14, status["generatedAt"])

    parameters = [replenishment_item("100021", store="1001", reorder="7", maximum="21"),
                  replenishment_item("100010", store="1002")]
    raw, sent = body(envelope(parameters, generated_at=generated))
    upload = http.put(f"{base}/replenishment_parameter_batches/{new_batch_id()}", content=raw,
                      headers={**headers, **sent})
    status = wait_finished(http, upload.headers["Location"], headers)
    assert (status["progress"], status["counts"]["applied"], status["counts"]["locked"]) == ("COMPLETED", 1, 1)
    held = http.get(f"{base}/replenishment_parameters", params={"retailStoreNumber": "1001"}, headers=headers).json()
    (line,) = [line for line in held["items"] if line["skuNumber"] == "100021"]
    assert (line["reorderPoint"], line["maximumInventory"], line["parameterSource"]) \
        == ("7", "21", "RETAIL_STORE_SPECIFIC")


def test_events_reach_a_destination_set_through_the_admin_api(http: httpx.Client, tenant: dict[str, Any]) -> None:
    """The bridge of the demo's process delivers trigger_events' ProductUpdated, and an order's OrderCreated (the
    order processor's, with the reservation's InventoryUpdated), each verified by the receiver."""
    store = next(s["id"] for s in tenant["ecomStores"] if s["released"])
    shop, admin = headers_of(tenant, "ecom", store), headers_of(tenant, "admin")
    base = f"/v1/tenants/{tenant['id']}/ecom_stores/{store}"
    with WebhookReceiver(SECRET.encode()) as receiver:
        destination = {"kind": "WEBHOOK", "url": receiver.url, "secret": SECRET}
        answer = http.put(f"/admin/v1/tenants/{tenant['id']}/ecom_stores/{store}/event_destination", json=destination,
                          headers=admin)
        assert answer.status_code == 200, answer.text
        products = http.get(f"{base}/products", params={"includeUnpublished": "true"}, headers=shop).json()["items"]
        assert http.post(f"{base}/products/trigger_events", headers=shop).json()["eventsTriggered"] == len(products)
        wait_for(lambda: {d.body["entityId"] for d in receiver.deliveries if d.subject == "ProductUpdated"}
                 == set(products), 60, "a ProductUpdated per product")

        record = http.get(f"{base}/products/{products[0]}", headers=shop).json()
        sku = record["skus"][0]
        line = {"skuNumber": sku["number"], "quantity": 1, "netUnitPrice": sku["price"], "vatRate": sku["vatRate"]}
        created = http.post(f"{base}/orders", json=new_order(line), headers=shop)
        assert created.status_code == 202, created.text
        order_id = created.json()["id"]
        wait_for(lambda: ("OrderCreated", order_id) in {(d.subject, d.body["entityId"]) for d in receiver.deliveries},
                 60, "OrderCreated of the order")
        assert http.get(f"{base}/orders/{order_id}", headers=shop).json()["status"] == "OPEN"
        assert ("InventoryUpdated", sku["id"]) in {(d.subject, d.body["entityId"]) for d in receiver.deliveries}
        assert receiver.rejections == []


@pytest.mark.parametrize("kafka", ["", "127.0.0.1:9"])
def test_serve_roles_and_what_to_start_beside_it(kafka: str) -> None:
    """`pia serve` keeps its defaults (PostgreSQL: the API and the order processor; DuckDB: everything), `pia demo`
    runs everything, and the lines say so, with the commands to start beside a PostgreSQL server."""
    postgresql = Settings(database_url="postgresql+psycopg://x@h/d", secret_key="k",
                          kafka=KafkaSettings(bootstrap_servers=kafka))
    duckdb = Settings(kafka=KafkaSettings(bootstrap_servers=kafka))
    relay = ", the relay to Kafka" if kafka else ""
    bridge = f"the event bridge (from {'Kafka' if kafka else 'the outbox'})"
    assert Roles.of_serve(postgresql).startup_lines(postgresql) == [
        "running in this process: the API, the order processor",
        f"start beside it (PostgreSQL): `pia worker` (pipeline worker{', relay to Kafka' if kafka else ''}) and "
        "`pia bridge` (event delivery)"]
    everything = [f"running in this process: the API, the order processor, the pipeline worker{relay}, {bridge}"]
    assert Roles.of_serve(duckdb).startup_lines(duckdb) == everything
    assert Roles.everything(postgresql).startup_lines(postgresql) == everything
    assert Roles.everything(duckdb).startup_lines(duckdb) == everything
    with_worker = postgresql.with_changes(inprocess_worker=True)
    assert Roles.of_serve(with_worker).to_start_beside(with_worker) == \
        (["`pia worker` (relay to Kafka)"] if kafka else []) + ["`pia bridge` (event delivery)"]


def test_pia_serve_on_postgresql_prints_what_to_start_beside_it(postgres_url: str, tmp_path: Path) -> None:
    with scratch_postgres_url("pia_serve") as database_url:
        secret_key = new_secret_key()
        engine = create_engine(Settings(database_url=database_url, secret_key=secret_key))
        upgrade(engine)
        engine.dispose()
        server = Served({**os.environ, "PIA_DATABASE_URL": database_url, "PIA_SECRET_KEY": secret_key,
                         "PIA_DATA_DIR": str(tmp_path), "PIA_KAFKA_BOOTSTRAP_SERVERS": ""})
        server.stop()
    said = [line["event"] for line in server.logged() if line["logger"] == "pia.serve"]
    assert said == ["running in this process: the API, the order processor",
                    "start beside it (PostgreSQL): `pia worker` (pipeline worker) and `pia bridge` (event delivery)"]
