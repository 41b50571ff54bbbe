"""Returns of delivered units by the back office, and the web shop's refund reports.

A return takes delivered units back against their invoices, oldest first (or against the invoice named): per
invoice a return invoice and an OPEN refund of the same amounts, each announced with OrderReadyForRefund; the
units go back on hand at the order's warehouse. The web shop then reports each refund CONFIRMED (the exact gross
amount) or FAILED.

Amounts: a return takes each line pro rata after the earlier returns of the line; once a line will deliver no
more, its returns add up to what its invoices took, so on a full return the refunds add up exactly to the
original amounts. The return that completes a full return of the order also refunds its freight.
"""

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import sqlalchemy as sa

from contracts import events as subjects
from contracts.errors import RefundAlreadyCompleted
from db.ids import new_id, utc_now
from db.order_documents import (
    INVOICE,
    OPEN,
    REFUND,
    RETURN_INVOICE,
    ZERO,
    Document,
    OrderState,
    add_document,
    change_lines,
    copy_of,
    locked_order,
    next_number,
    put_back,
    record_report,
    requested_units,
    shares,
    sku_quantities,
    taken,
    units,
)
from db.outbox import order_event
from db.write_turns import transaction_with_retries
from rules.amounts import Amounts


def return_units(engine: sa.Engine, tenant_id: str, order_key: str, requested: Sequence[Any] | None,
                 invoice_id: str | None = None) -> str:
    """Return delivered units ([{lineItemId, quantity}], or every unit not yet returned); returns the order's id."""

    def attempt(conn: sa.Connection) -> str:
        state = locked_order(conn, tenant_id, order_key)
        invoices = state.of_kind(INVOICE) if invoice_id is None else [state.document(INVOICE, invoice_id)]
        wanted = requested_units(state, requested,
                                 lambda line: sum(_returnable(state, doc, line.id) for doc in invoices),
                                 "return", "EXCEEDS_RETURNABLE_QUANTITY")
        parts = _by_invoice(state, invoices, wanted)
        full_return = all(state.final(line) and line.returned_quantity + wanted.get(line.id, ZERO)
                          == line.delivered_quantity for line in state.lines)
        freight = _freight_charged(state) if full_return and not _freight_refunded(state) else None
        now = utc_now()
        # Stock before the order lines and the return invoice numbers (the lock order of db/fulfilment.py).
        put_back(conn, state, sku_quantities(state, wanted), now)
        change_lines(conn, state, "returned_quantity", wanted)
        for number, (invoice, part) in enumerate(parts, start=1):
            refund_id = new_id()
            return_invoice = Document(
                new_id(), RETURN_INVOICE, now, ZERO, ZERO,
                number=next_number(conn, tenant_id, RETURN_INVOICE), invoice_id=invoice.id, refund_id=refund_id,
                lines=shares(state, part, state.of_kind(RETURN_INVOICE), lambda line: _whole(state, line)))
            if freight is not None and number == len(parts):
                return_invoice.freight_gross_amount, return_invoice.freight_vat_amount = freight.gross, freight.vat
            add_document(conn, state, return_invoice)
            refund = copy_of(return_invoice, REFUND, now, status=OPEN, return_invoice_id=return_invoice.id)
            refund.id = refund_id
            add_document(conn, state, refund)
            order_event(conn, tenant_id, state.order.ecom_store_id, subjects.ORDER_READY_FOR_REFUND,
                        state.order.id, {"refundId": refund_id})
        return state.order.id

    return transaction_with_retries(engine, attempt)


def _returnable(state: OrderState, invoice: Document, line_id: str) -> Decimal:
    """Units of the line on the invoice not yet returned against it."""
    returns = [doc for doc in state.of_kind(RETURN_INVOICE) if doc.invoice_id == invoice.id]
    return units([invoice], line_id) - units(returns, line_id)


def _by_invoice(state: OrderState, invoices: list[Document],
                wanted: dict[str, Decimal]) -> list[tuple[Document, dict[str, Decimal]]]:
    """The wanted units spread over the invoices, oldest first."""
    left, parts = dict(wanted), []
    for invoice in invoices:
        part = {}
        for line_id in left:
            part[line_id] = min(left[line_id], _returnable(state, invoice, line_id))
            left[line_id] -= part[line_id]
        part = {line_id: quantity for line_id, quantity in part.items() if quantity > 0}
        if part:
            parts.append((invoice, part))
    return parts


def _whole(state: OrderState, line: sa.Row) -> tuple[Decimal, Amounts] | None:
    """What the returns of a line that will deliver no more add up to: what its invoices took."""
    if not state.final(line):
        return None
    return line.delivered_quantity, taken(state.of_kind(INVOICE), line.id)


def _freight_charged(state: OrderState) -> Amounts | None:
    charged = [doc.freight for doc in state.of_kind(INVOICE) if doc.freight is not None]
    return charged[0] if charged else None


def _freight_refunded(state: OrderState) -> bool:
    return any(doc.freight is not None for doc in state.of_kind(RETURN_INVOICE))


def report_refund(engine: sa.Engine, tenant_id: str, ecom_store_id: str, order_key: str, *,
                  refund_id: str | None = None, return_invoice_id: str | None = None, status: str,
                  refunded_amount: Decimal | None) -> Document:
    """The web shop's refund report, naming the refund or its return invoice: CONFIRMED (the refund's exact
    gross amount) closes it, FAILED records it. Returns the refund."""

    def attempt(conn: sa.Connection) -> Document:
        state = locked_order(conn, tenant_id, order_key, ecom_store_id)
        if refund_id is None:
            refund_id_of_invoice = state.document(RETURN_INVOICE, return_invoice_id or "").refund_id
            refund = state.document(REFUND, refund_id_of_invoice or "")
        else:
            refund = state.document(REFUND, refund_id)
        record_report(conn, tenant_id, refund, OPEN, status, refunded_amount, "refundedAmount",
                      RefundAlreadyCompleted, utc_now())
        return refund

    return transaction_with_retries(engine, attempt)
