"""The web shop's payment and refund reports over real HTTP on both backends (ECOMMERCE.md "Payment and refund
reports"): CONFIRMED with the exact amount makes the receipt and invoice (captures) or closes the refund, FAILED is
recorded and blocks shipment, a repeated report changes nothing, a different one on a completed document is 409.
The back office's side (picking, returning) is driven through the store here; its admin API has tests of its own."""

import threading
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from contracts.errors import CaptureNotConfirmed
from db import fulfilment, returns
from db.schema import ecom_stores, event_outbox
from db.stock import adjust_stock
from tests.conftest import bearer
from tests.openapi_check import assert_response_matches
from tests.web_shop import Shop, accepted_order, new_order, opened_order, order_line


def _open_order(shop: Shop, *quantities: int) -> dict[str, Any]:
    """An OPEN order of the shop, one line per quantity, with freight, its SKUs in stock at every warehouse, for
    the web shop's default customer (the business shop has none)."""
    skus = _regular_skus(shop)[:len(quantities)]
    with shop.engine.connect() as conn:
        customer_id = conn.scalar(sa.select(ecom_stores.c.default_customer_id)
                                  .where(ecom_stores.c.tenant_id == shop.tenant_id,
                                         ecom_stores.c.default_customer_id.is_not(None)))
    for sku in skus:
        for warehouse in ("9001", "9002"):
            adjust_stock(shop.engine, shop.tenant_id, warehouse, sku.number, on_hand=Decimal(1000))
    lines = (order_line(sku, quantity) for sku, quantity in zip(skus, quantities, strict=True))
    order = accepted_order(shop, new_order(*lines, freight={"freightAmount": "49"}, customerId=customer_id))
    return opened_order(shop, order["id"])


_REGULAR_SKUS: dict[tuple[str, str], list[Any]] = {}


def _regular_skus(shop: Shop) -> list[Any]:
    """The first SKUs no campaign covers (finding them takes seconds on PostgreSQL: kept per store and database)."""
    key = (str(shop.engine.url), shop.id)
    if key not in _REGULAR_SKUS:
        _REGULAR_SKUS[key] = [shop.regular_sku(skip) for skip in range(3)]
    return _REGULAR_SKUS[key]


def _picked(shop: Shop, order: dict[str, Any], quantities: dict[int, int] | None = None) -> dict[str, Any]:
    """Pick `quantities` (line index → units; everything open without) and return the new capture."""
    lines = None if quantities is None else [
        SimpleNamespace(lineItemId=order["lineItems"][index]["id"], quantity=Decimal(units))
        for index, units in quantities.items()]
    fulfilment.pick(shop.engine, shop.tenant_id, order["id"], lines)
    return shop.get(f"/orders/{order['id']}").json()["captures"][-1]


def _report(shop: Shop, order_id: str, capture_id: str, body: Any) -> httpx.Response:
    return shop.http.post(f"{shop.prefix}/orders/{order_id}/captures/{capture_id}/payment_capture", json=body,
                          headers=shop.headers)


def _order_events(shop: Shop, order_id: str) -> list[tuple[str, str | None]]:
    with shop.engine.connect() as conn:
        return [(row.subject, row.metadata) for row in conn.execute(
            sa.select(event_outbox.c.subject, event_outbox.c.metadata)
            .where(event_outbox.c.tenant_id == shop.tenant_id, event_outbox.c.entity_id == order_id)
            .order_by(event_outbox.c.datetime, event_outbox.c.event_id))]


def test_a_confirmed_capture_makes_its_receipt_and_invoice_and_a_repeat_changes_nothing(shop: Shop,
                                                                                          document) -> None:
    order = _open_order(shop, 3, 1)
    capture = _picked(shop, order, {0: 2})
    assert capture["status"] == "PENDING" and capture["capturedAmount"] is None
    # The first capture carries the freight; the line's share is pro rata, 2 of 3 units.
    line = order["lineItems"][0]
    share = (Decimal(line["grossAmount"]) * 2 / 3).quantize(Decimal("0.01"))
    assert Decimal(capture["grossAmount"]) == share + 49
    assert capture["freight"] == {"grossAmount": "49", "vatAmount": "9.8"}

    response = _report(shop, order["id"], capture["id"], {"status": "CONFIRMED",
                                                          "capturedAmount": float(capture["grossAmount"])})
    assert response.status_code == 200, response.text
    assert_response_matches(document, response)
    confirmed = response.json()
    assert confirmed["status"] == "CONFIRMED" and confirmed["completedTime"]
    assert Decimal(confirmed["capturedAmount"]) == Decimal(capture["grossAmount"])
    after = shop.get(f"/orders/{order['id']}").json()
    [receipt], [invoice] = after["receipts"], after["invoices"]
    assert receipt["captureId"] == capture["id"] and invoice["receiptId"] == receipt["id"]
    for made in (receipt, invoice):
        assert (made["lines"], made["grossAmount"], made["vatAmount"]) == (
            capture["lines"], capture["grossAmount"], capture["vatAmount"])
    assert after["status"] == "PARTIALLY_DELIVERED"
    assert after["lineItems"][0]["deliveredQuantity"] == "2"
    events = _order_events(shop, order["id"])
    assert [subject for subject, _ in events].count("OrderFulfilled") == 1

    again = _report(shop, order["id"], capture["id"], {"status": "CONFIRMED",
                                                       "capturedAmount": f"{Decimal(capture['grossAmount']):.4f}"})
    assert again.status_code == 200 and again.json() == confirmed
    assert shop.get(f"/orders/{order['id']}").json() == after
    assert _order_events(shop, order["id"]) == events

    different = _report(shop, order["id"], capture["id"], {"status": "FAILED"})
    assert different.status_code == 409 and different.json()["error"] == "CAPTURE_ALREADY_COMPLETED"
    assert_response_matches(document, different)
    assert shop.get(f"/orders/{order['id']}").json() == after


def test_a_failed_capture_is_recorded_blocks_shipment_and_gives_its_units_back(shop: Shop) -> None:
    order = _open_order(shop, 2)
    failed = _picked(shop, order)
    response = _report(shop, order["id"], failed["id"], {"status": "FAILED", "capturedAmount": None})
    assert response.status_code == 200 and response.json()["status"] == "FAILED"
    assert response.json()["capturedAmount"] is None
    with pytest.raises(CaptureNotConfirmed):
        fulfilment.ship(shop.engine, shop.tenant_id, order["id"], capture_id=failed["id"])
    after = shop.get(f"/orders/{order['id']}").json()
    assert after["receipts"] == [] and after["status"] == "OPEN"
    assert after["lineItems"][0]["reservedQuantity"] == "2"  # still held for the order
    assert _report(shop, order["id"], failed["id"], {"status": "FAILED"}).status_code == 200
    late = _report(shop, order["id"], failed["id"], {"status": "CONFIRMED", "capturedAmount": failed["grossAmount"]})
    assert late.status_code == 409 and late.json()["error"] == "CAPTURE_ALREADY_COMPLETED"

    # The units can be picked again; the new capture takes the whole line and the freight the failed one had.
    retry = _picked(shop, order)
    assert (retry["lines"], retry["grossAmount"]) == (failed["lines"], failed["grossAmount"])
    assert _report(shop, order["id"], retry["id"], {"status": "CONFIRMED",
                                                    "capturedAmount": retry["grossAmount"]}).status_code == 200
    done = shop.get(f"/orders/{order['id']}").json()
    assert done["status"] == "DELIVERED" and done["receipts"][0]["grossAmount"] == done["grossAmount"]


def test_a_report_with_a_wrong_amount_or_shape_is_400_and_changes_nothing(shop: Shop, document) -> None:
    order = _open_order(shop, 1)
    capture = _picked(shop, order)
    wrong = Decimal(capture["grossAmount"]) + Decimal("0.01")
    cases = [
        ({"status": "CONFIRMED", "capturedAmount": str(wrong)}, {("capturedAmount", "AMOUNT_MISMATCH")}),
        ({"status": "CONFIRMED"}, {("capturedAmount", "REQUIRED")}),
        ({"status": "FAILED", "capturedAmount": "1"}, {("capturedAmount", "INVALID_VALUE")}),
        ({"status": "DONE", "capturedAmount": "-1"},
         {("status", "INVALID_VALUE"), ("capturedAmount", "INVALID_VALUE")}),
        ({"capturedAmount": "abc"}, {("status", "REQUIRED"), ("capturedAmount", "INVALID_TYPE")}),
    ]
    for body, expected in cases:
        response = _report(shop, order["id"], capture["id"], body)
        assert response.status_code == 400, (body, response.text)
        assert_response_matches(document, response)
        assert response.json()["error"] == "INVALID_REQUEST"
        assert {(error["path"], error["code"]) for error in response.json()["details"]["errors"]} == expected, body
    unparseable = shop.http.post(f"{shop.prefix}/orders/{order['id']}/captures/{capture['id']}/payment_capture",
                                 content=b"{", headers={**shop.headers, "Content-Type": "application/json"})
    assert unparseable.status_code == 400 and unparseable.json()["error"] == "BAD_REQUEST"
    assert shop.get(f"/orders/{order['id']}").json()["captures"] == [capture]


def test_unknown_orders_captures_and_refunds_and_another_stores_are_404(shop: Shop, business: Shop,
                                                                        document) -> None:
    order = _open_order(shop, 1)
    capture = _picked(shop, order)
    confirmed = {"status": "CONFIRMED", "capturedAmount": capture["grossAmount"]}
    unknown = "01a20a4f-c35c-742a-a143-6c0de849e123"
    for response in (
            _report(shop, unknown, capture["id"], confirmed),
            _report(shop, order["id"], unknown, confirmed),
            _report(shop, order["id"], order["lineItems"][0]["id"], confirmed),
            _report(business, order["id"], capture["id"], confirmed),
            shop.http.post(f"{shop.prefix}/orders/{order['id']}/refunds/{capture['id']}/confirm",
                           json={"status": "FAILED"}, headers=shop.headers),
            shop.http.post(f"{shop.prefix}/orders/{order['id']}/invoices/{unknown}/refund",
                           json={"status": "FAILED"}, headers=shop.headers)):
        assert response.status_code == 404, response.text
        assert response.json()["error"] == "NOT_FOUND"
        assert_response_matches(document, response)
    assert shop.get(f"/orders/{order['id']}").json()["captures"][0]["status"] == "PENDING"


def test_concurrent_identical_confirmations_make_one_receipt(shop: Shop, server) -> None:
    order = _open_order(shop, 4)
    capture = _picked(shop, order, {0: 3})
    barrier, answers = threading.Barrier(10), []

    def confirm() -> None:
        with httpx.Client(base_url=server.url, headers=shop.headers, timeout=30) as client:
            barrier.wait()
            answers.append(client.post(f"{shop.prefix}/orders/{order['id']}/captures/{capture['id']}/payment_capture",
                                       json={"status": "CONFIRMED", "capturedAmount": capture["grossAmount"]}))

    threads = [threading.Thread(target=confirm) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [answer.status_code for answer in answers] == [200] * 10
    after = shop.get(f"/orders/{order['id']}").json()
    assert len(after["receipts"]) == len(after["invoices"]) == 1
    assert after["lineItems"][0]["deliveredQuantity"] == "3"
    assert [subject for subject, _ in _order_events(shop, order["id"])].count("OrderFulfilled") == 1


def test_refunds_are_confirmed_by_refund_or_by_return_invoice_and_failures_recorded(shop: Shop, document) -> None:
    order = _open_order(shop, 2, 1)
    capture = _picked(shop, order)
    assert _report(shop, order["id"], capture["id"], {"status": "CONFIRMED",
                                                      "capturedAmount": capture["grossAmount"]}).status_code == 200
    returned = SimpleNamespace(lineItemId=order["lineItems"][0]["id"], quantity=Decimal(1))
    for _ in range(2):
        returns.return_units(shop.engine, shop.tenant_id, order["id"], [returned])
    after = shop.get(f"/orders/{order['id']}").json()
    first, second = after["refunds"]
    assert first["status"] == second["status"] == "OPEN"
    assert {(subject, metadata) for subject, metadata in _order_events(shop, order["id"])
            if subject == "OrderReadyForRefund"} == {("OrderReadyForRefund", f'{{"refundId":"{refund["id"]}"}}')
                                                     for refund in (first, second)}
    # Both units of line 1 returned: the two refunds add up to the line exactly.
    assert Decimal(first["grossAmount"]) + Decimal(second["grossAmount"]) == Decimal(
        order["lineItems"][0]["grossAmount"])

    def confirm(path: str, body: dict[str, Any]) -> httpx.Response:
        return shop.http.post(f"{shop.prefix}/orders/{order['id']}{path}", json=body, headers=shop.headers)

    amount = {"status": "CONFIRMED", "refundedAmount": first["grossAmount"]}
    mismatch = confirm(f"/refunds/{first['id']}/confirm", {"status": "CONFIRMED", "refundedAmount": "0.01"})
    assert mismatch.status_code == 400
    assert mismatch.json()["details"]["errors"][0]["code"] == "AMOUNT_MISMATCH"
    closed = confirm(f"/refunds/{first['id']}/confirm", amount)
    assert closed.status_code == 200, closed.text
    assert_response_matches(document, closed)
    assert closed.json()["status"] == "CONFIRMED" and closed.json()["refundedAmount"] == first["grossAmount"]
    return_invoice = next(doc for doc in after["returnInvoices"] if doc["refundId"] == first["id"])
    assert confirm(f"/invoices/{return_invoice['id']}/refund", amount).json() == closed.json()  # the same report
    conflict = confirm(f"/invoices/{return_invoice['id']}/refund", {"status": "FAILED"})
    assert conflict.status_code == 409 and conflict.json()["error"] == "REFUND_ALREADY_COMPLETED"
    assert_response_matches(document, conflict)
    # An invoice that is not a return invoice names no refund.
    assert confirm(f"/invoices/{after['invoices'][0]['id']}/refund", amount).status_code == 404

    second_invoice = next(doc for doc in after["returnInvoices"] if doc["refundId"] == second["id"])
    failed = confirm(f"/invoices/{second_invoice['id']}/refund", {"status": "FAILED"})
    assert failed.status_code == 200 and failed.json()["status"] == "FAILED"
    final = shop.get(f"/orders/{order['id']}").json()
    assert [refund["status"] for refund in final["refunds"]] == ["CONFIRMED", "FAILED"]
    assert final["lineItems"][0]["returnedQuantity"] == "2"


def test_reports_need_the_stores_token(shop: Shop) -> None:
    order = _open_order(shop, 1)
    capture = _picked(shop, order)
    path = f"{shop.prefix}/orders/{order['id']}/captures/{capture['id']}/payment_capture"
    assert shop.http.post(path, json={"status": "FAILED"}).status_code == 401
    assert shop.http.post(path, json={"status": "FAILED"}, headers=bearer("not-a-token")).status_code == 401


def test_concurrent_confirmations_and_picks_across_orders_neither_deadlock_nor_skip_numbers(
        shop: Shop, business: Shop) -> None:
    """Confirmations on the capture store and picks on the store without capture (each making a receipt and an
    invoice, moving stock of shared SKUs) at once: all succeed, and the receipt numbers stay unique and gapless."""
    captured = [_open_order(shop, 1, 1) for _ in range(6)]
    captures = [_picked(shop, order) for order in captured]
    direct = [_open_order(business, 1, 1) for _ in range(6)]
    barrier, failures = threading.Barrier(12), []

    def run(job: Any) -> None:
        barrier.wait()
        try:
            job()
        except Exception as error:  # noqa: BLE001 - collected and asserted below
            failures.append(error)

    jobs = [lambda o=order, c=capture: fulfilment.report_capture(shop.engine, shop.tenant_id, shop.id, o["id"], c["id"],
                                                                  "CONFIRMED", Decimal(c["grossAmount"]))
            for order, capture in zip(captured, captures, strict=True)]
    jobs += [lambda o=order: fulfilment.pick(business.engine, business.tenant_id, o["id"], None) for order in direct]
    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    receipts = [receipt for order in captured for receipt in shop.get(f"/orders/{order['id']}").json()["receipts"]]
    receipts += [receipt for order in direct for receipt in business.get(f"/orders/{order['id']}").json()["receipts"]]
    numbers = sorted(int(receipt["number"]) for receipt in receipts)
    assert len(numbers) == 12 and numbers == list(range(numbers[0], numbers[0] + 12))
