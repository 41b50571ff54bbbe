"""Issue 16's attack sequences over real HTTP on both backends: a back-office load that overwrote pia's own
reservations, and a click and collect cart that locked a store's stock for good. Each step's stock is read back
through the web shop's inventory route, and every reservation row is checked to explain what is reserved."""

import json
from decimal import Decimal
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from contracts.admin import StockLevel
from db.ids import new_id
from db.schema import retail_stores
from serving.demo import seed_demo_tenant
from tests.conftest import bearer, client_of
from tests.stock_checks import assert_stock_is_true
from tests.web_shop import Shop, accepted_order, new_order, opened_order, order_line


@pytest.fixture(scope="module")
def tenant(engine: sa.Engine) -> dict[str, Any]:
    """This module's own tenant (the demo's test catalogue), so no other test touches its stock."""
    return seed_demo_tenant(engine, f"stock attacks {new_id()}", is_test=True)


class BackOffice:
    def __init__(self, http: httpx.Client, tenant: dict[str, Any], token: str) -> None:
        self.http, self.headers = http, {**bearer(token), "Content-Type": "application/json"}
        self.base = f"/admin/v1/tenants/{tenant['id']}"

    def post(self, path: str, body: Any = None) -> dict[str, Any]:
        response = self.http.post(self.base + path, headers=self.headers,
                                  content=b"" if body is None else json.dumps(body).encode())
        assert response.status_code == 200, response.text
        return response.json()


@pytest.fixture
def back_office(http, tenant, cached_token) -> BackOffice:
    return BackOffice(http, tenant, cached_token(tenant, client_of(tenant, "admin")))


@pytest.fixture
def web(http, engine, tenant, cached_token) -> Shop:
    """The web shop: a default customer, warehouses 9001 then 9002, the click and collect network 1001-1003."""
    return Shop(http, engine, tenant, cached_token(tenant, client_of(tenant, "ecom")), 0)


def _stock_document(sku_number: str, **on_hand: str) -> dict[str, Any]:
    """The stock part of a back-office document as the issue sent it: with a `reserved` of 0."""
    return {"stock": [{"locationNumber": location, "skuNumber": sku_number, "onHand": quantity, "reserved": "0"}
                      for location, quantity in on_hand.items()]}


def _at(web: Shop, sku: sa.Row, location: str) -> tuple[str, str, str]:
    """(on hand, reserved, available) at the location, as the web shop's inventory route answers."""
    response = web.get(f"/skus/{sku.id}/inventory")
    assert response.status_code == 200, response.text
    found = next(row for row in response.json()["locations"] if row["locationNumber"] == location)
    return found["onHand"], found["reserved"], found["available"]


def test_loading_the_same_document_again_keeps_the_reservations_made_in_between(
        web: Shop, back_office: BackOffice, engine, tenant) -> None:
    """Load {onHand 20, reserved 0}; an order of 3 opens; the same document again changes nothing (it wrote reserved
    0 over the order's 3, so cancelling took reserved to -3 and an order of 23 was reserved whole). A cart at a store
    survives the reload too."""
    sku = web.regular_sku(3)
    document = _stock_document(sku.number, **{"9001": "20", "9002": "0", "1001": "5"})
    assert back_office.post("/backoffice", document)["changed"] is True
    order = opened_order(web, accepted_order(web, new_order(order_line(sku, 3)))["id"])
    assert order["lineItems"][0]["reservedQuantity"] == "3"
    with engine.connect() as conn:
        store_1001 = conn.scalar(sa.select(retail_stores.c.id).where(retail_stores.c.tenant_id == tenant["id"],
                                                                     retail_stores.c.number == "1001"))
    cart = web.http.post(f"{web.prefix}/click_and_collect", headers=web.headers, json={
        "retailStoreId": store_1001, "reservationName": "Kari", "lineItems": [{"skuId": sku.id, "quantity": 2}]})
    assert cart.status_code == 201, cart.text
    assert (_at(web, sku, "9001"), _at(web, sku, "1001")) == (("20", "3", "17"), ("5", "2", "3"))

    again = back_office.post("/backoffice", document)
    assert (again["changed"], again["counts"]["stock"]) == (False, {"created": 0, "updated": 0, "unchanged": 3})
    assert (_at(web, sku, "9001"), _at(web, sku, "1001")) == (("20", "3", "17"), ("5", "2", "3"))
    assert_stock_is_true(engine, tenant["id"])

    cancelled = back_office.post(f"/orders/{order['id']}/cancel")
    assert cancelled["status"] == "CANCELLED"
    assert _at(web, sku, "9001") == ("20", "0", "20")
    bigger = opened_order(web, accepted_order(web, new_order(order_line(sku, 23)))["id"])
    assert bigger["lineItems"][0]["reservedQuantity"] == "20"  # 3 wait for stock: never more than on hand
    assert _at(web, sku, "9001") == ("20", "20", "0")
    assert_stock_is_true(engine, tenant["id"])


def test_a_document_without_reserved_is_accepted_and_one_with_it_changes_no_reservation(
        web: Shop, back_office: BackOffice, engine, tenant) -> None:
    sku = web.regular_sku(4)
    without = {"stock": [{"locationNumber": "9001", "skuNumber": sku.number, "onHand": "6"},
                         {"locationNumber": "9002", "skuNumber": sku.number, "onHand": "0"}]}
    assert back_office.post("/backoffice", without)["changed"] is True
    assert _at(web, sku, "9001") == ("6", "0", "6")
    opened_order(web, accepted_order(web, new_order(order_line(sku, 2)))["id"])
    with_reserved = _stock_document(sku.number, **{"9001": "6"})
    with_reserved["stock"][0]["reserved"] = "5"  # ignored: reserved is the service's figure
    assert back_office.post("/backoffice", with_reserved)["changed"] is False
    assert _at(web, sku, "9001") == ("6", "2", "4")
    assert_stock_is_true(engine, tenant["id"])


def test_a_cart_cannot_lock_a_stores_stock_for_good(web: Shop, back_office: BackOffice, engine, tenant) -> None:
    """A cart reserving everything at a store used to stay forever, and a count below it was refused
    (BELOW_RESERVED). Now the count is accepted and takes the shortfall back, and the store ends the cart."""
    sku = web.regular_sku(5)
    back_office.post("/backoffice", _stock_document(sku.number, **{"1002": "4", "9001": "0", "9002": "0"}))
    with web.engine.connect() as conn:
        store = conn.scalar(sa.select(retail_stores.c.id).where(retail_stores.c.tenant_id == tenant["id"],
                                                                retail_stores.c.number == "1002"))

    def reserve(quantity: int) -> httpx.Response:
        return web.http.post(f"{web.prefix}/click_and_collect", headers=web.headers, json={
            "retailStoreId": store, "reservationName": "Ola", "lineItems": [{"skuId": sku.id, "quantity": quantity}]})

    locking = reserve(4)
    assert locking.status_code == 201, locking.text
    assert reserve(1).status_code == 400  # everything is reserved
    counted = back_office.post("/stock_adjustments", {"locationNumber": "1002", "skuNumber": sku.number,
                                                      "onHand": "1"})
    assert (counted["onHand"], counted["reserved"], counted["available"]) == ("1", "1", "0")
    assert [(item["ownerType"], item["parkedCartId"], item["quantity"]) for item in counted["released"]] == [
        ("CART_LINE", locking.json()["parkedCartId"], "3")]
    cart = back_office.post(f"/click_and_collect/{locking.json()['parkedCartId']}/cancel")
    assert (cart["state"], cart["lineItems"][0]["shortQuantity"]) == ("CANCELLED", "3")
    assert _at(web, sku, "1002") == ("1", "0", "1")
    assert reserve(1).status_code == 201  # the store sells again
    assert_stock_is_true(engine, tenant["id"])


def test_a_count_below_an_orders_reservation_sends_its_open_units_back_to_backorder(
        web: Shop, back_office: BackOffice, engine, tenant) -> None:
    """Two orders reserve 3 and 2 of 5; a count of 1 takes 2 back from the newer order and 2 from the older; the
    newer order's units picked into a pending capture are never taken back."""
    sku = web.regular_sku(6)
    back_office.post("/backoffice", _stock_document(sku.number, **{"9001": "5", "9002": "0"}))
    older = opened_order(web, accepted_order(web, new_order(order_line(sku, 3)))["id"])
    newer = opened_order(web, accepted_order(web, new_order(order_line(sku, 2)))["id"])
    picked = back_office.post(f"/orders/{newer['id']}/pick", {"lines": [
        {"lineItemId": newer["lineItems"][0]["id"], "quantity": "1"}]})
    assert picked["captures"][0]["status"] == "PENDING"
    counted = back_office.post("/stock_adjustments", {"locationNumber": "9001", "skuNumber": sku.number,
                                                      "onHand": "1"})
    assert [(item["orderNumber"], item["quantity"]) for item in counted["released"]] == [
        (newer["number"], "1"), (older["number"], "3")]
    assert [(item["ownerType"], item["orderId"], item["lineItemId"]) for item in counted["released"]] == [
        ("ORDER_LINE", order["id"], order["lineItems"][0]["id"]) for order in (newer, older)]
    StockLevel.model_validate(counted)  # the answer's documented shape
    assert (counted["onHand"], counted["reserved"]) == ("1", "1")  # the picked unit stays reserved
    reserved = {order["id"]: order["lineItems"][0]["reservedQuantity"]
                for order in (web.get(f"/orders/{older['id']}").json(), web.get(f"/orders/{newer['id']}").json())}
    assert reserved == {older["id"]: "0", newer["id"]: "1"}
    assert_stock_is_true(engine, tenant["id"])
    # Stock arrives: picking the backorder reserves it then (the rule of README "Orders: the lifecycle").
    back_office.post("/stock_adjustments", {"locationNumber": "9001", "skuNumber": sku.number, "onHandDelta": "3"})
    repicked = back_office.post(f"/orders/{older['id']}/pick")
    assert [capture["lines"][0]["quantity"] for capture in repicked["captures"]] == ["3"]
    assert _at(web, sku, "9001") == ("4", "4", "0")
    assert Decimal(web.get(f"/orders/{older['id']}").json()["lineItems"][0]["reservedQuantity"]) == 3
    assert_stock_is_true(engine, tenant["id"])
