"""An order's documents (ECOMMERCE.md "Documents") and what every operation on them shares.

Picking, payment reports, shipping, returns and cancelling (db/fulfilment.py, db/returns.py) each run in one
transaction on the locked order (`locked_order`): PostgreSQL holds the order row `FOR UPDATE`, DuckDB's writers
take turns (db/write_turns.py), so two operations on one order never interleave and a quantity is never taken
twice.
Documents are written once; only a capture's or a refund's status, reported amount and completion change later.

The units of a line: `quantity` = cancelled + delivered (receipted) + in PENDING captures + open (still to pick).
`reserved_quantity` (the sum of the line's ACTIVE reservation rows, db/reservations.py) covers the pending and (when
stock allowed) the open units at the order's warehouse; a stock count may take open units back (a backorder again).
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa

from contracts.errors import InsufficientInventory, InvalidRequest, NotFound, OrderNotOpen
from contracts.rendering import decimal
from db.engine import is_duckdb
from db.ids import new_id
from db.outbox import sku_events
from db.reservations import ORDER_LINE, Reservation, end, reserve
from db.schema import (
    document_numbers,
    ecom_stores,
    order_document_lines,
    order_documents,
    order_lines,
    orders,
    stock_levels,
)
from db.stock import NOTHING, for_update, locked_levels
from rules.amounts import Amounts, document_share

CAPTURE, RECEIPT, INVOICE, SHIPMENT, RETURN_INVOICE, REFUND = (
    "CAPTURE", "RECEIPT", "INVOICE", "SHIPMENT", "RETURN_INVOICE", "REFUND")
PENDING, CONFIRMED, FAILED, OPEN = "PENDING", "CONFIRMED", "FAILED", "OPEN"
ZERO = Decimal(0)


@dataclass
class DocumentLine:
    order_line_id: str
    quantity: Decimal
    gross_amount: Decimal
    vat_amount: Decimal


@dataclass
class Document:
    id: str
    kind: str
    created_time: datetime
    gross_amount: Decimal
    vat_amount: Decimal
    number: str | None = None
    status: str | None = None
    completed_time: datetime | None = None
    freight_gross_amount: Decimal | None = None
    freight_vat_amount: Decimal | None = None
    reported_amount: Decimal | None = None
    capture_id: str | None = None
    receipt_id: str | None = None
    invoice_id: str | None = None
    refund_id: str | None = None
    return_invoice_id: str | None = None
    carrier: str | None = None
    tracking_number: str | None = None
    lines: list[DocumentLine] = field(default_factory=list)

    @property
    def freight(self) -> Amounts | None:
        if self.freight_gross_amount is None or self.freight_vat_amount is None:
            return None
        return Amounts(self.freight_gross_amount, self.freight_vat_amount)


_COLUMNS = [column.name for column in fields(Document) if column.name != "lines"]


def read_documents(conn: sa.Connection, tenant_id: str, order_id: str) -> list[Document]:
    """The order's documents in the order they were made, each with its lines in line-item order."""
    rows = conn.execute(sa.select(*(order_documents.c[name] for name in _COLUMNS))
                        .where(order_documents.c.tenant_id == tenant_id, order_documents.c.order_id == order_id)
                        .order_by(order_documents.c.created_time, order_documents.c.id))
    documents = {row.id: Document(**row._asdict()) for row in rows}
    if documents:
        for line in conn.execute(
                sa.select(order_document_lines.c.document_id, order_document_lines.c.order_line_id,
                          order_document_lines.c.quantity, order_document_lines.c.gross_amount,
                          order_document_lines.c.vat_amount)
                .join(order_lines, sa.and_(order_lines.c.tenant_id == tenant_id,
                                           order_lines.c.id == order_document_lines.c.order_line_id))
                .where(order_document_lines.c.tenant_id == tenant_id, order_document_lines.c.order_id == order_id)
                .order_by(order_lines.c.line_number)):
            documents[line.document_id].lines.append(
                DocumentLine(line.order_line_id, line.quantity, line.gross_amount, line.vat_amount))
    return list(documents.values())


@dataclass
class OrderState:
    """A locked order as one operation sees it; documents it adds are appended to `documents`."""

    order: sa.Row
    lines: list[sa.Row]  # by line number
    documents: list[Document]
    payment_capture: bool

    @property
    def tenant_id(self) -> str:
        return self.order.tenant_id

    def line(self, line_id: str) -> sa.Row | None:
        return next((line for line in self.lines if line.id == line_id), None)

    def document(self, kind: str, document_id: str) -> Document:
        found = next((doc for doc in self.documents if doc.id == document_id and doc.kind == kind), None)
        if found is None:
            raise NotFound(f"Order {self.order.number} has no {kind.lower().replace('_', ' ')} {document_id}.")
        return found

    def of_kind(self, kind: str, *statuses: str) -> list[Document]:
        return [doc for doc in self.documents if doc.kind == kind and (not statuses or doc.status in statuses)]

    def pending(self, line_id: str) -> Decimal:
        """Units of the line in captures waiting for their payment report."""
        return units(self.of_kind(CAPTURE, PENDING), line_id)

    def open(self, line: sa.Row) -> Decimal:
        """Units of the line still to pick (a failed capture's units count again)."""
        return line.quantity - line.cancelled_quantity - line.delivered_quantity - self.pending(line.id)

    def final(self, line: sa.Row) -> bool:
        """Nothing more of the line will be delivered: every unit is delivered or cancelled."""
        return line.quantity == line.cancelled_quantity + line.delivered_quantity


def units(documents: Iterable[Document], line_id: str) -> Decimal:
    return sum((line.quantity for doc in documents for line in doc.lines if line.order_line_id == line_id), ZERO)


def taken(documents: Iterable[Document], line_id: str) -> Amounts:
    gross = vat = ZERO
    for doc in documents:
        for line in doc.lines:
            if line.order_line_id == line_id:
                gross, vat = gross + line.gross_amount, vat + line.vat_amount
    return Amounts(gross, vat)


def locked_order(conn: sa.Connection, tenant_id: str, order_key: str, ecom_store_id: str | None = None) -> OrderState:
    """The order by id or number (of the eCom store, when given), locked until the transaction ends."""
    key = orders.c.number == order_key if order_key.isdigit() else orders.c.id == order_key
    query = sa.select(orders).where(orders.c.tenant_id == tenant_id, key)
    if ecom_store_id is not None:
        query = query.where(orders.c.ecom_store_id == ecom_store_id)
    order = conn.execute(query if is_duckdb(conn.engine) else query.with_for_update()).first()
    if order is None:
        raise NotFound(f"No order {order_key}.")
    lines = list(conn.execute(sa.select(order_lines).where(order_lines.c.tenant_id == tenant_id,
                                                           order_lines.c.order_id == order.id)
                              .order_by(order_lines.c.line_number)))
    payment_capture = conn.scalar(sa.select(ecom_stores.c.payment_capture_enabled).where(
        ecom_stores.c.tenant_id == tenant_id, ecom_stores.c.id == order.ecom_store_id))
    return OrderState(order, lines, read_documents(conn, tenant_id, order.id), bool(payment_capture))


def requested_units(state: OrderState, requested: Sequence[Any] | None, limit: Callable[[sa.Row], Decimal],
                    verb: str, code: str) -> dict[str, Decimal]:
    """Units per line id of a request's `lines` ([{lineItemId, quantity}]), each within `limit(line)`; without
    lines, every line's whole limit. Every problem at once (400 INVALID_REQUEST); nothing to do is 409."""
    if requested is None:
        wanted = {line.id: limit(line) for line in state.lines if limit(line) > 0}
        if not wanted:
            raise OrderNotOpen(f"Order {state.order.number} ({state.order.status}) has nothing left to {verb}.")
        return wanted
    wanted, problems = {}, []
    for index, item in enumerate(requested):
        line = state.line(item.lineItemId)
        if line is None:
            problems.append({"path": f"lines[{index}].lineItemId", "code": "UNKNOWN_LINE_ITEM",
                             "message": f"Order {state.order.number} has no line item {item.lineItemId}."})
        elif line.id in wanted:
            problems.append({"path": f"lines[{index}].lineItemId", "code": "DUPLICATE_LINE_ITEM",
                             "message": "Each line item may be named once."})
        elif item.quantity > limit(line):
            problems.append({"path": f"lines[{index}].quantity", "code": code,
                             "message": f"Line {line.line_number} has {decimal(limit(line))} unit(s) to {verb}."})
        else:
            wanted[line.id] = item.quantity
    if problems:
        raise InvalidRequest(problems)
    return wanted


def shares(state: OrderState, wanted: Mapping[str, Decimal], earlier: Sequence[Document],
           whole: Callable[[sa.Row], tuple[Decimal, Amounts] | None] = lambda line: None) -> list[DocumentLine]:
    """The document lines taking `wanted` units, each line's amounts pro rata after what `earlier` documents took
    (rules/amounts.py `document_share`); `whole` names what a line's documents must add up to, when not the
    line itself."""
    result = []
    for line in state.lines:
        if line.id in wanted:
            share = document_share(Amounts(line.gross_amount, line.vat_amount), line.quantity, wanted[line.id],
                                   taken(earlier, line.id), units(earlier, line.id), whole(line))
            result.append(DocumentLine(line.id, wanted[line.id], share.gross, share.vat))
    return result


def add_document(conn: sa.Connection, state: OrderState, document: Document) -> Document:
    """Store the document with its lines; its totals are its lines' plus its freight."""
    freight = document.freight
    document.gross_amount = sum((line.gross_amount for line in document.lines), freight.gross if freight else ZERO)
    document.vat_amount = sum((line.vat_amount for line in document.lines), freight.vat if freight else ZERO)
    conn.execute(order_documents.insert().values(
        tenant_id=state.tenant_id, order_id=state.order.id, **{name: getattr(document, name) for name in _COLUMNS}))
    conn.execute(order_document_lines.insert(), [
        {"tenant_id": state.tenant_id, "order_id": state.order.id, "document_id": document.id,
         "order_line_id": line.order_line_id, "quantity": line.quantity, "gross_amount": line.gross_amount,
         "vat_amount": line.vat_amount} for line in document.lines])
    state.documents.append(document)
    return document


def copy_of(document: Document, kind: str, at: datetime, **links: Any) -> Document:
    """A new document of `kind` over the same lines and amounts (a receipt's invoice, a return's refund)."""
    return Document(new_id(), kind, at, document.gross_amount, document.vat_amount,
                    freight_gross_amount=document.freight_gross_amount,
                    freight_vat_amount=document.freight_vat_amount,
                    lines=[DocumentLine(line.order_line_id, line.quantity, line.gross_amount, line.vat_amount)
                           for line in document.lines], **links)


def next_number(conn: sa.Connection, tenant_id: str, series: str) -> str:
    """The tenant's next number of the series (RECEIPT, INVOICE, RETURN_INVOICE), from 1, gapless: the counter
    row stays locked until commit (PostgreSQL); two creating the first row collide and the loser runs again."""
    where = sa.and_(document_numbers.c.tenant_id == tenant_id, document_numbers.c.series == series)
    last = conn.scalar(for_update(conn, sa.select(document_numbers.c.last_number).where(where)))
    number = (last or 0) + 1
    if last is None:
        conn.execute(document_numbers.insert().values(tenant_id=tenant_id, series=series, last_number=number))
    else:
        conn.execute(document_numbers.update().where(where).values(last_number=number))
    return str(number)


def change_lines(conn: sa.Connection, state: OrderState, column: str, changes: Mapping[str, Decimal]) -> None:
    """Add each change to the line's `column` (delivered, returned, cancelled or reserved quantity)."""
    for line_id, change in changes.items():
        if change:
            conn.execute(order_lines.update().where(order_lines.c.tenant_id == state.tenant_id,
                                                    order_lines.c.id == line_id)
                         .values({column: order_lines.c[column] + change}))


def sku_quantities(state: OrderState, per_line: Mapping[str, Decimal]) -> dict[str, Decimal]:
    """Units per line id summed per SKU (an order may have several lines of one SKU)."""
    per_sku: dict[str, Decimal] = {}
    for line_id, quantity in per_line.items():
        sku_id = state.line(line_id).sku_id  # type: ignore[union-attr]
        per_sku[sku_id] = per_sku.get(sku_id, ZERO) + quantity
    return per_sku


def reserve_more(conn: sa.Connection, state: OrderState, per_line: Mapping[str, Decimal], at: datetime) -> None:
    """Reserve units the order's lines need beyond what processing could reserve (a backorder picked once stock
    arrived); 400 INSUFFICIENT_INVENTORY naming the SKUs when the warehouse does not have them, nothing changed."""
    per_line = {line_id: quantity for line_id, quantity in per_line.items() if quantity > 0}
    warehouse_id = state.order.warehouse_id
    if not per_line or warehouse_id is None:
        return
    needed = sku_quantities(state, per_line)
    levels = locked_levels(conn, state.tenant_id, [warehouse_id], needed)
    short = [sku_id for sku_id, quantity in needed.items()
             if levels.get((warehouse_id, sku_id), NOTHING).available < quantity]
    if short:
        numbers = {line.sku_id: line.sku_number for line in state.lines}
        raise InsufficientInventory([{"skuId": sku_id, "skuNumber": numbers[sku_id],
                                      "quantity": decimal(needed[sku_id])} for sku_id in sorted(short)])
    sku_events(conn, state.tenant_id, reserve(conn, state.tenant_id, [
        Reservation(ORDER_LINE, line_id, warehouse_id, state.line(line_id).sku_id, quantity)  # type: ignore[union-attr]
        for line_id, quantity in per_line.items()], at))


def end_reservations(conn: sa.Connection, state: OrderState, per_line: Mapping[str, Decimal], row_state: str,
                     at: datetime) -> None:
    """End units of the lines' reservations at the order's warehouse: CONSUMED (delivered: they leave on hand) or
    RELEASED (cancelled), with their InventoryUpdated. The stock rows are locked first, before any order line is
    written, as everywhere (db/reservations.py)."""
    per_line = {line_id: quantity for line_id, quantity in per_line.items() if quantity > 0}
    warehouse_id = state.order.warehouse_id
    if not per_line or warehouse_id is None:  # its store had no warehouse serving it: nothing was reserved
        return
    locked_levels(conn, state.tenant_id, [warehouse_id], sku_quantities(state, per_line))
    ended = end(conn, state.tenant_id, per_line, row_state, at)
    sku_events(conn, state.tenant_id, {item.sku_id for item in ended})


def put_back(conn: sa.Connection, state: OrderState, per_sku: Mapping[str, Decimal], at: datetime) -> None:
    """Returned units go back on hand at the order's warehouse, with their InventoryUpdated; an order without a
    warehouse (its store had none serving it) moves no stock."""
    warehouse_id = state.order.warehouse_id
    if warehouse_id is None:
        return
    for sku_id in sorted(per_sku):
        where = sa.and_(stock_levels.c.tenant_id == state.tenant_id, stock_levels.c.location_id == warehouse_id,
                        stock_levels.c.sku_id == sku_id)
        moved = conn.execute(stock_levels.update().where(where).values(
            on_hand=stock_levels.c.on_hand + per_sku[sku_id], modified_time=at))
        if moved.rowcount == 0:  # a return to a warehouse whose stock row was removed since
            conn.execute(stock_levels.insert().values(tenant_id=state.tenant_id, location_id=warehouse_id,
                                                      sku_id=sku_id, on_hand=per_sku[sku_id], reserved=0,
                                                      modified_time=at))
    sku_events(conn, state.tenant_id, per_sku)


def settle_status(conn: sa.Connection, state: OrderState, at: datetime) -> None:
    """The order's status from its lines: everything delivered or cancelled is DELIVERED (CANCELLED when nothing
    was delivered), some delivered is PARTIALLY_DELIVERED, else OPEN."""
    lines = list(conn.execute(sa.select(order_lines.c.quantity, order_lines.c.cancelled_quantity,
                                        order_lines.c.delivered_quantity)
                              .where(order_lines.c.tenant_id == state.tenant_id,
                                     order_lines.c.order_id == state.order.id)))
    remaining = sum(line.quantity - line.cancelled_quantity - line.delivered_quantity for line in lines)
    delivered = sum(line.delivered_quantity for line in lines)
    if remaining == 0:
        status = "DELIVERED" if delivered else "CANCELLED"
    else:
        status = "PARTIALLY_DELIVERED" if delivered else "OPEN"
    if status != state.order.status:
        conn.execute(orders.update().where(orders.c.tenant_id == state.tenant_id, orders.c.id == state.order.id)
                     .values(status=status, modified_time=at))


def record_report(conn: sa.Connection, tenant_id: str, document: Document, waiting: str, status: str,
                  amount: Decimal | None, amount_field: str, already_completed: type[Exception], at: datetime) -> bool:
    """Record the web shop's report on a capture (waiting PENDING) or refund (waiting OPEN): CONFIRMED needs
    the document's exact gross amount. True when it changed the document; a repeat of the report it already has
    changes nothing; another report on a completed document is refused with `already_completed` (409)."""
    if document.status != waiting:
        if document.status == status and document.reported_amount == amount:
            return False
        reported = f" of {decimal(document.reported_amount)}" if document.reported_amount is not None else ""
        raise already_completed(f"{document.kind.capitalize()} {document.id} was already reported "
                                f"{document.status}{reported}.")
    if status == CONFIRMED and amount != document.gross_amount:
        raise InvalidRequest([{"path": amount_field, "code": "AMOUNT_MISMATCH",
                               "message": f"Must be the {document.kind.lower()}'s grossAmount "
                                          f"{decimal(document.gross_amount)}."}])
    document.status, document.reported_amount, document.completed_time = status, amount, at
    conn.execute(order_documents.update().where(order_documents.c.tenant_id == tenant_id,
                                                order_documents.c.id == document.id)
                 .values(status=status, reported_amount=amount, completed_time=at))
    return True
