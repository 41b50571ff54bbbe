"""Orders over real HTTP on both backends: SPEC.md's nine creation rules with their error paths and codes,
amounts, asynchronous acceptance (RECEIVED, then OPEN with stock reserved and events written), duplicates under
concurrency, reads, the customer's order history, and processing after a restart."""

import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from contracts.orders import CreateOrder
from db.ids import new_id
from db.order_processing import process_order
from db.orders import create_order
from db.schema import (
    assortment_lines,
    ecom_stores,
    event_outbox,
    orders,
    skus,
    stock_levels,
    warehouses,
)
from db.stock import adjust_stock
from serving.app import create_app
from serving.demo import seed_demo_tenant
from tests.conftest import LiveServer, bearer, client_of, free_port, get_token, wait_for, without_upload_workers
from tests.openapi_check import assert_response_matches
from tests.web_shop import ADDRESS, Shop, accepted_order, new_order, opened_order, order_line

PIA = str(Path(sys.executable).parent / "pia")

def _money(value: Decimal) -> Decimal:
    return value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def _errors(response: httpx.Response) -> set[tuple[str, str]]:
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "INVALID_REQUEST"
    return {(error["path"], error["code"]) for error in response.json()["details"]["errors"]}


def _stock(engine: sa.Engine, tenant_id: str, warehouse_number: str, sku_id: str) -> tuple[Decimal, Decimal]:
    with engine.connect() as conn:
        row = conn.execute(sa.select(stock_levels.c.on_hand, stock_levels.c.reserved)
                           .join(warehouses, warehouses.c.id == stock_levels.c.location_id)
                           .where(stock_levels.c.tenant_id == tenant_id, warehouses.c.number == warehouse_number,
                                  stock_levels.c.sku_id == sku_id)).first()
    return (row.on_hand, row.reserved) if row else (Decimal(0), Decimal(0))


def _events(engine: sa.Engine, tenant_id: str, entity_ids: list[str]) -> Counter:
    with engine.connect() as conn:
        return Counter((row.ecom_store_id, row.subject, row.entity_id) for row in conn.execute(
            sa.select(event_outbox).where(event_outbox.c.tenant_id == tenant_id,
                                          event_outbox.c.entity_id.in_(entity_ids))))


def test_a_realistic_order_is_accepted_received_then_opened_with_stock_reserved(shop: Shop, document) -> None:
    regular = shop.regular_sku()
    normal = shop.campaign_skus("VINTERSALG")[0]
    three = shop.campaign_skus("TA3BETAL2")[0]
    for sku in (regular, normal, three):
        adjust_stock(shop.engine, shop.tenant_id, "9001", sku.number, on_hand=Decimal(100))
    before = {sku.id: _stock(shop.engine, shop.tenant_id, "9001", sku.id)[1] for sku in (regular, normal, three)}
    blended = _money(three.campaign_price * 2 / 3)
    body = new_order(
        {**order_line(regular, 2), "netUnitOrderDiscountAmount": "10.50"},
        {"skuId": normal.id, "quantity": "1", "netUnitPrice": float(normal.campaign_price), "vatRate": 25,
         "campaignCode": "VINTERSALG"},
        {"skuNumber": three.number, "quantity": 3, "netUnitPrice": str(blended), "vatRate": "25",
         "campaignCode": "TA3BETAL2"},
        invoiceAddress={k: v for k, v in ADDRESS.items() if k not in ("name", "phone")},
        freight={"freightAmount": "59", "shippingMethodName": "Posten", "providerData": "{\"opaque\": 1}"})
    response = shop.post(body)
    assert response.status_code == 202, response.text
    assert_response_matches(document, response)
    order = response.json()
    assert response.headers["Location"].endswith(f"{shop.prefix}/orders/{order['id']}")
    assert order["status"] == "RECEIVED"
    assert order["currencyIsoCode"] == "NOK"
    assert order["deliveryDate"] == (datetime.now(UTC).date() + timedelta(days=2)).isoformat()
    assert all(order[name] == [] for name in ("captures", "receipts", "shipments", "invoices", "returnInvoices",
                                              "refunds", "vouchers"))
    # Amounts by hand: prices include VAT, VAT 25 % is a fifth of the gross.
    grosses = [_money(2 * (regular.price - Decimal("10.50"))), _money(normal.campaign_price), _money(3 * blended)]
    vats = [_money(gross / 5) for gross in grosses]
    lines = order["lineItems"]
    assert [Decimal(line["grossAmount"]) for line in lines] == grosses
    assert [Decimal(line["vatAmount"]) for line in lines] == vats
    assert [line["priceType"] for line in lines] == ["REGULAR", "CAMPAIGN", "CAMPAIGN"]
    assert [line["campaignId"] for line in lines] == [None, normal.campaign_id, three.campaign_id]
    assert order["freight"] == {"freightAmount": "59", "shippingMethodName": "Posten",
                                "providerData": "{\"opaque\": 1}", "grossAmount": "59", "vatAmount": "11.8"}
    assert Decimal(order["grossAmount"]) == sum(grosses) + 59
    assert Decimal(order["vatAmount"]) == sum(vats) + Decimal("11.80")
    assert Decimal(order["netAmount"]) == Decimal(order["grossAmount"]) - Decimal(order["vatAmount"])

    opened = opened_order(shop, order["id"])
    assert_response_matches(document, shop.get(f"/orders/{order['id']}"))
    assert [line["reservedQuantity"] for line in opened["lineItems"]] == ["2", "1", "3"]
    for sku, quantity in ((regular, 2), (normal, 1), (three, 3)):
        assert _stock(shop.engine, shop.tenant_id, "9001", sku.id)[1] == before[sku.id] + quantity
    events = _events(shop.engine, shop.tenant_id, [order["id"], regular.id, normal.id, three.id])
    assert events[(shop.id, "OrderCreated", order["id"])] == 1
    assert all(events[(shop.id, "InventoryUpdated", sku.id)] >= 1 for sku in (regular, normal, three))


def test_stock_comes_from_the_first_warehouse_that_has_all_and_else_is_partly_backordered(shop: Shop) -> None:
    first, second = shop.regular_sku(1), shop.regular_sku(2)
    for number, sku, count in (("9001", first, 5), ("9001", second, 0), ("9002", first, 5), ("9002", second, 5)):
        adjust_stock(shop.engine, shop.tenant_id, number, sku.number, on_hand=_stock(
            shop.engine, shop.tenant_id, number, sku.id)[1] + count)
    order = accepted_order(shop, new_order(order_line(first, 2), order_line(second, 1)))
    assert [line["reservedQuantity"] for line in opened_order(shop, order["id"])["lineItems"]] == ["2", "1"]
    assert _stock(shop.engine, shop.tenant_id, "9002", second.id) == _stock(shop.engine, shop.tenant_id, "9002",
                                                                           second.id)
    on_hand, reserved = _stock(shop.engine, shop.tenant_id, "9002", first.id)
    assert on_hand - reserved == 3  # 9001 lacks the second SKU, so 9002 serves the whole order

    # Nowhere enough: the first warehouse reserves what it has, never more than on hand.
    short = accepted_order(shop, new_order(order_line(second, 9)))
    assert opened_order(shop, short["id"])["lineItems"][0]["reservedQuantity"] == "0"
    on_hand, reserved = _stock(shop.engine, shop.tenant_id, "9001", second.id)
    assert reserved <= on_hand


def test_every_structural_problem_comes_in_one_answer_with_its_path(shop: Shop, document) -> None:
    response = shop.post({"deliveryAddress": {"street": "x"}, "lineItems": [
        {"quantity": 0, "netUnitPrice": "abc", "vatRate": "101"}, {"skuNumber": "1", "quantity": 1}]})
    assert {path for path, _ in _errors(response)} == {
        "externalOrderId", "externalOrderNumber", "deliveryAddress.postCode", "deliveryAddress.city",
        "deliveryAddress.countryIsoCode", "lineItems[0].skuId", "lineItems[0].quantity", "lineItems[0].netUnitPrice",
        "lineItems[0].vatRate", "lineItems[1].netUnitPrice", "lineItems[1].vatRate"}
    assert ("lineItems[0].skuId", "REQUIRED") in _errors(response)
    assert_response_matches(document, response)
    assert {path for path, _ in _errors(shop.post(new_order()))} == {"lineItems"}  # rule 1: at least one line
    unparseable = shop.http.post(shop.prefix + "/orders", content=b"{not json",
                                 headers={**shop.headers, "Content-Type": "application/json"})
    assert (unparseable.status_code, unparseable.json()["error"]) == (400, "BAD_REQUEST")


def test_skus_outside_the_assortment_are_404_naming_them(shop: Shop, document) -> None:
    with shop.engine.connect() as conn:
        outside = conn.scalar(sa.select(skus.c.number).where(
            skus.c.tenant_id == shop.tenant_id, skus.c.number.not_in([row.number for row in shop.skus()]))
            .order_by(skus.c.number).limit(1))
    unknown_id = new_id()
    response = shop.post(new_order(order_line(shop.regular_sku()), {"skuNumber": outside, "quantity": 1,
                                                            "netUnitPrice": "10", "vatRate": "25"},
                                {"skuId": unknown_id, "quantity": 1, "netUnitPrice": "10", "vatRate": "25"}))
    assert (response.status_code, response.json()["error"]) == (404, "SKU_NOT_FOUND")
    assert outside in response.json()["message"] and unknown_id in response.json()["message"]
    assert_response_matches(document, response)


def test_the_customer_is_the_given_one_or_the_stores_default(shop: Shop, business: Shop, document) -> None:
    sku = shop.regular_sku()
    response = shop.post(new_order(order_line(sku), customerId=new_id()))
    assert (response.status_code, response.json()["error"]) == (404, "CUSTOMER_NOT_FOUND")
    assert_response_matches(document, response)
    with shop.engine.connect() as conn:
        default = conn.scalar(sa.select(ecom_stores.c.default_customer_id).where(ecom_stores.c.id == shop.id))
    assert default and accepted_order(shop, new_order(order_line(sku)))["customerId"] == default
    # The business shop has no default customer: customerId is then required.
    assert _errors(business.post(new_order(order_line(sku)))) == {("customerId", "REQUIRED")}
    order = accepted_order(business, new_order(order_line(sku), customerId=default))
    assert order["deliveryDate"] == (datetime.now(UTC).date() + timedelta(days=5)).isoformat()


def test_campaign_codes_must_apply_and_their_prices_must_hold(shop: Shop, document) -> None:
    normal, three = shop.campaign_skus("VINTERSALG")[0], shop.campaign_skus("TA3BETAL2")[0]
    unreleased, ended = shop.campaign_skus("BLACKWEEK")[0], shop.campaign_skus("HOSTSALG")[0]
    response = shop.post(new_order(
        order_line(unreleased, campaignCode="BLACKWEEK"),
        order_line(ended, campaignCode="HOSTSALG"),
        order_line(shop.regular_sku(), campaignCode="VINTERSALG"),
        order_line(normal, price=normal.campaign_price + 1, campaignCode="VINTERSALG"),
        order_line(three, price=three.campaign_price + Decimal("0.01"), campaignCode="TA3BETAL2"),
        order_line(normal, price=normal.campaign_price, campaignCode="VINTERSALG")))
    assert _errors(response) == {
        ("lineItems[0].campaignCode", "CAMPAIGN_NOT_APPLICABLE"),
        ("lineItems[1].campaignCode", "CAMPAIGN_NOT_APPLICABLE"),
        ("lineItems[2].campaignCode", "CAMPAIGN_NOT_APPLICABLE"),
        ("lineItems[3].netUnitPrice", "CAMPAIGN_PRICE_MISMATCH"),
        ("lineItems[4].netUnitPrice", "ABOVE_NORMAL_PRICE")}
    assert_response_matches(document, response)
    with shop.engine.connect() as conn:  # nothing half-stored
        assert conn.scalar(sa.select(sa.func.count()).select_from(orders).where(
            orders.c.external_order_id == response.request.read().decode().split('"')[3])) == 0


def test_without_a_code_only_an_exact_unambiguous_match_is_a_campaign_and_the_legacy_shape_is_recorded(
        shop: Shop) -> None:
    normal = shop.campaign_skus("VINTERSALG")[0]
    listed = next(row for row in shop.skus() if row.id == normal.id)
    markdown = listed.price - normal.campaign_price
    order = accepted_order(shop, new_order(
        order_line(normal, price=normal.campaign_price),  # matches the campaign exactly
        order_line(normal, price=normal.campaign_price - 1),  # matches nothing: a plain sale
        order_line(normal, price=listed.price, netUnitOrderDiscountAmount=str(markdown)),  # the legacy shape
        order_line(normal, price=listed.price, netUnitOrderDiscountAmount="1")))  # a coupon on the list price
    lines = order["lineItems"]
    assert [(line["priceType"], line["campaignId"]) for line in lines] == [
        ("CAMPAIGN", normal.campaign_id), ("REGULAR", None), ("LEGACY_DISCOUNT", None), ("REGULAR", None)]
    assert lines[2]["grossAmount"] == lines[0]["grossAmount"]


def test_discounts_above_the_price_and_mismatched_sku_keys_are_refused(shop: Shop) -> None:
    one, other = shop.regular_sku(), shop.regular_sku(1)
    assert _errors(shop.post(new_order(order_line(one, netUnitOrderDiscountAmount=str(one.price + 1)),
                                    {**order_line(one), "skuId": one.id, "skuNumber": other.number}))) == {
        ("lineItems[0].netUnitOrderDiscountAmount", "DISCOUNT_ABOVE_PRICE"), ("lineItems[1].skuNumber", "SKU_MISMATCH")}


def test_a_repeated_external_id_or_number_is_409_naming_the_order(shop: Shop, document) -> None:
    body = new_order(order_line(shop.regular_sku()))
    first = accepted_order(shop, body)
    for repeat in (body, {**body, "externalOrderNumber": "other"}, {**body, "externalOrderId": new_id()}):
        response = shop.post(repeat)
        assert (response.status_code, response.json()["error"]) == (409, "DUPLICATE_ORDER")
        assert response.json()["details"] == {"existingOrderId": first["id"]}
    assert_response_matches(document, response)


def test_fifty_concurrent_creates_of_one_order_make_exactly_one(shop: Shop, server) -> None:
    body = new_order(order_line(shop.regular_sku()))
    start, statuses = threading.Barrier(50), []

    def create() -> None:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            start.wait()
            response = client.post(shop.prefix + "/orders", json=body, headers=shop.headers)
            statuses.append((response.status_code, response.json().get("details", {}).get("existingOrderId")))

    threads = [threading.Thread(target=create) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with shop.engine.connect() as conn:
        ids = list(conn.scalars(sa.select(orders.c.id).where(orders.c.tenant_id == shop.tenant_id,
                                                             orders.c.external_order_id == body["externalOrderId"])))
    assert Counter(status for status, _ in statuses) == {202: 1, 409: 49}
    assert len(ids) == 1 and {existing for status, existing in statuses if status == 409} == {ids[0]}


def test_the_answer_is_the_order_as_stored(shop: Shop) -> None:
    normal = shop.campaign_skus("VINTERSALG")[0]
    created = accepted_order(shop, new_order(
        order_line(shop.regular_sku(), 3, netUnitOrderDiscountAmount="1.25"),
        order_line(normal, price=normal.campaign_price, campaignCode="VINTERSALG"),
        invoiceAddress={k: v for k, v in ADDRESS.items() if k != "phone"},
        freight={"freightAmount": "59.5", "shippingMethodName": "Posten"}))
    stored = shop.get(f"/orders/{created['id']}").json()

    def unprocessed(order: dict[str, Any]) -> dict[str, Any]:  # what opening the order may have changed since
        return {**order, "status": None, "lineItems": [{**line, "reservedQuantity": None}
                                                       for line in order["lineItems"]]}

    assert unprocessed(created) == unprocessed(stored)


def test_concurrent_creations_take_consecutive_numbers(shop: Shop, server) -> None:
    sku = shop.regular_sku()
    bodies = [new_order(order_line(sku)) for _ in range(12)]
    start, answers = threading.Barrier(24), []

    def create(body: dict[str, Any]) -> None:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            start.wait()
            answers.append(client.post(shop.prefix + "/orders", json=body, headers=shop.headers))

    # Each order twice at once: a loser's number goes back with its transaction.
    threads = [threading.Thread(target=create, args=(body,)) for body in bodies * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert Counter(answer.status_code for answer in answers) == {202: 12, 409: 12}
    numbers = sorted(int(answer.json()["number"]) for answer in answers if answer.status_code == 202)
    assert numbers == list(range(numbers[0], numbers[0] + 12))


def test_reads_by_id_or_number_only_for_the_owning_store(shop: Shop, business: Shop, document) -> None:
    order = accepted_order(shop, new_order(order_line(shop.regular_sku())))
    by_number = shop.get(f"/orders/{order['number']}")
    assert by_number.status_code == 200 and by_number.json()["id"] == order["id"]
    assert_response_matches(document, by_number)
    for path in (f"/orders/{order['id']}", f"/orders/{order['number']}"):
        response = business.get(path)
        assert (response.status_code, response.json()["error"]) == (404, "NOT_FOUND")
        assert_response_matches(document, response)
    assert shop.get(f"/orders/{new_id()}").status_code == 404


def test_a_customers_history_is_newest_first_and_only_the_calling_stores(shop: Shop, business: Shop,
                                                                         document) -> None:
    customer_id = new_id()
    assert shop.http.put(f"{shop.prefix}/customers/{customer_id}", json={"firstName": "Ola", "lastName": "Dahl"},
                         headers=shop.headers).status_code == 201
    sku = shop.regular_sku()
    made = [accepted_order(shop, new_order(order_line(sku), customerId=customer_id)) for _ in range(3)]
    accepted_order(business, new_order(order_line(sku), customerId=customer_id))
    response = shop.get(f"/customers/{customer_id}/orders")
    assert_response_matches(document, response)
    assert [item["id"] for item in response.json()["items"]] == [order["id"] for order in reversed(made)]
    assert response.json()["items"][0] == {key: made[-1][key] for key in (
        "id", "number", "externalOrderId", "externalOrderNumber", "orderDate", "status", "grossAmount",
        "currencyIsoCode")} | {"status": response.json()["items"][0]["status"]}  # RECEIVED or OPEN by now
    unknown = shop.get(f"/customers/{new_id()}/orders")
    assert (unknown.status_code, unknown.json()["error"]) == (404, "CUSTOMER_NOT_FOUND")
    assert_response_matches(document, unknown)


def _left_received(engine: sa.Engine, name: str, count: int = 1) -> tuple[dict[str, Any], str, sa.Row, list[str]]:
    """A tenant with `count` orders of 4 units of one SKU stored RECEIVED by the store function with no processor
    running, as a process killed after answering 202 leaves them; the world, its shop, the SKU, the order ids."""
    world = seed_demo_tenant(engine, name, is_test=False)
    store_id = client_of(world, "ecom")["resource"]
    with engine.connect() as conn:
        sku = conn.execute(sa.select(skus.c.id, skus.c.number).join(
            assortment_lines, assortment_lines.c.sku_id == skus.c.id).where(skus.c.tenant_id == world["id"],
                                                                   skus.c.product_id.is_not(None))
            .order_by(skus.c.number).limit(1)).one()
    adjust_stock(engine, world["id"], "9001", sku.number,
                 on_hand=_stock(engine, world["id"], "9001", sku.id)[1] + 4 * count)
    held = [create_order(engine, world["id"], store_id, CreateOrder.model_validate(
        new_order({"skuId": sku.id, "quantity": 4, "netUnitPrice": "100", "vatRate": "25"}))) for _ in range(count)]
    assert {order.order.status for order in held} == {"RECEIVED"}
    return world, store_id, sku, [order.order.id for order in held]


def test_an_order_left_received_is_processed_once_by_a_fresh_server(own_store) -> None:
    settings, engine = own_store
    world, store_id, sku, (order_id,) = _left_received(engine, "restart")
    on_hand, reserved_before = _stock(engine, world["id"], "9001", sku.id)

    port = free_port()
    live = LiveServer(create_app(without_upload_workers(settings), engine, issuer=f"http://127.0.0.1:{port}"), port)
    live.start()
    try:
        with httpx.Client(base_url=live.url, timeout=30) as http:
            headers = bearer(get_token(http, world, client_of(world, "ecom")))
            path = f"/v1/tenants/{world['id']}/ecom_stores/{store_id}/orders/{order_id}"
            wait_for(lambda: http.get(path, headers=headers).json()["status"] == "OPEN", 10, "processing")
    finally:
        live.stop()
    assert process_order(engine, world["id"], order_id) is False  # a second processor finds it done
    assert _stock(engine, world["id"], "9001", sku.id) == (on_hand, reserved_before + 4)
    assert _events(engine, world["id"], [order_id])[(store_id, "OrderCreated", order_id)] == 1


def test_two_pia_workers_share_received_orders_and_reserve_each_once(backend: str, own_store) -> None:
    if backend != "postgresql":
        pytest.skip("`pia worker` runs beside the server on PostgreSQL; DuckDB has one owning process")
    settings, engine = own_store
    world, store_id, sku, order_ids = _left_received(engine, "workers", count=20)
    on_hand, reserved_before = _stock(engine, world["id"], "9001", sku.id)
    env = {**os.environ, "PIA_DATABASE_URL": settings.database_url, "PIA_DATA_DIR": str(settings.data_dir),
           "PIA_SECRET_KEY": settings.secret_key.get_secret_value(), "PIA_WORKER_POLL_SECONDS": "0.1"}
    workers = [subprocess.Popen([PIA, "worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for _ in range(2)]
    try:
        def all_open() -> bool:
            with engine.connect() as conn:
                return set(conn.scalars(sa.select(orders.c.status).where(orders.c.id.in_(order_ids)))) == {"OPEN"}

        wait_for(all_open, 60, "the workers to open every order")
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=30)
    assert _stock(engine, world["id"], "9001", sku.id) == (on_hand, reserved_before + 4 * 20)
    events = _events(engine, world["id"], order_ids)
    assert [events[(store_id, "OrderCreated", order_id)] for order_id in order_ids] == [1] * 20
