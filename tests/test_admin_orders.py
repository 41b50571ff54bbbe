"""The order lifecycle through the admin API over real HTTP, and `pia admin order` against a real `pia serve`, on
both backends: picking with and without payment capture, shipping, returns, cancelling, every refusal with its
path and code, concurrent picks of one line, and the documents, stock and events each step leaves."""

import json
import os
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from contracts import events
from contracts.orders import CreateOrder
from db.engine import create_engine
from db.fulfilment import report_capture
from db.ids import new_id
from db.migrate import upgrade
from db.order_processing import process_order
from db.orders import create_order, read_order
from db.schema import ecom_stores, event_outbox, orders, stock_levels
from db.stock import adjust_stock
from serving.cli import main
from serving.demo import seed_demo_tenant
from settings import Settings
from tests.conftest import bearer, client_of
from tests.openapi_check import assert_response_matches
from tests.test_admin import PIA, Served
from tests.web_shop import Shop, new_order, opened_order, order_line

EMPTY = object()  # post no body at all


@pytest.fixture(scope="module")
def tenant(engine: sa.Engine) -> dict[str, Any]:
    """This module's own tenant (the demo's test catalogue), so no other test's orders touch its stock."""
    return seed_demo_tenant(engine, f"admin orders {new_id()}", is_test=True)


class Operator:
    """The admin API's order routes with the tenant's admin token."""

    def __init__(self, http: httpx.Client, tenant: dict[str, Any], token: str) -> None:
        self.http, self.headers = http, bearer(token)
        self.base = f"/admin/v1/tenants/{tenant['id']}/orders"

    def get(self, order_key: str) -> httpx.Response:
        return self.http.get(f"{self.base}/{order_key}", headers=self.headers)

    def post(self, order_key: str, action: str, body: Any = EMPTY) -> httpx.Response:
        content = b"" if body is EMPTY else json.dumps(body).encode()
        return self.http.post(f"{self.base}/{order_key}/{action}", content=content,
                              headers={**self.headers, "Content-Type": "application/json"})

    def done(self, order_key: str, action: str, body: Any = EMPTY) -> dict[str, Any]:
        response = self.post(order_key, action, body)
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture
def operator(http, tenant, cached_token) -> Operator:
    return Operator(http, tenant, cached_token(tenant, client_of(tenant, "admin")))


@pytest.fixture
def web(http, engine, tenant, cached_token) -> Shop:
    """The web shop: payment capture enabled."""
    return Shop(http, engine, tenant, cached_token(tenant, client_of(tenant, "ecom")), 0)


@pytest.fixture
def business(http, engine, tenant, cached_token) -> Shop:
    """The business shop: no payment capture, so a pick makes the receipt at once."""
    return Shop(http, engine, tenant, cached_token(tenant, client_of(tenant, "ecom", index=1)), 1)


def _capture_enabled(engine: sa.Engine, shop: Shop) -> bool:
    with engine.connect() as conn:
        return conn.scalar(sa.select(ecom_stores.c.payment_capture_enabled).where(ecom_stores.c.id == shop.id))


@pytest.fixture(scope="module")
def unused_skus(engine, tenant) -> Iterator[sa.Row]:
    """The priced SKUs both shops sell, each for one order of one test, so no two tests share a stock level; none
    the demo seeded with a reservation (click and collect), whose stock a test could not set freely."""
    with engine.connect() as conn:
        reserved = set(conn.scalars(sa.select(stock_levels.c.sku_id).where(stock_levels.c.tenant_id == tenant["id"],
                                                                           stock_levels.c.reserved > 0)))
    return iter([row for row in Shop(None, engine, tenant, "", 0).skus()  # type: ignore[arg-type]
                 if row.price and row.id not in reserved])


def _stocked(shop: Shop, unused_skus: Iterator[sa.Row], on_hand: int = 50) -> sa.Row:
    """An unused SKU with `on_hand` at every warehouse."""
    sku = next(unused_skus)
    for warehouse in ("9001", "9002"):
        adjust_stock(shop.engine, shop.tenant_id, warehouse, sku.number, on_hand=Decimal(on_hand))
    return sku


def _open_order(shop: Shop, *lines: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """An order of the shop, once processed (OPEN, stock reserved); its customer is the web shop's default one
    (the business shop has none of its own)."""
    with shop.engine.connect() as conn:
        customer_id = conn.scalar(sa.select(ecom_stores.c.default_customer_id).where(
            ecom_stores.c.tenant_id == shop.tenant_id, ecom_stores.c.default_customer_id.is_not(None)))
    response = shop.post(new_order(*lines, customerId=customer_id, **fields))
    assert response.status_code == 202, response.text
    return opened_order(shop, response.json()["id"])


def _stock(engine: sa.Engine, order_id: str, sku_id: str) -> tuple[Decimal, Decimal]:
    """(on hand, reserved) of the SKU at the order's warehouse."""
    with engine.connect() as conn:
        row = conn.execute(sa.select(stock_levels.c.on_hand, stock_levels.c.reserved)
                           .join(orders, orders.c.warehouse_id == stock_levels.c.location_id)
                           .where(orders.c.id == order_id, stock_levels.c.sku_id == sku_id)).one()
    return row.on_hand, row.reserved


def _order_events(engine: sa.Engine, order_id: str) -> list[tuple[str, dict[str, str] | None]]:
    """(subject, metadata) of the order's events in the order they were written."""
    with engine.connect() as conn:
        return [(row.subject, json.loads(row.metadata) if row.metadata else None) for row in conn.execute(
            sa.select(event_outbox.c.subject, event_outbox.c.metadata)
            .where(event_outbox.c.entity_id == order_id).order_by(event_outbox.c.event_id))]


def _inventory_events(engine: sa.Engine, shop: Shop, sku_id: str) -> int:
    """InventoryUpdated rows of the SKU for the shop (every eCom store selling it gets its own)."""
    with engine.connect() as conn:
        return conn.scalar(sa.select(sa.func.count()).select_from(event_outbox).where(
            event_outbox.c.entity_id == sku_id, event_outbox.c.ecom_store_id == shop.id,
            event_outbox.c.subject == events.INVENTORY_UPDATED))


def _problems(response: httpx.Response) -> set[tuple[str, str]]:
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "INVALID_REQUEST"
    return {(problem["path"], problem["code"]) for problem in response.json()["details"]["errors"]}


def _refused(response: httpx.Response, status: int, code: str, document: dict[str, Any]) -> None:
    assert (response.status_code, response.json()["error"]) == (status, code), response.text
    assert_response_matches(document, response)


def _units(line_id: str, quantity: Any) -> dict[str, Any]:
    return {"lineItemId": line_id, "quantity": str(quantity)}


def _sum(documents: list[dict[str, Any]]) -> Decimal:
    return sum((Decimal(doc["grossAmount"]) for doc in documents), Decimal(0))


# --- the lifecycle ------------------------------------------------------------------------------------------

def test_with_payment_capture_a_pick_waits_for_the_payment_before_it_delivers_and_ships(
        engine, operator, web, document, unused_skus) -> None:
    assert _capture_enabled(engine, web)
    first, second = _stocked(web, unused_skus), _stocked(web, unused_skus)
    order = _open_order(web, order_line(first, 3), order_line(second, 2))
    order_id, line_a, line_b = order["id"], order["lineItems"][0]["id"], order["lineItems"][1]["id"]
    opened = {sku.id: _stock(engine, order_id, sku.id) for sku in (first, second)}

    shown = operator.get(order["number"])
    assert shown.status_code == 200 and shown.json() == web.get(f"/orders/{order_id}").json()
    assert_response_matches(document, shown)

    # A pick makes a PENDING capture only: nothing delivered, nothing leaves the warehouse.
    picked = operator.post(order["number"], "pick", {"lines": [_units(line_a, 2)]})
    assert picked.status_code == 200, picked.text
    assert_response_matches(document, picked)
    (capture,) = picked.json()["captures"]
    assert (capture["status"], capture["lines"][0]["lineItemId"], capture["lines"][0]["quantity"]) == (
        "PENDING", line_a, "2")
    assert picked.json()["receipts"] == [] and picked.json()["status"] == "OPEN"
    assert _order_events(engine, order_id)[-1] == (events.ORDER_READY_FOR_PAYMENT_CAPTURE,
                                                   {"captureId": capture["id"]})
    assert _stock(engine, order_id, first.id) == opened[first.id]

    # Its shipment waits for the web shop's report, and a FAILED report keeps it blocked.
    _refused(operator.post(order_id, "ship", {"captureId": capture["id"]}), 409, "CAPTURE_NOT_CONFIRMED", document)
    report_capture(engine, web.tenant_id, web.id, order_id, capture["id"], "FAILED", None)
    _refused(operator.post(order_id, "ship", {"captureId": capture["id"]}), 409, "CAPTURE_NOT_CONFIRMED", document)

    # The failed units are open again; a new capture, CONFIRMED, makes the receipt and invoice.
    again = operator.done(order_id, "pick", {"lines": [_units(line_a, 2)]})["captures"][1]
    report_capture(engine, web.tenant_id, web.id, order_id, again["id"], "CONFIRMED", Decimal(again["grossAmount"]))
    confirmed = operator.get(order_id).json()
    (receipt,), (invoice,) = confirmed["receipts"], confirmed["invoices"]
    assert (receipt["captureId"], invoice["receiptId"], receipt["grossAmount"]) == (
        again["id"], receipt["id"], again["grossAmount"])
    assert confirmed["status"] == "PARTIALLY_DELIVERED"
    assert confirmed["lineItems"][0]["deliveredQuantity"] == "2"
    assert _order_events(engine, order_id)[-1] == (events.ORDER_FULFILLED, None)
    on_hand, reserved = opened[first.id]
    assert _stock(engine, order_id, first.id) == (on_hand - 2, reserved - 2)

    shipped = operator.done(order_id, "ship", {"captureId": again["id"], "carrier": "Bring",
                                               "trackingNumber": "TRK-1"})
    (shipment,) = shipped["shipments"]
    assert (shipment["receiptId"], shipment["carrier"], shipment["trackingNumber"]) == (
        receipt["id"], "Bring", "TRK-1")
    assert _order_events(engine, order_id)[-1] == (events.ORDER_SHIPPED, None)
    _refused(operator.post(order_id, "ship", {"receiptId": receipt["id"]}), 409, "RECEIPT_ALREADY_SHIPPED",
             document)

    # A return: a return invoice and an OPEN refund of the same amounts; the unit is back on hand.
    returned = operator.done(order_id, "returns", {"lines": [_units(line_a, 1)]})
    (return_invoice,), (refund,) = returned["returnInvoices"], returned["refunds"]
    assert (return_invoice["invoiceId"], return_invoice["refundId"], refund["returnInvoiceId"]) == (
        invoice["id"], refund["id"], return_invoice["id"])
    assert (refund["status"], refund["grossAmount"]) == ("OPEN", return_invoice["grossAmount"])
    assert returned["lineItems"][0]["returnedQuantity"] == "1"
    assert _order_events(engine, order_id)[-1] == (events.ORDER_READY_FOR_REFUND, {"refundId": refund["id"]})
    assert _stock(engine, order_id, first.id) == (on_hand - 1, reserved - 2)

    # Cancelling what is undelivered releases its reservation; the order is then DELIVERED.
    inventory_events = _inventory_events(engine, web, second.id)
    after_b = operator.done(order_id, "cancel", {"lines": [_units(line_b, 2)]})
    assert (after_b["lineItems"][1]["cancelledQuantity"], after_b["status"]) == ("2", "PARTIALLY_DELIVERED")
    assert _stock(engine, order_id, second.id) == (opened[second.id][0], opened[second.id][1] - 2)
    assert _inventory_events(engine, web, second.id) == inventory_events + 1
    finished = operator.done(order_id, "cancel")
    assert (finished["lineItems"][0]["cancelledQuantity"], finished["status"]) == ("1", "DELIVERED")
    assert _stock(engine, order_id, first.id) == (on_hand - 1, reserved - 3)
    assert_response_matches(document, operator.get(order_id))


def test_without_payment_capture_a_pick_delivers_at_once_and_a_full_return_refunds_everything(
        engine, operator, business, document, unused_skus) -> None:
    assert not _capture_enabled(engine, business)
    first, second = _stocked(business, unused_skus), _stocked(business, unused_skus)
    order = _open_order(business, order_line(first, 2), order_line(second, 1), freight={"freightAmount": "49"})
    order_id, line_a = order["id"], order["lineItems"][0]["id"]
    opened = {sku.id: _stock(engine, order_id, sku.id) for sku in (first, second)}

    picked = operator.done(order_id, "pick", {"lines": [_units(line_a, 1)]})
    (receipt,), (invoice,) = picked["receipts"], picked["invoices"]
    assert picked["captures"] == [] and (receipt["captureId"], invoice["receiptId"]) == (None, receipt["id"])
    assert receipt["freight"] == {"grossAmount": "49", "vatAmount": "9.8"}  # with the first receipt
    assert picked["status"] == "PARTIALLY_DELIVERED"
    subjects = [subject for subject, _ in _order_events(engine, order_id)]
    assert subjects[-1] == events.ORDER_FULFILLED and events.ORDER_READY_FOR_PAYMENT_CAPTURE not in subjects
    assert _stock(engine, order_id, first.id) == tuple(value - 1 for value in opened[first.id])

    assert operator.done(order_id, "ship", {"receiptId": receipt["id"]})["shipments"][0]["receiptId"] == receipt["id"]
    _refused(operator.post(order_id, "ship", {"receiptId": receipt["id"]}), 409, "RECEIPT_ALREADY_SHIPPED",
             document)

    # No body at all: every open unit. The receipts then add up exactly to the order.
    delivered = operator.done(order_id, "pick")
    assert delivered["status"] == "DELIVERED" and len(delivered["receipts"]) == 2
    assert _sum(delivered["receipts"]) == _sum(delivered["invoices"]) == Decimal(delivered["grossAmount"])
    for sku in (first, second):
        on_hand, reserved = opened[sku.id]
        quantity = 2 if sku is first else 1
        assert _stock(engine, order_id, sku.id) == (on_hand - quantity, reserved - quantity)

    # A full return: per invoice a return invoice and an OPEN refund; together the whole order, freight too.
    returned = operator.done(order_id, "returns")
    assert len(returned["returnInvoices"]) == len(returned["refunds"]) == 2
    assert {doc["invoiceId"] for doc in returned["returnInvoices"]} == {doc["id"] for doc in delivered["invoices"]}
    assert _sum(returned["refunds"]) == Decimal(returned["grossAmount"])
    assert {refund["status"] for refund in returned["refunds"]} == {"OPEN"}
    refund_events = [meta for subject, meta in _order_events(engine, order_id)
                     if subject == events.ORDER_READY_FOR_REFUND]
    assert sorted(meta["refundId"] for meta in refund_events) == sorted(refund["id"] for refund in returned["refunds"])
    for sku in (first, second):
        assert _stock(engine, order_id, sku.id)[0] == opened[sku.id][0]
    _refused(operator.post(order_id, "returns"), 409, "ORDER_NOT_OPEN", document)
    _refused(operator.post(order_id, "pick"), 409, "ORDER_NOT_OPEN", document)
    assert_response_matches(document, operator.get(order_id))


def test_cancelling_a_whole_open_order_releases_its_reservation(engine, operator, web, document, unused_skus) -> None:
    sku = _stocked(web, unused_skus)
    order = _open_order(web, order_line(sku, 4))
    on_hand, reserved = _stock(engine, order["id"], sku.id)
    inventory_events = _inventory_events(engine, web, sku.id)

    cancelled = operator.post(order["number"], "cancel", {})
    assert cancelled.status_code == 200, cancelled.text
    assert_response_matches(document, cancelled)
    assert (cancelled.json()["status"], cancelled.json()["lineItems"][0]["cancelledQuantity"]) == ("CANCELLED", "4")
    assert _stock(engine, order["id"], sku.id) == (on_hand, reserved - 4)
    assert _inventory_events(engine, web, sku.id) == inventory_events + 1
    for action in ("pick", "cancel"):
        _refused(operator.post(order["id"], action), 409, "ORDER_NOT_OPEN", document)


# --- refusals -----------------------------------------------------------------------------------------------

def test_every_problem_of_a_request_comes_with_its_path_and_nothing_changes(operator, business, document,
                                                                            unused_skus) -> None:
    first, second = _stocked(business, unused_skus), _stocked(business, unused_skus)
    order = _open_order(business, order_line(first, 2), order_line(second, 1))
    order_id, line_a, line_b = order["id"], order["lineItems"][0]["id"], order["lineItems"][1]["id"]
    unknown = new_id()

    for action in ("pick", "cancel"):
        response = operator.post(order_id, action, {"lines": [
            _units(line_a, 1), _units(line_a, 1), _units(unknown, 1), _units(line_b, 2)]})
        assert _problems(response) == {("lines[1].lineItemId", "DUPLICATE_LINE_ITEM"),
                                       ("lines[2].lineItemId", "UNKNOWN_LINE_ITEM"),
                                       ("lines[3].quantity", "EXCEEDS_OPEN_QUANTITY")}
        assert_response_matches(document, response)
        response = operator.post(order_id, action, {"lines": [_units(line_a, 0), _units(line_b, -1)]})
        assert _problems(response) == {("lines[0].quantity", "INVALID_VALUE"), ("lines[1].quantity", "INVALID_VALUE")}
        assert _problems(operator.post(order_id, action, {"lines": []})) == {("lines", "INVALID_VALUE")}
        assert _problems(operator.post(order_id, action, {"lines": [{"quantity": "1"}]})) == {
            ("lines[0].lineItemId", "REQUIRED")}
        junk = operator.http.post(f"{operator.base}/{order_id}/{action}", content=b"{not json",
                                  headers={**operator.headers, "Content-Type": "application/json"})
        _refused(junk, 400, "BAD_REQUEST", document)

    # Nothing delivered yet: nothing to return.
    response = operator.post(order_id, "returns", {"lines": [_units(line_a, 1)]})
    assert _problems(response) == {("lines[0].quantity", "EXCEEDS_RETURNABLE_QUANTITY")}
    operator.done(order_id, "pick", {"lines": [_units(line_a, 1)]})
    assert _problems(operator.post(order_id, "returns", {"lines": [_units(line_a, 2)]})) == {
        ("lines[0].quantity", "EXCEEDS_RETURNABLE_QUANTITY")}

    for body in ({}, {"receiptId": new_id(), "captureId": new_id()}):
        response = operator.post(order_id, "ship", body)
        assert _problems(response) == {("captureId", "ONE_OF_REQUIRED")}
        assert_response_matches(document, response)
    _refused(operator.post(order_id, "ship"), 400, "BAD_REQUEST", document)

    held = operator.get(order_id).json()
    assert [(line["deliveredQuantity"], line["cancelledQuantity"]) for line in held["lineItems"]] == [
        ("1", "0"), ("0", "0")]
    assert (len(held["receipts"]), held["shipments"], held["returnInvoices"]) == (1, [], [])


def test_a_backordered_line_is_picked_only_once_the_stock_is_there(engine, operator, business, document,
                                                                   unused_skus) -> None:
    sku = _stocked(business, unused_skus, on_hand=1)
    order = _open_order(business, order_line(sku, 3))
    assert order["lineItems"][0]["reservedQuantity"] == "1"  # the rest is backordered

    short = operator.post(order["id"], "pick")
    _refused(short, 400, "INSUFFICIENT_INVENTORY", document)
    assert short.json()["details"]["skus"] == [{"skuId": sku.id, "skuNumber": sku.number, "quantity": "2"}]
    assert operator.get(order["id"]).json()["receipts"] == []
    adjust_stock(engine, business.tenant_id, "9002", sku.number, delta=Decimal(2))
    assert operator.done(order["id"], "pick")["status"] == "DELIVERED"
    assert _stock(engine, order["id"], sku.id) == (Decimal(0), Decimal(0))


def test_unknown_orders_and_documents_are_404(operator, business, document, unused_skus) -> None:
    order = _open_order(business, order_line(_stocked(business, unused_skus), 1))
    for missing in (new_id(), "999999999", "not-an-order"):
        _refused(operator.get(missing), 404, "NOT_FOUND", document)
        for action in ("pick", "cancel", "returns"):
            _refused(operator.post(missing, action, {}), 404, "NOT_FOUND", document)
        _refused(operator.post(missing, "ship", {"receiptId": new_id()}), 404, "NOT_FOUND", document)
    for body in ({"receiptId": new_id()}, {"captureId": new_id()}):
        _refused(operator.post(order["id"], "ship", body), 404, "NOT_FOUND", document)
    operator.done(order["id"], "pick")
    _refused(operator.post(order["id"], "returns", {"invoiceId": new_id()}), 404, "NOT_FOUND", document)


def test_the_order_routes_take_only_the_tenants_admin_token(http, tenant, shared_other_world, web, cached_token,
                                                            document, unused_skus) -> None:
    order = _open_order(web, order_line(_stocked(web, unused_skus), 1))
    base = f"/admin/v1/tenants/{tenant['id']}/orders/{order['id']}"
    routes = [("GET", base)] + [("POST", f"{base}/{action}") for action in ("pick", "ship", "returns", "cancel")]
    wrong = [cached_token(tenant, client_of(tenant, "ecom")),
             cached_token(shared_other_world, client_of(shared_other_world, "admin"))]
    for method, path in routes:
        response = http.request(method, path, json={})
        _refused(response, 401, "UNAUTHORIZED", document)
        for token in wrong:
            _refused(http.request(method, path, json={}, headers=bearer(token)), 403, "FORBIDDEN", document)
    assert web.get(f"/orders/{order['id']}").json()["captures"] == []


# --- concurrency --------------------------------------------------------------------------------------------

def test_ten_concurrent_picks_of_a_five_unit_line_take_exactly_five(engine, server, operator, business,
                                                                     unused_skus) -> None:
    sku = _stocked(business, unused_skus)
    order = _open_order(business, order_line(sku, 5))
    on_hand, reserved = _stock(engine, order["id"], sku.id)
    body = {"lines": [_units(order["lineItems"][0]["id"], 1)]}
    start, answers = threading.Barrier(10), []

    def pick() -> None:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            start.wait()
            response = client.post(f"{operator.base}/{order['id']}/pick", json=body, headers=operator.headers)
            answers.append((response.status_code, response.json().get("error")))

    threads = [threading.Thread(target=pick) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert Counter(status for status, _ in answers)[200] == 5, answers
    assert {(status, error) for status, error in answers if status != 200} <= {
        (400, "INVALID_REQUEST"), (409, "ORDER_NOT_OPEN")}
    held = operator.get(order["id"]).json()
    assert (held["status"], held["lineItems"][0]["deliveredQuantity"], len(held["receipts"])) == ("DELIVERED", "5", 5)
    assert len({receipt["number"] for receipt in held["receipts"]}) == 5
    after = _stock(engine, order["id"], sku.id)
    assert after == (on_hand - 5, reserved - 5) and after[1] <= after[0]


# --- `pia admin order` --------------------------------------------------------------------------------------

def test_an_operator_moves_orders_from_the_command_line_with_and_without_a_server(tmp_path) -> None:
    """On an embedded file, the case --url is for: `pia serve` holds it, so the commands go through its API."""
    settings = Settings(data_dir=tmp_path)
    engine = create_engine(settings)
    upgrade(engine)
    world = seed_demo_tenant(engine, "order desk", is_test=True)
    tenant_id, web_store, admin = world["id"], client_of(world, "ecom")["resource"], client_of(world, "admin")
    sku = next(row for row in Shop(None, engine, world, "", 0).skus() if row.price)  # type: ignore[arg-type]
    adjust_stock(engine, tenant_id, "9001", sku.number, on_hand=Decimal(10))
    opened, waiting = (create_order(engine, tenant_id, web_store, CreateOrder.model_validate(
        new_order(order_line(sku, quantity)))).order for quantity in (3, 2))
    assert process_order(engine, tenant_id, opened.id)
    line_id = read_order(engine, tenant_id, None, opened.id).lines[0].id
    engine.dispose()  # an embedded file is held by one process at a time
    env = {**os.environ, "PIA_DATA_DIR": str(tmp_path), "PIA_DATABASE_URL": "", "PIA_ADMIN_URL": "",
           "PIA_ADMIN_CLIENT_ID": admin["clientId"], "PIA_ADMIN_CLIENT_SECRET": admin["clientSecret"]}

    def pia(*args: str, url: str | None = None, expect: int = 0) -> subprocess.CompletedProcess:
        done = subprocess.run([PIA, "admin", "order", *args, "--tenant", tenant_id, *(("--url", url) if url else ())],
                              env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == expect, done.stdout + done.stderr
        return done

    # Directly on the database: the order not processed yet is cancelled whole, nothing reserved for it.
    assert json.loads(pia("cancel", waiting.number).stdout)["status"] == "CANCELLED"

    server = Served(env)
    try:
        picked = json.loads(pia("pick", opened.id, "--line", f"{line_id}=2", url=server.url).stdout)
        (capture,) = picked["captures"]
        assert (capture["status"], capture["lines"][0]["quantity"]) == ("PENDING", "2")
        assert json.loads(pia("show", opened.number, url=server.url).stdout) == picked
        refused = pia("ship", opened.number, "--capture", capture["id"], url=server.url, expect=1)
        assert json.loads(refused.stderr)["error"] == "CAPTURE_NOT_CONFIRMED"
    finally:
        server.stop()
    assert ("POST", "/admin/v1/tenants/<tenantId>/orders/<orderIdOrNumber>/pick") in server.requests()

    # The server is gone: on the database again, the unit left open is cancelled; the capture's stay reserved.
    rest = json.loads(pia("cancel", opened.number).stdout)
    assert [(item["cancelledQuantity"], item["reservedQuantity"]) for item in rest["lineItems"]] == [("1", "2")]
    assert process_order(engine, tenant_id, waiting.id) is False  # processing passes the cancelled order by
    assert read_order(engine, tenant_id, None, waiting.id).order.status == "CANCELLED"
    engine.dispose()


@pytest.mark.parametrize(("arguments", "complaint"), [
    (("pick", "--line", "01a20a4f-c35c-742a-a143-6c0de849e123"), "is not LINE_ITEM_ID=QTY"),
    (("return", "--line", "=2"), "is not LINE_ITEM_ID=QTY"),
    (("cancel", "--line", "01a20a4f-c35c-742a-a143-6c0de849e123="), "is not LINE_ITEM_ID=QTY"),
    (("ship",), "exactly one of --receipt and --capture"),
    (("ship", "--receipt", "r", "--capture", "c"), "exactly one of --receipt and --capture")])
def test_malformed_order_commands_are_usage_errors(arguments: tuple[str, ...], complaint: str) -> None:
    command, *options = arguments
    result = CliRunner().invoke(main, ["admin", "order", command, "1001", "--tenant", new_id(), *options],
                                env={"PIA_DATA_DIR": "/nonexistent", "PIA_ADMIN_URL": ""})
    assert result.exit_code == 2 and complaint in result.output, result.output
