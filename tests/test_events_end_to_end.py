"""Every event subject delivered end to end in embedded mode (issue 9 point 4): a real `pia serve` on DuckDB runs the
outbox bridge in its own process and posts each eCom store's events to that store's webhook receiver
(tests/webhook_receiver.py, which verifies every signature with its own store's secret).

One run per module drives real changes over HTTP, as the back office (admin API) and the web shop (ecom API) make
them: back-office documents, stock adjustments, a retail store's release, an order's whole life, both
trigger_events, and two refused changes. After each step it waits until both stores' backlog is 0 (the admin API's
event_delivery) and keeps what each receiver got during the step. The tests then check the steps' deliveries, and,
with the server stopped (DuckDB's file is one process's at a time), the outbox rows against them.

The demo's two eCom stores sell the same assortment; the run gives the business shop a local assortment with one
SKU of a product the web shop does not sell, so some product and inventory events concern one store only.
"""

import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest
import sqlalchemy as sa

from contracts import events as subjects
from contracts.rendering import instant
from db.engine import create_engine
from db.migrate import upgrade
from db.schema import event_outbox
from serving.demo import seed_demo_tenant
from serving.demo_data import TEST_PRODUCTS, demo_document
from settings import Settings
from tests.conftest import bearer, client_of, get_token, wait_for
from tests.test_admin import Served
from tests.web_shop import new_order
from tests.webhook_receiver import Delivery, WebhookReceiver

pytestmark = pytest.mark.timeout(180)  # a guard: the whole run takes well under a minute

# Distinct secrets (one in the Standard Webhooks form, one raw), each with the key its consumer's library is given:
# an event posted to the wrong store's receiver would not verify there.
SECRETS = (("whsec_ZTJlIHdlYiBzaG9wIHNpZ25pbmcga2V5", "whsec_ZTJlIHdlYiBzaG9wIHNpZ25pbmcga2V5"),
           ("e2e business shop signing secret", b"e2e business shop signing secret"))
SCHEMA_SUBJECTS = set(subjects.REFERENCE_LISTS.values())
ENTITY_SUBJECTS = {subjects.PRODUCT_UPDATED, subjects.INVENTORY_UPDATED, subjects.CAMPAIGN_UPDATED,
                   subjects.ORDER_CREATED, subjects.ORDER_READY_FOR_PAYMENT_CAPTURE, subjects.ORDER_FULFILLED,
                   subjects.ORDER_READY_FOR_REFUND, subjects.ORDER_SHIPPED, subjects.RETAIL_STORE_UPDATED}
ORDER_SUBJECTS = {subjects.ORDER_CREATED, subjects.ORDER_READY_FOR_PAYMENT_CAPTURE, subjects.ORDER_FULFILLED,
                  subjects.ORDER_READY_FOR_REFUND, subjects.ORDER_SHIPPED}
LOCAL_ASSORTMENT = "E2E"
# The demo shop's assortment leaves out every 25th product: the business shop's local assortment adds one SKU of it.
UNSOLD_PRODUCT_INDEX = 24
# The server's bridge and order processor look often, so each step settles in a fraction of a second.
QUICK = {"PIA_BRIDGE_POLL_SECONDS": "0.2", "PIA_BRIDGE_RETRY_BASE_SECONDS": "0.1",
         "PIA_BRIDGE_RETRY_MAX_SECONDS": "1", "PIA_WORKER_POLL_SECONDS": "0.2"}


def sent(delivery: Delivery) -> tuple[str | None, str | None]:
    """What a delivery announces: its subject and entity id."""
    return delivery.subject, delivery.body["entityId"]


@dataclass
class Run:
    """What the run did and what each store's receiver got; stores are named `web` and `business`."""

    tenant_id: str
    store_ids: dict[str, str]
    steps: dict[str, dict[str, list[Delivery]]] = field(default_factory=dict)  # step → store → its deliveries
    facts: dict[str, Any] = field(default_factory=dict)  # ids and counts the steps learnt over HTTP
    received: dict[str, list[Delivery]] = field(default_factory=dict)  # store → every delivery, in arrival order
    rejections: dict[str, list[str]] = field(default_factory=dict)
    delivery_states: dict[str, dict[str, Any]] = field(default_factory=dict)  # store → event_delivery at the end
    rows: dict[str, sa.Row] = field(default_factory=dict)  # the outbox rows the run's changes wrote, by event id


class Driver:
    """Changes over HTTP as the back office and the two shops make them, in steps that wait for delivery."""

    def __init__(self, http: httpx.Client, world: dict[str, Any], run: Run,
                 receivers: dict[str, WebhookReceiver]) -> None:
        self.http, self.run, self.receivers = http, run, receivers
        self.admin_base = f"/admin/v1/tenants/{world['id']}"
        self.admin_headers = bearer(get_token(http, world, client_of(world, "admin")))
        self.shop_headers = {name: bearer(get_token(http, world, client_of(world, "ecom", index=index)))
                             for index, name in enumerate(run.store_ids)}
        self._seen = dict.fromkeys(run.store_ids, 0)

    def admin(self, method: str, path: str, body: Any = None, expect: int = 200) -> Any:
        response = self.http.request(method, self.admin_base + path, json=body, headers=self.admin_headers)
        assert response.status_code == expect, response.text
        return response.json()

    def shop(self, store: str, method: str, path: str, body: Any = None, expect: int = 200) -> Any:
        url = f"/v1/tenants/{self.run.tenant_id}/ecom_stores/{self.run.store_ids[store]}{path}"
        response = self.http.request(method, url, json=body, headers=self.shop_headers[store])
        assert response.status_code == expect, response.text
        return response.json()

    def delivery_state(self, store: str) -> dict[str, Any]:
        return self.admin("GET", f"/ecom_stores/{self.run.store_ids[store]}/event_delivery")

    def drained(self) -> bool:
        return all(self.delivery_state(store)["backlog"] == 0 for store in self.run.store_ids)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Make the step's changes, wait until nothing is left to deliver, keep what each receiver got meanwhile.
        A receiver has recorded an event before the bridge marks it delivered, so a backlog of 0 means it is in."""
        yield
        wait_for(self.drained, 30, f"the events of step {name!r} to be delivered")
        self.run.steps[name] = {}
        for store, receiver in self.receivers.items():
            deliveries = receiver.deliveries
            self.run.steps[name][store] = deliveries[self._seen[store]:]
            self._seen[store] = len(deliveries)

    def product_ids(self, store: str) -> set[str]:
        return set(self.shop(store, "GET", "/products?includeUnpublished=true")["items"])


def drive(driver: Driver, document: dict[str, Any]) -> None:
    """The run's steps, in order; the ids and counts they learn over HTTP go into `run.facts` for the tests."""
    facts = driver.run.facts
    unsold_sku = document["products"][UNSOLD_PRODUCT_INDEX]["skus"][0]["number"]

    with driver.step("local assortment"):
        driver.admin("POST", "/backoffice", {
            "assortments": [{"code": LOCAL_ASSORTMENT, "kind": "LOCAL", "name": "Bedrift ekstra",
                             "lines": [{"skuNumber": unsold_sku, "replenishmentType": "AUTO"}]}],
            "ecomStores": [document["ecomStores"][1] | {"localAssortmentCode": LOCAL_ASSORTMENT}]})
    facts["web products"], facts["business products"] = driver.product_ids("web"), driver.product_ids("business")
    (facts["business-only product"],) = facts["business products"] - facts["web products"]

    first_product = driver.shop("web", "GET", "/products?limit=1")["items"][0]
    shared = next(sku for sku in driver.shop("web", "GET", f"/products/{first_product}")["skus"] if sku["price"])
    facts["shared sku"] = shared["id"]
    with driver.step("stock"):
        level = driver.admin("POST", "/stock_adjustments",
                             {"locationNumber": "9001", "skuNumber": unsold_sku, "onHandDelta": "5"})
        facts["business-only sku"] = level["skuId"]
        driver.admin("POST", "/stock_adjustments", {"locationNumber": "9001", "skuNumber": shared["number"],
                                                    "onHand": "100"})

    with driver.step("reference lists"):
        driver.admin("POST", "/backoffice", {"referenceLists": renamed_first_entries(document["referenceLists"])})

    campaign = document["campaigns"][0]
    with driver.step("campaign"):
        driver.admin("POST", "/backoffice", {"campaigns": [campaign | {"name": campaign["name"] + " forlenget"}]})
    facts["campaign"] = next(item["id"] for item in driver.shop("web", "GET", "/campaigns")["campaigns"]
                             if item["code"] == campaign["code"])

    with driver.step("retail store released"):
        facts["retail store"] = driver.admin("POST", "/retail_stores/1004/release")["id"]

    drive_order(driver, shared)

    with driver.step("product trigger"):
        facts["product trigger"] = {store: driver.shop(store, "POST", "/products/trigger_events")["eventsTriggered"]
                                    for store in driver.run.store_ids}
    with driver.step("inventory trigger"):
        facts["inventory trigger"] = {store: driver.shop(store, "POST", "/inventory/trigger_events")["eventsTriggered"]
                                      for store in driver.run.store_ids}

    with driver.step("refused changes"):
        # Each would announce something (a renamed brand, a stock change) had it not been refused and rolled back.
        driver.admin("POST", "/backoffice", {
            "referenceLists": {"brands": [{"code": "NORDLYS", "name": "Nordlys avvist"}]},
            "assortments": [{"code": LOCAL_ASSORTMENT, "kind": "LOCAL", "name": "Bedrift ekstra",
                             "lines": [{"skuNumber": "NO-SUCH-SKU", "replenishmentType": "AUTO"}]}]}, expect=400)
        driver.admin("POST", "/stock_adjustments", {"locationNumber": "9001", "skuNumber": shared["number"],
                                                    "onHandDelta": "-100000"}, expect=400)
        # Then one change that is committed: the bridge delivers a store's rows in outbox order, so anything the
        # refused ones had written would have arrived before this.
        driver.admin("POST", "/stock_adjustments", {"locationNumber": "9001", "skuNumber": shared["number"],
                                                    "onHandDelta": "1"})


def drive_order(driver: Driver, sku: dict[str, Any]) -> None:
    """The web shop's order through its life: created, picked (payment capture on), captured, shipped, returned."""
    facts = driver.run.facts
    with driver.step("order created"):
        order_id = driver.shop("web", "POST", "/orders", new_order(
            {"skuNumber": sku["number"], "quantity": 2, "netUnitPrice": sku["price"], "vatRate": sku["vatRate"]}),
            expect=202)["id"]
        # Opened (stock reserved, OrderCreated) after the 202, by the server's order processor.
        wait_for(lambda: driver.shop("web", "GET", f"/orders/{order_id}")["status"] == "OPEN", 20,
                 "the order to be opened")
    facts["order"] = order_id
    with driver.step("picked"):
        capture = driver.admin("POST", f"/orders/{order_id}/pick", {})["captures"][-1]
    facts["capture"] = capture["id"]
    with driver.step("payment captured"):
        driver.shop("web", "POST", f"/orders/{order_id}/captures/{capture['id']}/payment_capture",
                    {"status": "CONFIRMED", "capturedAmount": capture["grossAmount"]})
    with driver.step("shipped"):
        driver.admin("POST", f"/orders/{order_id}/ship", {"captureId": capture["id"], "carrier": "Posten"})
    with driver.step("returned"):
        facts["refund"] = driver.admin("POST", f"/orders/{order_id}/returns", {})["refunds"][-1]["id"]


def renamed_first_entries(lists: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """The first entry of each reference list renamed, and the first option of the first dynamic attribute (given
    with all its options, so none is dropped): one changed entry in each of the twelve lists."""
    renamed = {name: [entries[0] | {"name": entries[0]["name"] + " ny"}] for name, entries in lists.items()}
    attribute = renamed["dynamicAttributes"][0]
    first, *others = attribute["options"]
    attribute["options"] = [first | {"name": first["name"] + " ny"}, *others]
    return renamed


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    data_dir = tmp_path_factory.mktemp("e2e") / "data"
    engine = create_engine(Settings(data_dir=data_dir))
    upgrade(engine)
    world = seed_demo_tenant(engine, "events end to end", is_test=True)
    # The same document the seed loaded, for the entries the steps change.
    document = demo_document("events end to end", TEST_PRODUCTS, world["id"])
    with engine.connect() as conn:
        seeded = set(conn.scalars(sa.select(event_outbox.c.event_id)
                                  .where(event_outbox.c.tenant_id == world["id"])))
    engine.dispose()  # the file is the server's from now on
    run = Run(tenant_id=world["id"], store_ids={"web": world["ecomStores"][0]["id"],
                                                "business": world["ecomStores"][1]["id"]})
    env = {**os.environ, "PIA_DATA_DIR": str(data_dir), "PIA_DATABASE_URL": "", "PIA_KAFKA_BOOTSTRAP_SERVERS": "",
           **QUICK}
    receivers = {store: WebhookReceiver(key).start() for store, (_, key) in zip(run.store_ids, SECRETS, strict=True)}
    server = Served(env)
    try:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            driver = Driver(http, world, run, receivers)
            # The seed's events find no destination: the bridge discards them (NO_DESTINATION) before any is set.
            wait_for(driver.drained, 30, "the seeded events to be discarded")
            for (store, receiver), (secret, _) in zip(receivers.items(), SECRETS, strict=True):
                driver.admin("PUT", f"/ecom_stores/{run.store_ids[store]}/event_destination",
                             {"kind": "WEBHOOK", "url": receiver.url, "secret": secret})
            drive(driver, document)
            run.delivery_states = {store: driver.delivery_state(store) for store in run.store_ids}
    finally:
        server.stop()
        for store, receiver in receivers.items():
            receiver.stop()
            run.received[store], run.rejections[store] = receiver.deliveries, receiver.rejections
    engine = create_engine(Settings(data_dir=data_dir))
    with engine.connect() as conn:
        run.rows = {row.event_id: row for row in conn.execute(sa.select(event_outbox).where(
            event_outbox.c.tenant_id == run.tenant_id, event_outbox.c.event_id.not_in(seeded)))}
    engine.dispose()
    return run


def step_sent(run: Run, step: str) -> dict[str, list[tuple[str | None, str | None]]]:
    return {store: [sent(delivery) for delivery in deliveries] for store, deliveries in run.steps[step].items()}


def test_all_nine_entity_subjects_and_twelve_schema_subjects_arrive(run: Run) -> None:
    arrived = {delivery.subject for deliveries in run.received.values() for delivery in deliveries}
    assert len(SCHEMA_SUBJECTS) == 12 and len(ENTITY_SUBJECTS) == 9
    assert arrived == ENTITY_SUBJECTS | SCHEMA_SUBJECTS


def test_schema_events_reach_every_store_once_per_changed_list_with_a_null_entity_id(run: Run) -> None:
    expected = sorted((subject, None) for subject in SCHEMA_SUBJECTS)
    assert {store: sorted(announced) for store, announced in step_sent(run, "reference lists").items()} == {
        "web": expected, "business": expected}


def test_campaign_and_retail_store_events_name_their_entity_and_reach_both_stores(run: Run) -> None:
    for step, announced in (("campaign", (subjects.CAMPAIGN_UPDATED, run.facts["campaign"])),
                            ("retail store released", (subjects.RETAIL_STORE_UPDATED, run.facts["retail store"]))):
        assert step_sent(run, step) == {"web": [announced], "business": [announced]}, step


def test_product_and_inventory_events_of_a_sku_only_one_assortment_holds_reach_only_that_store(run: Run) -> None:
    assert step_sent(run, "local assortment") == {
        "web": [], "business": [(subjects.PRODUCT_UPDATED, run.facts["business-only product"])]}
    shared = (subjects.INVENTORY_UPDATED, run.facts["shared sku"])
    # Two SKUs are two entities, whose events keep no order between them (README: in order per entity).
    assert {store: Counter(events) for store, events in step_sent(run, "stock").items()} == {
        "web": Counter([shared]),
        "business": Counter([(subjects.INVENTORY_UPDATED, run.facts["business-only sku"]), shared])}


def test_order_events_reach_the_ordering_store_only_with_the_order_id_and_their_metadata(run: Run) -> None:
    order = run.facts["order"]
    expected = {"order created": (subjects.ORDER_CREATED, None),
                "picked": (subjects.ORDER_READY_FOR_PAYMENT_CAPTURE, {"captureId": run.facts["capture"]}),
                "payment captured": (subjects.ORDER_FULFILLED, None),
                "shipped": (subjects.ORDER_SHIPPED, None),
                "returned": (subjects.ORDER_READY_FOR_REFUND, {"refundId": run.facts["refund"]})}
    for step, (subject, metadata) in expected.items():
        web, business = run.steps[step]["web"], run.steps[step]["business"]
        order_events = [(delivery.subject, delivery.body["entityId"], delivery.body.get("metadata"))
                        for delivery in web if delivery.subject in ORDER_SUBJECTS]
        assert order_events == [(subject, order, metadata)], step
        # Besides, only the stock the order moves, which both stores' assortment holds.
        others = [sent(delivery) for delivery in web if delivery.subject not in ORDER_SUBJECTS]
        assert set(others) <= {(subjects.INVENTORY_UPDATED, run.facts["shared sku"])}, step
        assert [sent(delivery) for delivery in business] == others, step


def test_only_capture_and_refund_events_carry_metadata(run: Run) -> None:
    with_metadata = {delivery.subject for deliveries in run.received.values() for delivery in deliveries
                     if "metadata" in delivery.body}
    assert with_metadata == {subjects.ORDER_READY_FOR_PAYMENT_CAPTURE, subjects.ORDER_READY_FOR_REFUND}


def test_trigger_events_announce_the_asking_stores_whole_assortment_to_it_alone(run: Run) -> None:
    products = step_sent(run, "product trigger")
    for store in run.store_ids:
        assert Counter(subject for subject, _ in products[store]) == {
            subjects.PRODUCT_UPDATED: run.facts["product trigger"][store]}
        assert sorted(entity for _, entity in products[store]) == sorted(run.facts[f"{store} products"])
    inventory = step_sent(run, "inventory trigger")
    skus = {}
    for store in run.store_ids:
        assert Counter(subject for subject, _ in inventory[store]) == {
            subjects.INVENTORY_UPDATED: run.facts["inventory trigger"][store]}
        skus[store] = [entity for _, entity in inventory[store]]
        assert len(set(skus[store])) == len(skus[store]), "each SKU once"
    assert set(skus["business"]) - set(skus["web"]) == {run.facts["business-only sku"]}
    assert set(skus["web"]) < set(skus["business"])


def test_a_refused_change_delivers_nothing(run: Run) -> None:
    marker = (subjects.INVENTORY_UPDATED, run.facts["shared sku"])
    assert step_sent(run, "refused changes") == {"web": [marker], "business": [marker]}


def test_each_receiver_got_exactly_its_stores_outbox_rows_as_they_were_written(run: Run) -> None:
    for store, store_id in run.store_ids.items():
        assert run.rejections[store] == [], "every delivery verifies with the store's own secret"
        rows = {event_id: row for event_id, row in run.rows.items() if row.ecom_store_id == store_id}
        deliveries = run.received[store]
        assert sorted(delivery.webhook_id for delivery in deliveries) == sorted(rows), store  # each once, no other
        for delivery in deliveries:
            row = rows[delivery.webhook_id]
            metadata = {"metadata": orjson.loads(row.metadata)} if row.metadata else {}
            assert delivery.subject == row.subject
            assert delivery.body == {"entityId": row.entity_id, "eventId": row.event_id,
                                     "datetime": instant(row.datetime), **metadata}


def test_every_row_is_marked_delivered_and_no_backlog_is_left(run: Run) -> None:
    assert run.rows, "the run's changes wrote events"
    assert all(row.delivered_time is not None and row.dead_letter_time is None and row.last_error is None
               for row in run.rows.values())
    for store, state in run.delivery_states.items():
        last = run.received[store][-1].webhook_id
        assert (state["backlog"], state["deadLetters"], state["consecutiveFailures"]) == (0, 0, 0), store
        assert state["lastDeliveredEventId"] == last and not state["credentialsRefused"], store
        assert state["lastError"] is None, "the seed's NO_DESTINATION is cleared by the deliveries that followed"
