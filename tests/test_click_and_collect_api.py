"""Click and collect over real HTTP on both backends: store stock first, warehouse fallback, all or nothing,
the network and assortment rules, validation paths, InventoryUpdated in the outbox, and no overselling under
concurrency (reserved never exceeds on hand, checked after every concurrent test); then the parked cart's life
through the admin API: read, collected, cancelled, short after a count, each end once, with its events."""

import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from contracts.events import INVENTORY_UPDATED
from contracts.rendering import decimal
from db.ids import new_id
from db.schema import (
    click_and_collect_lines,
    click_and_collect_reservations,
    ecom_stores,
    event_outbox,
    retail_stores,
    stock_levels,
    stock_reservations,
)
from serving.demo import seed_demo_tenant
from tests.catalogue_builder import Builder
from tests.conftest import bearer, client_of
from tests.openapi_check import assert_response_matches
from tests.stock_checks import assert_stock_is_true


@dataclass
class Scene:
    """A tenant of its own: eCom store 2001 sells assortment A from warehouses W1 (priority 1) and W2 (priority 2);
    its network is the released retail stores of company 10 (1001-1003; 1004 is not released). Each test adds the
    SKUs it needs with `sku`, so tests do not share stock."""

    world: dict[str, Any]
    builder: Builder
    ecom_store: str
    assortment: str
    locations: dict[str, str] = field(default_factory=dict)

    def sku(self, number: str, in_assortment: bool = True, **stock: str) -> str:
        """A new SKU (under a new product) with on hand at locations by name, e.g. sku("X", **{"1001": "3"})."""
        b = self.builder
        product_id = b.product(number)
        sku_id = b.sku(product_id, number, assortment_ids=(self.assortment,) if in_assortment else ())
        for location, on_hand in stock.items():
            b.stock(self.locations[location], sku_id, on_hand)
        return sku_id


@pytest.fixture(scope="module")
def scene(engine: sa.Engine) -> Scene:
    world = seed_demo_tenant(engine, f"click and collect {new_id()}", is_test=False, shop=False)
    b = Builder(engine, world["id"])
    ecom_store = next(store["id"] for store in world["ecomStores"] if store["number"] == "2001")
    with engine.connect() as conn:
        company = conn.scalar(sa.select(ecom_stores.c.company_id).where(ecom_stores.c.tenant_id == world["id"],
                                                                        ecom_stores.c.id == ecom_store))
    assortment = b.assortment("CC-A")
    b.set_ecom_store(ecom_store, base_assortment_id=assortment)
    scene = Scene(world, b, ecom_store, assortment)
    for number in ("1001", "1002", "1003", "1004"):
        scene.locations[number] = b.id_of(retail_stores, number)
    for number, priority in (("W1", 1), ("W2", 2)):
        scene.locations[number] = b.warehouse(company, number)
        b.serves(ecom_store, scene.locations[number], priority)
    # A retail store of another company of the tenant: outside 2001's network.
    other_company = b.company("20", "NOK")
    scene.locations["2099"] = b._add(retail_stores, company_id=other_company, number="2099", name="Elsewhere",
                                     released=True)
    return scene


class BackOffice:
    """The admin API's click and collect routes and stock counts, with the scene's admin token."""

    def __init__(self, http: httpx.Client, scene: Scene, token: str) -> None:
        self.http, self.headers = http, bearer(token)
        self.base = f"/admin/v1/tenants/{scene.world['id']}"

    def cart(self, parked_cart_id: str, action: str = "", document: dict[str, Any] | None = None) -> httpx.Response:
        path = f"{self.base}/click_and_collect/{parked_cart_id}" + (f"/{action}" if action else "")
        response = self.http.post(path, headers=self.headers) if action else self.http.get(path, headers=self.headers)
        if document is not None:
            assert_response_matches(document, response)
        return response

    def count(self, location: str, sku_number: str, on_hand: str) -> httpx.Response:
        return self.http.post(f"{self.base}/stock_adjustments", headers=self.headers,
                              json={"locationNumber": location, "skuNumber": sku_number, "onHand": on_hand})


class Shop:
    def __init__(self, http: httpx.Client, scene: Scene, token: str) -> None:
        self.http, self.scene, self.headers = http, scene, bearer(token)
        self.prefix = f"/v1/tenants/{scene.world['id']}/ecom_stores/{scene.ecom_store}"

    def reserve(self, body: Any, document: dict[str, Any] | None = None) -> httpx.Response:
        response = self.http.post(self.prefix + "/click_and_collect", json=body, headers=self.headers)
        if document is not None:
            assert_response_matches(document, response)
        return response


@pytest.fixture(scope="module")
def document(server) -> dict[str, Any]:
    with httpx.Client(base_url=server.url) as client:
        return client.get("/v1/openapi.json").json()


@pytest.fixture
def shop(http, cached_token, scene: Scene) -> Shop:
    client = client_of(scene.world, "ecom", index=0)
    assert client["resource"] == scene.ecom_store  # the demo's clients follow store numbers
    return Shop(http, scene, cached_token(scene.world, client))


@pytest.fixture
def back_office(http, cached_token, scene: Scene) -> BackOffice:
    return BackOffice(http, scene, cached_token(scene.world, client_of(scene.world, "admin")))


def _body(scene: Scene, store: str, *lines: tuple[str, Any], **more: Any) -> dict[str, Any]:
    return {"retailStoreId": scene.locations[store], "reservationName": "Kari Nordmann", "customerId": None,
            "lineItems": [{"skuId": sku_id, "quantity": quantity} for sku_id, quantity in lines], **more}


def _stock(engine: sa.Engine, scene: Scene, sku_id: str) -> dict[str, tuple[str, str]]:
    """(on hand, reserved) per location name for the SKU."""
    names = {location_id: name for name, location_id in scene.locations.items()}
    with engine.connect() as conn:
        rows = conn.execute(sa.select(stock_levels).where(stock_levels.c.tenant_id == scene.world["id"],
                                                          stock_levels.c.sku_id == sku_id))
        return {names[row.location_id]: (decimal(row.on_hand), decimal(row.reserved)) for row in rows}


def _inventory_events(engine: sa.Engine, scene: Scene, sku_id: str) -> int:
    with engine.connect() as conn:
        return conn.scalar(sa.select(sa.func.count()).select_from(event_outbox).where(
            event_outbox.c.tenant_id == scene.world["id"], event_outbox.c.ecom_store_id == scene.ecom_store,
            event_outbox.c.subject == INVENTORY_UPDATED, event_outbox.c.entity_id == sku_id))


def _reservations(engine: sa.Engine, scene: Scene) -> int:
    with engine.connect() as conn:
        return conn.scalar(sa.select(sa.func.count()).select_from(click_and_collect_reservations)
                           .where(click_and_collect_reservations.c.tenant_id == scene.world["id"]))


def _assert_never_oversold(engine: sa.Engine, scene: Scene) -> None:
    with engine.connect() as conn:
        oversold = conn.execute(sa.select(stock_levels).where(stock_levels.c.tenant_id == scene.world["id"],
                                                              stock_levels.c.reserved > stock_levels.c.on_hand)).all()
    assert oversold == []
    assert_stock_is_true(engine, scene.world["id"])


# --- where a line is reserved ---------------------------------------------------------------------------


def test_reserves_from_the_stores_own_stock(shop: Shop, scene: Scene, engine, document) -> None:
    jacket = scene.sku("CC-JACKET", **{"1001": "5", "W1": "50"})
    scarf = scene.sku("CC-SCARF", **{"1001": "1"})
    response = shop.reserve(_body(scene, "1001", (jacket, 2), (scarf, "1")), document)
    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["reservationName"], body["retailStoreId"], body["retailStoreName"]) == (
        "Kari Nordmann", scene.locations["1001"], "Fjordmarked Bergen Sentrum")
    assert body["parkedCartId"] != body["cartId"]
    assert [(line["skuId"], line["skuNumber"], line["productName"], line["quantity"], line["reservedFromWarehouse"])
            for line in body["lineItems"]] == [(jacket, "CC-JACKET", "Product CC-JACKET", "2", False),
                                               (scarf, "CC-SCARF", "Product CC-SCARF", "1", False)]
    assert _stock(engine, scene, jacket) == {"1001": ("5", "2"), "W1": ("50", "0")}
    assert _stock(engine, scene, scarf) == {"1001": ("1", "1")}
    with engine.connect() as conn:
        held = conn.execute(sa.select(click_and_collect_reservations).where(
            click_and_collect_reservations.c.tenant_id == scene.world["id"],
            click_and_collect_reservations.c.id == body["parkedCartId"])).one()
        lines = conn.execute(sa.select(click_and_collect_lines).where(
            click_and_collect_lines.c.tenant_id == scene.world["id"],
            click_and_collect_lines.c.reservation_id == body["parkedCartId"])
            .order_by(click_and_collect_lines.c.line_number)).all()
    assert (held.cart_id, held.retail_store_id, held.customer_id) == (body["cartId"], scene.locations["1001"], None)
    assert [(line.id, line.sku_id, line.location_id) for line in lines] == [
        (body["lineItems"][0]["cartLineId"], jacket, scene.locations["1001"]),
        (body["lineItems"][1]["cartLineId"], scarf, scene.locations["1001"])]


def test_falls_back_to_the_first_serving_warehouse_that_has_it(shop: Shop, scene: Scene, engine, document) -> None:
    # The store has 1 (not the 3 wanted), W1 (priority 1) has 2, W2 has 10: the whole line comes from W2.
    lamp = scene.sku("CC-LAMP", **{"1002": "1", "W1": "2", "W2": "10"})
    response = shop.reserve(_body(scene, "1002", (lamp, 3)), document)
    assert response.status_code == 201, response.text
    assert [(line["quantity"], line["reservedFromWarehouse"]) for line in response.json()["lineItems"]] == [
        ("3", True)]
    assert _stock(engine, scene, lamp) == {"1002": ("1", "0"), "W1": ("2", "0"), "W2": ("10", "3")}


def test_lines_of_one_sku_share_what_is_available(shop: Shop, scene: Scene, engine, document) -> None:
    vase = scene.sku("CC-VASE", **{"1003": "2", "W1": "5"})
    response = shop.reserve(_body(scene, "1003", (vase, 2), (vase, 2)), document)
    assert response.status_code == 201, response.text
    assert [line["reservedFromWarehouse"] for line in response.json()["lineItems"]] == [False, True]
    assert _stock(engine, scene, vase) == {"1003": ("2", "2"), "W1": ("5", "2")}


def test_reserved_stock_is_no_longer_available(shop: Shop, scene: Scene, engine) -> None:
    mug = scene.sku("CC-MUG", **{"1001": "3"})
    assert shop.reserve(_body(scene, "1001", (mug, 3))).status_code == 201
    refused = shop.reserve(_body(scene, "1001", (mug, 1)))
    assert (refused.status_code, refused.json()["error"]) == (400, "INSUFFICIENT_INVENTORY")


# --- refusals reserve nothing ----------------------------------------------------------------------------


def test_insufficient_anywhere_names_the_skus_and_reserves_nothing(shop: Shop, scene: Scene, engine,
                                                                   document) -> None:
    plenty = scene.sku("CC-PLENTY", **{"1001": "10"})
    short = scene.sku("CC-SHORT", **{"1001": "1", "W1": "1", "W2": "1"})
    none = scene.sku("CC-NONE")
    before = _reservations(engine, scene)
    response = shop.reserve(_body(scene, "1001", (plenty, 4), (short, 2), (none, 1)), document)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"] == "INSUFFICIENT_INVENTORY"
    assert body["details"]["skus"] == [{"skuId": short, "skuNumber": "CC-SHORT", "quantity": "2"},
                                       {"skuId": none, "skuNumber": "CC-NONE", "quantity": "1"}]
    assert "CC-SHORT" in body["message"] and "CC-NONE" in body["message"]
    assert _stock(engine, scene, plenty) == {"1001": ("10", "0")}
    assert _stock(engine, scene, short) == {"1001": ("1", "0"), "W1": ("1", "0"), "W2": ("1", "0")}
    assert _reservations(engine, scene) == before
    assert _inventory_events(engine, scene, plenty) == 0


@pytest.mark.parametrize("store", ["1004", "2099", "W1", "unknown"])
def test_a_store_outside_the_network_is_refused(shop: Shop, scene: Scene, engine, document, store: str) -> None:
    """1004 is not released, 2099 belongs to another company, W1 is a warehouse; none is in the network."""
    sku_id = scene.sku(f"CC-NET-{store}", **{"W1": "5", **({"1004": "5"} if store == "1004" else {})})
    body = _body(scene, "1001", (sku_id, 1))
    body["retailStoreId"] = scene.locations.get(store, new_id())
    response = shop.reserve(body, document)
    assert (response.status_code, response.json()["error"]) == (400, "RETAIL_STORE_NOT_IN_NETWORK"), response.text
    assert all(reserved == "0" for _, reserved in _stock(engine, scene, sku_id).values())


def test_another_tenants_store_and_customer_are_unknown_here(shop: Shop, scene: Scene, engine, shared_other_world,
                                                            cached_token, http) -> None:
    """The other tenant's store 1001 is in its own network, not in this one; its customers are not ours."""
    sku_id = scene.sku("CC-TENANT", **{"1001": "5"})
    with engine.connect() as conn:
        their_store = conn.scalar(sa.select(retail_stores.c.id).where(
            retail_stores.c.tenant_id == shared_other_world["id"], retail_stores.c.number == "1001"))
    body = _body(scene, "1001", (sku_id, 1))
    body["retailStoreId"] = their_store
    response = shop.reserve(body)
    assert (response.status_code, response.json()["error"]) == (400, "RETAIL_STORE_NOT_IN_NETWORK"), response.text

    their_shop = client_of(shared_other_world, "ecom")
    their_customer = new_id()
    created = http.put(f"/v1/tenants/{shared_other_world['id']}/ecom_stores/{their_shop['resource']}/customers/"
                       f"{their_customer}", json={"firstName": "Ola", "lastName": "Nordmann"},
                       headers=bearer(cached_token(shared_other_world, their_shop)))
    assert created.status_code == 201, created.text
    response = shop.reserve(_body(scene, "1001", (sku_id, 1), customerId=their_customer))
    assert (response.status_code, response.json()["error"]) == (404, "CUSTOMER_NOT_FOUND"), response.text
    assert _stock(engine, scene, sku_id) == {"1001": ("5", "0")}

def test_a_sku_outside_the_assortment_is_not_found(shop: Shop, scene: Scene, engine, document) -> None:
    sold = scene.sku("CC-SOLD", **{"1001": "5"})
    outside = scene.sku("CC-OUTSIDE", in_assortment=False, **{"1001": "5"})
    unknown = new_id()
    response = shop.reserve(_body(scene, "1001", (sold, 1), (outside, 1), (unknown, 1)), document)
    assert response.status_code == 404, response.text
    body = response.json()
    assert (body["error"], body["details"]["skuIds"]) == ("SKU_NOT_FOUND", [outside, unknown])
    assert outside in body["message"]
    assert _stock(engine, scene, sold) == {"1001": ("5", "0")}


def test_an_unknown_customer_is_not_found_and_a_known_one_is_kept(shop: Shop, scene: Scene, engine,
                                                                   document) -> None:
    sku_id = scene.sku("CC-CUSTOMER", **{"1001": "5"})
    missing = shop.reserve(_body(scene, "1001", (sku_id, 1), customerId=new_id()), document)
    assert (missing.status_code, missing.json()["error"]) == (404, "CUSTOMER_NOT_FOUND"), missing.text
    assert _stock(engine, scene, sku_id) == {"1001": ("5", "0")}

    customer_id = new_id()
    created = shop.http.put(f"{shop.prefix}/customers/{customer_id}", headers=shop.headers,
                            json={"firstName": "Kari", "lastName": "Nordmann"})
    assert created.status_code == 201, created.text
    response = shop.reserve(_body(scene, "1001", (sku_id, 1), customerId=customer_id), document)
    assert response.status_code == 201, response.text
    with engine.connect() as conn:
        assert conn.scalar(sa.select(click_and_collect_reservations.c.customer_id).where(
            click_and_collect_reservations.c.tenant_id == scene.world["id"],
            click_and_collect_reservations.c.id == response.json()["parkedCartId"])) == customer_id


def test_every_validation_problem_is_listed_with_its_path(shop: Shop, scene: Scene, document) -> None:
    response = shop.reserve({"reservationName": " ", "customerId": 5, "lineItems": [
        {"skuId": new_id(), "quantity": 0}, {"quantity": "1.5"}, {"skuId": new_id(), "quantity": True},
        {"skuId": new_id(), "quantity": 10_001}, {"skuId": new_id(), "quantity": 2.5},
        {"skuId": "bad\u0000id", "quantity": 1}, {"skuId": "", "quantity": 1}]}, document)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"] == "INVALID_REQUEST"
    assert {(error["path"], error["code"]) for error in body["details"]["errors"]} == {
        ("retailStoreId", "REQUIRED"), ("reservationName", "INVALID_TEXT"), ("customerId", "INVALID_TYPE"),
        ("lineItems[0].quantity", "INVALID_QUANTITY"), ("lineItems[1].skuId", "REQUIRED"),
        ("lineItems[1].quantity", "INVALID_QUANTITY"), ("lineItems[2].quantity", "INVALID_QUANTITY"),
        ("lineItems[3].quantity", "INVALID_QUANTITY"), ("lineItems[4].quantity", "INVALID_QUANTITY"),
        ("lineItems[5].skuId", "INVALID_ID"), ("lineItems[6].skuId", "INVALID_ID")}
    empty = shop.reserve({"retailStoreId": new_id(), "reservationName": "x", "lineItems": []}, document)
    assert {(error["path"]) for error in empty.json()["details"]["errors"]} == {"lineItems"}
    not_json = shop.http.post(shop.prefix + "/click_and_collect", content=b"{",
                              headers={**shop.headers, "Content-Type": "application/json"})
    assert_response_matches(document, not_json)
    assert (not_json.status_code, not_json.json()["error"]) == (400, "BAD_REQUEST")


def test_a_reservation_writes_inventory_updated_per_sku(shop: Shop, scene: Scene, engine) -> None:
    first, second = scene.sku("CC-EVT-1", **{"1001": "2"}), scene.sku("CC-EVT-2", **{"W2": "2"})
    assert shop.reserve(_body(scene, "1001", (first, 1), (second, 1), (first, 1))).status_code == 201
    assert (_inventory_events(engine, scene, first), _inventory_events(engine, scene, second)) == (1, 1)


# --- concurrency ------------------------------------------------------------------------------------------


def _race(server_url: str, shop: Shop, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    """Send the bodies at once, each from its own connection."""
    return _at_once(server_url, [(shop.prefix + "/click_and_collect", body, shop.headers) for body in bodies])


def _at_once(server_url: str, requests: list[tuple[str, Any, dict[str, str]]]) -> list[httpx.Response]:
    """POST each (path, JSON body, headers) at once, each from its own connection; the answers in that order."""
    start = threading.Barrier(len(requests))
    answers: list[httpx.Response | None] = [None] * len(requests)

    def send(index: int) -> None:
        path, body, headers = requests[index]
        with httpx.Client(base_url=server_url, timeout=120) as client:
            start.wait()
            answers[index] = client.post(path, json=body, headers=headers)

    threads = [threading.Thread(target=send, args=(index,)) for index in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(answer is not None for answer in answers)
    return [answer for answer in answers if answer is not None]


def test_fifty_concurrent_reservations_of_ten_units_reserve_exactly_ten(server, shop: Shop, scene: Scene,
                                                                         engine) -> None:
    # 12 on hand, 2 already reserved: 10 remain, at the store.
    sku_id = scene.sku("CC-RACE", **{"1001": "12"})
    assert shop.reserve(_body(scene, "1001", (sku_id, 2))).status_code == 201
    answers = _race(server.url, shop, [_body(scene, "1001", (sku_id, 1)) for _ in range(50)])
    assert Counter(answer.status_code for answer in answers) == {201: 10, 400: 40}, [a.text for a in answers]
    assert {answer.json()["error"] for answer in answers if answer.status_code == 400} == {"INSUFFICIENT_INVENTORY"}
    assert _stock(engine, scene, sku_id) == {"1001": ("12", "12")}
    with engine.connect() as conn:
        held = conn.scalar(sa.select(sa.func.sum(click_and_collect_lines.c.quantity)).where(
            click_and_collect_lines.c.tenant_id == scene.world["id"], click_and_collect_lines.c.sku_id == sku_id))
    assert held == Decimal(12)
    _assert_never_oversold(engine, scene)


def test_concurrent_reservations_of_crossing_skus_neither_deadlock_nor_oversell(server, shop: Shop, scene: Scene,
                                                                               engine) -> None:
    """Lines name two SKUs in both orders, from store and warehouse: locks are taken in one order, so no deadlock."""
    a = scene.sku("CC-CROSS-A", **{"1002": "6", "W1": "6"})
    b = scene.sku("CC-CROSS-B", **{"1002": "6", "W1": "6"})
    bodies = [_body(scene, "1002", *(((a, 1), (b, 1)) if n % 2 else ((b, 1), (a, 1)))) for n in range(20)]
    answers = _race(server.url, shop, bodies)
    assert Counter(answer.status_code for answer in answers) == {201: 12, 400: 8}, [a.text for a in answers]
    assert _stock(engine, scene, a) == _stock(engine, scene, b) == {"1002": ("6", "6"), "W1": ("6", "6")}
    _assert_never_oversold(engine, scene)



def test_fifty_reservations_racing_a_document_load_and_a_count_lose_nothing(server, shop: Shop, scene: Scene,
                                                                            back_office: BackOffice, engine) -> None:
    """One SKU at one store, 30 on hand: 50 carts of one unit, a back-office document setting on hand to 40 and a
    count of 20 at once. Whatever order they take, every cart answered 201 holds its unit (reserved, or short when
    a count took it back), nothing else holds any, and reserved is what the rows say."""
    sku_id = scene.sku("CC-STORM", **{"1001": "30"})
    load = (f"{back_office.base}/backoffice",
            {"stock": [{"locationNumber": "1001", "skuNumber": "CC-STORM", "onHand": "40"}]}, back_office.headers)
    count = (f"{back_office.base}/stock_adjustments",
             {"locationNumber": "1001", "skuNumber": "CC-STORM", "onHand": "20"}, back_office.headers)
    carts = [(shop.prefix + "/click_and_collect", _body(scene, "1001", (sku_id, 1)), shop.headers)
             for _ in range(50)]
    *answers, loaded, counted = _at_once(server.url, [*carts, load, count])
    assert (loaded.status_code, counted.status_code) == (200, 200), (loaded.text, counted.text)
    assert {answer.status_code for answer in answers} <= {201, 400}, [a.text for a in answers]
    assert {answer.json()["error"] for answer in answers if answer.status_code == 400} <= {"INSUFFICIENT_INVENTORY"}
    made = [answer.json()["parkedCartId"] for answer in answers if answer.status_code == 201]
    assert 20 <= len(made) <= 40  # at least what the lower count leaves, at most what the larger one does

    with engine.connect() as conn:
        held = conn.execute(sa.select(click_and_collect_reservations.c.id).where(
            click_and_collect_reservations.c.tenant_id == scene.world["id"],
            click_and_collect_reservations.c.id.in_(made))).scalars().all()
        units = dict(conn.execute(
            sa.select(stock_reservations.c.state, sa.func.sum(stock_reservations.c.quantity))
            .where(stock_reservations.c.tenant_id == scene.world["id"], stock_reservations.c.sku_id == sku_id)
            .group_by(stock_reservations.c.state)).all())
    assert sorted(held) == sorted(made)  # every cart answered 201 is there, and no refused one
    assert sum(units.values()) == len(made) and set(units) <= {"ACTIVE", "SHORT"}  # one unit per cart, none lost
    taken_back = sum(Decimal(item["quantity"]) for answer in (loaded, counted) for item in answer.json()["released"])
    assert units.get("SHORT", 0) == taken_back
    on_hand, reserved = _stock(engine, scene, sku_id)["1001"]
    assert on_hand in ("20", "40") and Decimal(reserved) == units.get("ACTIVE", 0) <= Decimal(on_hand)
    _assert_never_oversold(engine, scene)


# --- the parked cart's life (admin API) -----------------------------------------------------------------------


def _reserved(shop: Shop, body: dict[str, Any]) -> dict[str, Any]:
    response = shop.reserve(body)
    assert response.status_code == 201, response.text
    return response.json()


def _lines(cart: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(location number, quantity, reserved, short, collected) of each line."""
    return [(line["locationNumber"], line["quantity"], line["reservedQuantity"], line["shortQuantity"],
             line["collectedQuantity"]) for line in cart["lineItems"]]


def test_the_back_office_reads_a_cart_by_its_parked_cart_id(shop: Shop, back_office: BackOffice, scene: Scene,
                                                            document) -> None:
    coat, hat = scene.sku("CC-LIFE-COAT", **{"1001": "4"}), scene.sku("CC-LIFE-HAT", **{"W2": "3"})
    made = _reserved(shop, _body(scene, "1001", (coat, 2), (hat, 1)))
    response = back_office.cart(made["parkedCartId"], document=document)
    assert response.status_code == 200, response.text
    cart = response.json()
    # The reservation as it was answered, and more.
    assert {key: cart[key] for key in made if key != "lineItems"} == {key: made[key] for key in made
                                                                      if key != "lineItems"}
    assert [{key: line[key] for key in made_line} for line, made_line in zip(cart["lineItems"], made["lineItems"],
                                                                             strict=True)] == made["lineItems"]
    assert (cart["state"], cart["endedAt"], cart["ecomStoreId"], cart["customerId"]) == (
        "ACTIVE", None, scene.ecom_store, None)
    assert datetime.fromisoformat(cart["expiresAt"]) - datetime.fromisoformat(cart["createdAt"]) == timedelta(hours=72)
    assert _lines(cart) == [("1001", "2", "2", "0", "0"), ("W2", "1", "1", "0", "0")]
    assert [(line["locationId"], line["locationName"]) for line in cart["lineItems"]] == [
        (scene.locations["1001"], "Fjordmarked Bergen Sentrum"), (scene.locations["W2"], "Warehouse W2")]
    for unknown in (new_id(), "not-a-cart"):
        missing = back_office.cart(unknown, document=document)
        assert (missing.status_code, missing.json()["error"]) == (404, "NOT_FOUND")


def test_collecting_takes_the_goods_out_of_stock_once(shop: Shop, back_office: BackOffice, scene: Scene, engine,
                                                      document) -> None:
    coat, hat = scene.sku("CC-COLLECT-COAT", **{"1002": "5"}), scene.sku("CC-COLLECT-HAT", **{"W1": "4"})
    made = _reserved(shop, _body(scene, "1002", (coat, 2), (hat, 3)))
    assert (_stock(engine, scene, coat), _stock(engine, scene, hat)) == ({"1002": ("5", "2")}, {"W1": ("4", "3")})
    events = (_inventory_events(engine, scene, coat), _inventory_events(engine, scene, hat))

    collected = back_office.cart(made["parkedCartId"], "collect", document)
    assert collected.status_code == 200, collected.text
    assert collected.json()["state"] == "COLLECTED" and collected.json()["expiresAt"] is None
    assert _lines(collected.json()) == [("1002", "2", "0", "0", "2"), ("W1", "3", "0", "0", "3")]
    assert (_stock(engine, scene, coat), _stock(engine, scene, hat)) == ({"1002": ("3", "0")}, {"W1": ("1", "0")})
    after = (_inventory_events(engine, scene, coat), _inventory_events(engine, scene, hat))
    assert after == (events[0] + 1, events[1] + 1)

    again = back_office.cart(made["parkedCartId"], "collect", document)
    assert (again.status_code, again.json()) == (200, collected.json())  # the same answer, nothing changed
    assert (_stock(engine, scene, coat), _stock(engine, scene, hat)) == ({"1002": ("3", "0")}, {"W1": ("1", "0")})
    assert (_inventory_events(engine, scene, coat), _inventory_events(engine, scene, hat)) == after
    refused = back_office.cart(made["parkedCartId"], "cancel", document)
    assert refused.status_code == 409, refused.text
    assert (refused.json()["error"], refused.json()["details"]) == ("CART_NOT_ACTIVE", {"state": "COLLECTED"})
    assert_stock_is_true(engine, scene.world["id"])


def test_cancelling_releases_the_cart_and_a_cancelled_cart_cannot_be_collected(
        shop: Shop, back_office: BackOffice, scene: Scene, engine, document) -> None:
    scarf = scene.sku("CC-CANCEL", **{"1003": "2"})
    made = _reserved(shop, _body(scene, "1003", (scarf, 2)))
    events = _inventory_events(engine, scene, scarf)
    cancelled = back_office.cart(made["parkedCartId"], "cancel", document)
    assert (cancelled.status_code, cancelled.json()["state"]) == (200, "CANCELLED"), cancelled.text
    assert _lines(cancelled.json()) == [("1003", "2", "0", "0", "0")]
    assert _stock(engine, scene, scarf) == {"1003": ("2", "0")}  # released: on hand stays
    assert _inventory_events(engine, scene, scarf) == events + 1
    assert back_office.cart(made["parkedCartId"], "cancel").json() == cancelled.json()
    assert _inventory_events(engine, scene, scarf) == events + 1
    refused = back_office.cart(made["parkedCartId"], "collect", document)
    assert (refused.status_code, refused.json()["details"]) == (409, {"state": "CANCELLED"}), refused.text
    assert _stock(engine, scene, scarf) == {"1003": ("2", "0")}
    # What was released is for sale again.
    assert shop.reserve(_body(scene, "1003", (scarf, 2))).status_code == 201


def test_a_count_below_reserved_makes_the_newest_cart_lines_short(shop: Shop, back_office: BackOffice,
                                                                   scene: Scene, engine, document) -> None:
    """The count is a fact: accepted, not refused; the shortfall comes from the newest reservations first."""
    boot = scene.sku("CC-SHORT-BOOT", **{"1001": "3"})
    older = _reserved(shop, _body(scene, "1001", (boot, 2)))
    newer = _reserved(shop, _body(scene, "1001", (boot, 1)))
    counted = back_office.count("1001", "CC-SHORT-BOOT", "1")
    assert counted.status_code == 200, counted.text
    assert_response_matches(document, counted)
    level = counted.json()
    assert (level["onHand"], level["reserved"], level["available"], level["changed"]) == ("1", "1", "0", True)
    cart_line = {cart["parkedCartId"]: cart["lineItems"][0]["cartLineId"] for cart in (older, newer)}
    assert level["released"] == [
        {"ownerType": "CART_LINE", "parkedCartId": cart_id, "cartLineId": cart_line[cart_id],
         "locationId": scene.locations["1001"], "skuId": boot, "quantity": "1"}
        for cart_id in (newer["parkedCartId"], older["parkedCartId"])]
    assert _lines(back_office.cart(newer["parkedCartId"]).json()) == [("1001", "1", "0", "1", "0")]
    assert _lines(back_office.cart(older["parkedCartId"]).json()) == [("1001", "2", "1", "1", "0")]
    assert_stock_is_true(engine, scene.world["id"])

    # The customer collects what is there; the cart whose line is all short collects nothing.
    assert _lines(back_office.cart(older["parkedCartId"], "collect").json()) == [("1001", "2", "0", "1", "1")]
    assert _lines(back_office.cart(newer["parkedCartId"], "collect").json()) == [("1001", "1", "0", "1", "0")]
    assert _stock(engine, scene, boot) == {"1001": ("0", "0")}
    assert_stock_is_true(engine, scene.world["id"])
