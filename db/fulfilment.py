"""Fulfilment of an order by the back office, and the web shop's payment reports.

Picking takes open units: on an eCom store with payment capture it makes a PENDING capture (the web shop is told
with OrderReadyForPaymentCapture and reports the payment); otherwise, and when a capture is CONFIRMED, it makes a
receipt with its invoice, the units leave the warehouse and the order hears OrderFulfilled. A FAILED capture
gives its units back to picking (they stay reserved) and its shipment is refused. Shipping a receipt makes a
shipment (OrderShipped). Cancelling takes open units off the order and releases their reservation.

Amounts: each capture or receipt takes its lines pro rata after the earlier live ones (rules/amounts.py), so
once every unit is delivered the receipts add up exactly to the order's amounts; the order's freight travels
with its first live capture or receipt.
"""

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa

from contracts import events as subjects
from contracts.errors import CaptureAlreadyCompleted, CaptureNotConfirmed, OrderNotOpen, ReceiptAlreadyShipped
from db.ids import new_id, utc_now
from db.order_documents import (
    CAPTURE,
    CONFIRMED,
    FAILED,
    INVOICE,
    PENDING,
    RECEIPT,
    SHIPMENT,
    ZERO,
    Document,
    OrderState,
    add_document,
    change_lines,
    copy_of,
    end_reservations,
    locked_order,
    next_number,
    record_report,
    requested_units,
    reserve_more,
    settle_status,
    shares,
)
from db.orders import OPEN
from db.outbox import order_event
from db.reservations import CONSUMED, RELEASED
from db.schema import orders
from db.write_turns import transaction_with_retries

RECEIVED, PARTIALLY_DELIVERED, CANCELLED = "RECEIVED", "PARTIALLY_DELIVERED", "CANCELLED"
PICKABLE = (OPEN, PARTIALLY_DELIVERED)


def pick(engine: sa.Engine, tenant_id: str, order_key: str, requested: Sequence[Any] | None) -> str:
    """Pick units ([{lineItemId, quantity}], or every open unit); returns the order's id."""

    def attempt(conn: sa.Connection) -> str:
        state = locked_order(conn, tenant_id, order_key)
        _refuse_unless_open(state, "picked")
        wanted = requested_units(state, requested, state.open, "pick", "EXCEEDS_OPEN_QUANTITY")
        now = utc_now()
        # Units beyond what is reserved for the line's open units (a backorder) are reserved now, or refused.
        reserve_more(conn, state, {
            line_id: quantity - (state.line(line_id).reserved_quantity - state.pending(line_id))  # type: ignore[union-attr]
            for line_id, quantity in wanted.items()}, now)
        earlier = _live_fulfilments(state)
        # A capture on a store with payment capture; otherwise only the template of the receipt made at once.
        document = Document(new_id(), CAPTURE, now, ZERO, ZERO, lines=shares(state, wanted, earlier))
        if state.order.freight_gross_amount is not None and all(doc.freight is None for doc in earlier):
            document.freight_gross_amount = state.order.freight_gross_amount
            document.freight_vat_amount = state.order.freight_vat_amount
        if state.payment_capture:
            document.status = PENDING
            add_document(conn, state, document)
            order_event(conn, tenant_id, state.order.ecom_store_id, subjects.ORDER_READY_FOR_PAYMENT_CAPTURE,
                        state.order.id, {"captureId": document.id})
        else:
            _fulfil(conn, state, document, None, now)
        return state.order.id

    return transaction_with_retries(engine, attempt)


def _refuse_unless_open(state: OrderState, done: str) -> None:
    if state.order.status not in PICKABLE:
        waiting = " yet: it is being processed" if state.order.status == RECEIVED else f": it is {state.order.status}"
        raise OrderNotOpen(f"Order {state.order.number} cannot be {done}{waiting}.")


def _live_fulfilments(state: OrderState) -> list[Document]:
    """The documents that took units for delivery: captures not FAILED, and receipts made without a capture
    (a receipt of a capture repeats the capture's amounts)."""
    return [doc for doc in state.documents
            if (doc.kind == CAPTURE and doc.status != FAILED) or (doc.kind == RECEIPT and doc.capture_id is None)]


def _fulfil(conn: sa.Connection, state: OrderState, taken: Document, capture_id: str | None, at: datetime) -> None:
    """The receipt and invoice of `taken`'s lines and amounts; the units leave the warehouse's stock.

    Stock rows are locked before the order lines are written and before the document number counters, as everywhere,
    so that two transactions never wait on each other in turn (PostgreSQL would abort one as a deadlock)."""
    delivered = {line.order_line_id: line.quantity for line in taken.lines}
    end_reservations(conn, state, delivered, CONSUMED, at)
    change_lines(conn, state, "delivered_quantity", delivered)
    receipt = copy_of(taken, RECEIPT, at, number=next_number(conn, state.tenant_id, RECEIPT), capture_id=capture_id)
    add_document(conn, state, receipt)
    add_document(conn, state, copy_of(receipt, INVOICE, at, number=next_number(conn, state.tenant_id, INVOICE),
                                      receipt_id=receipt.id))
    order_event(conn, state.tenant_id, state.order.ecom_store_id, subjects.ORDER_FULFILLED, state.order.id)
    settle_status(conn, state, at)


def report_capture(engine: sa.Engine, tenant_id: str, ecom_store_id: str, order_key: str, capture_id: str,
                   status: str, captured_amount: Decimal | None) -> Document:
    """The web shop's payment report: CONFIRMED (with the capture's exact gross amount) makes the receipt and
    invoice; FAILED gives the units back to picking. Returns the capture."""

    def attempt(conn: sa.Connection) -> Document:
        state = locked_order(conn, tenant_id, order_key, ecom_store_id)
        capture = state.document(CAPTURE, capture_id)
        now = utc_now()
        if record_report(conn, tenant_id, capture, PENDING, status, captured_amount, "capturedAmount",
                         CaptureAlreadyCompleted, now) and status == CONFIRMED:
            _fulfil(conn, state, capture, capture.id, now)
        return capture

    return transaction_with_retries(engine, attempt)


def ship(engine: sa.Engine, tenant_id: str, order_key: str, *, receipt_id: str | None = None,
         capture_id: str | None = None, carrier: str | None = None, tracking_number: str | None = None) -> str:
    """Ship a receipt (named, or by its capture, which must be CONFIRMED); returns the order's id."""

    def attempt(conn: sa.Connection) -> str:
        state = locked_order(conn, tenant_id, order_key)
        if capture_id is not None:
            capture = state.document(CAPTURE, capture_id)
            if capture.status != CONFIRMED:
                raise CaptureNotConfirmed(f"Capture {capture.id} is {capture.status}; its units ship once the "
                                          "web shop reports the payment CONFIRMED.")
            receipt = next(doc for doc in state.of_kind(RECEIPT) if doc.capture_id == capture.id)
        else:
            receipt = state.document(RECEIPT, receipt_id or "")
        if any(doc.receipt_id == receipt.id for doc in state.of_kind(SHIPMENT)):
            raise ReceiptAlreadyShipped(f"Receipt {receipt.number} has already been shipped.")
        shipment = copy_of(receipt, SHIPMENT, utc_now(), receipt_id=receipt.id, carrier=carrier,
                           tracking_number=tracking_number)
        add_document(conn, state, shipment)
        order_event(conn, tenant_id, state.order.ecom_store_id, subjects.ORDER_SHIPPED, state.order.id)
        return state.order.id

    return transaction_with_retries(engine, attempt)


def cancel(engine: sa.Engine, tenant_id: str, order_key: str, requested: Sequence[Any] | None) -> str:
    """Cancel open units ([{lineItemId, quantity}], or every open unit, which cancels the order when nothing
    was delivered); their reservation is released. Returns the order's id."""

    def attempt(conn: sa.Connection) -> str:
        state = locked_order(conn, tenant_id, order_key)
        now = utc_now()
        if state.order.status == RECEIVED and requested is None:
            _cancel_received(conn, state, now)
            return state.order.id
        _refuse_unless_open(state, "cancelled line by line" if state.order.status == RECEIVED else "cancelled")
        wanted = requested_units(state, requested, state.open, "cancel", "EXCEEDS_OPEN_QUANTITY")
        # Unreserved units (a backorder) go first; the rest releases its reservation.
        end_reservations(conn, state, {line_id: quantity - _unreserved_open(state, line_id)
                                       for line_id, quantity in wanted.items()}, RELEASED, now)
        change_lines(conn, state, "cancelled_quantity", wanted)
        settle_status(conn, state, now)
        return state.order.id

    return transaction_with_retries(engine, attempt)


def _unreserved_open(state: OrderState, line_id: str) -> Decimal:
    line = state.line(line_id)
    assert line is not None
    return state.open(line) - (line.reserved_quantity - state.pending(line_id))


def _cancel_received(conn: sa.Connection, state: OrderState, at: datetime) -> None:
    """An order not processed yet has reserved nothing: every unit is cancelled, and processing will pass it by
    (it opens only RECEIVED orders)."""
    change_lines(conn, state, "cancelled_quantity", {line.id: line.quantity for line in state.lines})
    conn.execute(orders.update().where(orders.c.tenant_id == state.tenant_id, orders.c.id == state.order.id)
                 .values(status=CANCELLED, modified_time=at))

