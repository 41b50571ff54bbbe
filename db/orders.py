"""Sales orders of an eCom store: creation (SPEC.md's order creation rules) and reads.

Orders are created in groups (`create_orders`; the API forms them, serving/order_groups.py): one transaction checks
the duplicate keys, customers, SKUs and campaign prices of all of a group's orders with two or three statements per
eCom store (the catalogue version, the held keys, the customers given; the store's context and SKUs come from this
process's entries while the version stands, db/order_context.py), then stores those that pass RECEIVED with their
lines and their tenant's next numbers (one counter update, one insert of the orders, one of the lines), whose
inserted rows are the answers; processing (db/order_processing.py) reserves the stock afterwards. Each order's
answer is the one it would get if the group's orders were created one after another: a bad order is refused alone,
and one repeating the keys of an earlier one of its group is its duplicate. Concurrent creations of one order by
another process meet in the unique keys (externalOrderId and externalOrderNumber per eCom store): the losing group
is written again one order at a time, each run again by `write_with_retries` after losing, and the second run finds
the winner's order and answers 409 DUPLICATE_ORDER. (On DuckDB writers take turns, so the group simply finds it.)
"""

import logging
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import orjson
import sqlalchemy as sa

from contracts.errors import ApiError, CustomerNotFound, DuplicateOrder, InvalidRequest, SkuNotFound
from contracts.orders import CreateOrder, LineItemRequest
from contracts.rendering import decimal
from db.ids import new_id, utc_now
from db.order_context import SkuKey, store_context
from db.order_documents import Document, read_documents
from db.schema import (
    customers,
    order_lines,
    order_numbers,
    orders,
)
from db.write_turns import transaction_with_retries, write_with_retries
from rules.amounts import freight_amounts, line_amounts, order_amounts
from rules.pricing import PricedSku, price_lines, problem

log = logging.getLogger(__name__)
RECEIVED, OPEN = "RECEIVED", "OPEN"
FIRST_ORDER_NUMBER = 100001


@dataclass(frozen=True)
class HeldOrder:
    order: sa.Row
    lines: list[sa.Row]  # by line number
    documents: list[Document] = field(default_factory=list)  # in the order they were made


@dataclass(frozen=True)
class OrderRequest:
    """A create-order request of an eCom store."""

    tenant_id: str
    ecom_store_id: str
    body: CreateOrder


# Each request's answer: the stored order, or the error it gets (DuplicateOrder, CustomerNotFound, SkuNotFound,
# InvalidRequest).
Answer = HeldOrder | ApiError


@dataclass(frozen=True)
class _NewOrder:
    """A checked order, ready to insert: the values of its row (but the number) and of its lines' rows."""

    order: dict[str, Any]
    lines: list[dict[str, Any]]


def create_order(engine: sa.Engine, tenant_id: str, ecom_store_id: str, request: CreateOrder) -> HeldOrder:
    """Store the order RECEIVED; raises DuplicateOrder, CustomerNotFound, SkuNotFound or InvalidRequest."""
    answer = _created_alone(engine, OrderRequest(tenant_id, ecom_store_id, request))
    if isinstance(answer, ApiError):
        raise answer
    return answer


def create_orders(engine: sa.Engine, requests: Sequence[OrderRequest]) -> list[Answer]:
    """Store the orders that pass the checks, in one transaction; each request's answer, in the requests' order.

    The answers are those of creating the orders one by one in that order: an order repeating the keys of an
    earlier one of the group is DuplicateOrder naming it (when that one was created). A group that loses a unique
    key to a concurrent creation (another process, on PostgreSQL) is written again one order at a time."""
    def attempt() -> list[Answer] | None:
        try:
            with engine.begin() as conn:
                return _created(conn, requests)
        except sa.exc.IntegrityError:  # not run again by write_with_retries: one by one instead, below
            return None

    answers = write_with_retries(engine, attempt)
    if answers is None:
        log.info("a group of %d orders lost a unique key to a concurrent creation; writing them one by one",
                 len(requests))
        return [_created_alone(engine, request) for request in requests]
    return answers


def _created_alone(engine: sa.Engine, request: OrderRequest) -> Answer:
    """A group of one, run again after losing a unique key: the second run finds the winner's order and answers
    DuplicateOrder."""
    return transaction_with_retries(engine, lambda conn: _created(conn, [request])[0])


def _created(conn: sa.Connection, requests: Sequence[OrderRequest]) -> list[Answer]:
    """Check each eCom store's requests against what is held (two to four statements per store, whatever their
    number), then insert the orders that pass with their tenants' next numbers (one statement for the orders, one for
    the lines); the answers are built from the inserted rows, so nothing is read back."""
    now = utc_now()
    by_store: dict[tuple[str, str], list[int]] = defaultdict(list)
    for index, request in enumerate(requests):
        by_store[request.tenant_id, request.ecom_store_id].append(index)
    checked: dict[int, _NewOrder | ApiError] = {}
    for (tenant_id, ecom_store_id), indexes in by_store.items():
        outcomes = _checked_in_store(conn, tenant_id, ecom_store_id, [requests[i].body for i in indexes], now)
        checked.update(zip(indexes, outcomes, strict=True))
    answers: list[Answer | _NewOrder] = [checked[index] for index in range(len(requests))]
    new = [answer for answer in answers if isinstance(answer, _NewOrder)]
    if new:
        held = iter(_inserted(conn, new))
        answers = [next(held) if isinstance(answer, _NewOrder) else answer for answer in answers]
    return answers  # type: ignore[return-value]  # every _NewOrder is replaced by its HeldOrder


def _inserted(conn: sa.Connection, new: Sequence[_NewOrder]) -> list[HeldOrder]:
    """Insert the orders, numbered in their order per tenant, and their lines."""
    numbers = {tenant_id: _next_numbers(conn, tenant_id, count)
               for tenant_id, count in Counter(order.order["tenant_id"] for order in new).items()}
    stored = conn.execute(_INSERT_ORDERS, [{**order.order, "number": next(numbers[order.order["tenant_id"]])}
                                           for order in new]).all()
    lines_of: dict[str, list[sa.Row]] = defaultdict(list)  # by line number: inserted in that order
    for line in conn.execute(_INSERT_LINES, [line for order in new for line in order.lines]):
        lines_of[line.order_id].append(line)
    return [HeldOrder(order, lines_of[order.id]) for order in stored]


def _checked_in_store(conn: sa.Connection, tenant_id: str, ecom_store_id: str, bodies: Sequence[CreateOrder],
                      now: datetime) -> list[_NewOrder | ApiError]:
    """SPEC.md's creation rules for each request in turn, against what is held and the group's orders before it:
    its rows to insert, or the error to answer. Two to four statements, whatever the number of requests: the
    store's context and SKUs are read only when this process does not hold them for the catalogue version."""
    context = store_context(conn, tenant_id, ecom_store_id, now.date())
    store = context.store
    taken = _held_keys(conn, tenant_id, ecom_store_id, bodies)
    customers_known = _known_customers(conn, tenant_id, {body.customerId for body in bodies if body.customerId})
    found = context.skus(_sku_key(line) for body in bodies for line in body.lineItems)
    outcomes: list[_NewOrder | ApiError] = []
    for body in bodies:
        try:
            existing = taken.get(("id", body.externalOrderId)) or taken.get(("number", body.externalOrderNumber))
            if existing:
                raise DuplicateOrder(existing)
            new = _new_order(tenant_id, ecom_store_id, store, body, _customer(store, body.customerId, customers_known),
                             _skus_of(body.lineItems, found), now)
        except ApiError as refused:
            outcomes.append(refused)
            continue
        # Later requests of the group repeating its keys are its duplicates, as if sent after it.
        taken.setdefault(("id", body.externalOrderId), new.order["id"])
        taken.setdefault(("number", body.externalOrderNumber), new.order["id"])
        outcomes.append(new)
    return outcomes


def _new_order(tenant_id: str, ecom_store_id: str, store: sa.Row, request: CreateOrder, customer_id: str,
               found: list[PricedSku], order_date: datetime) -> _NewOrder:
    """The order's rows, or InvalidRequest listing its lines' pricing problems."""
    day = order_date.date()
    pricings, problems = price_lines(request.lineItems, found, day)
    if problems:
        raise InvalidRequest(problems)
    order_id = new_id()
    amounts_of = [line_amounts(line.quantity, line.netUnitPrice, line.vatRate, line.netUnitOrderDiscountAmount)
                  for line in request.lineItems]
    line_rows = []
    for number, (line, sku, pricing, amounts) in enumerate(zip(request.lineItems, found, pricings, amounts_of,
                                                               strict=True), start=1):
        line_rows.append({
            "id": new_id(), "tenant_id": tenant_id, "order_id": order_id, "line_number": number, "sku_id": sku.id,
            "sku_number": sku.number, "product_name": sku.product_name, "quantity": line.quantity,
            "net_unit_price": line.netUnitPrice, "vat_rate": line.vatRate,
            "net_unit_order_discount_amount": line.netUnitOrderDiscountAmount, "campaign_code": line.campaignCode,
            "campaign_id": pricing.campaign_id, "price_type": pricing.price_type, "gross_amount": amounts.gross,
            "vat_amount": amounts.vat, "reserved_quantity": 0, "delivered_quantity": 0, "returned_quantity": 0})
    # Held as sent, the amount as a canonical decimal string.
    freight = ({**request.freight.model_dump(), "freightAmount": decimal(request.freight.freightAmount)}
               if request.freight else None)
    # A company without a freight VAT rate charges freight without VAT.
    shipping = freight_amounts(request.freight.freightAmount if request.freight else None,
                               store.freight_vat_rate or Decimal(0))
    total = order_amounts(amounts_of, shipping)
    return _NewOrder({
        "id": order_id, "tenant_id": tenant_id, "ecom_store_id": ecom_store_id,
        "external_order_id": request.externalOrderId, "external_order_number": request.externalOrderNumber,
        "customer_id": customer_id, "status": RECEIVED, "order_date": order_date,
        "delivery_date": day + timedelta(days=store.lead_time_days), "currency_iso_code": store.currency_iso_code,
        "delivery_address": _json(request.deliveryAddress.model_dump(exclude_none=True)),
        "invoice_address": _json(request.invoiceAddress.model_dump(exclude_none=True)) if request.invoiceAddress
        else None,
        "freight": _json(freight) if freight is not None else None,
        "freight_gross_amount": shipping.gross if freight is not None else None,
        "freight_vat_amount": shipping.vat if freight is not None else None,
        "gross_amount": total.gross, "vat_amount": total.vat, "warehouse_id": None, "modified_time": order_date},
        line_rows)


# Values go as parameters, so each statement is compiled once (a `.values()` of many rows is compiled every time).
_INSERT_ORDERS = orders.insert().returning(*orders.c, sort_by_parameter_order=True)
_INSERT_LINES = order_lines.insert().returning(*order_lines.c, sort_by_parameter_order=True)


def _json(value: object) -> str:
    return orjson.dumps(value).decode()


# Built once, with bound parameters: building and keying it per order cost about a millisecond of Python.
# The eCom store's orders with any of the external keys (the web shop's keys are unique per store).
_HELD_KEYS = sa.select(orders.c.id, orders.c.external_order_id, orders.c.external_order_number).where(
    orders.c.tenant_id == sa.bindparam("tenant_id"), orders.c.ecom_store_id == sa.bindparam("ecom_store_id"),
    sa.or_(orders.c.external_order_id.in_(sa.bindparam("external_order_ids", expanding=True)),
           orders.c.external_order_number.in_(sa.bindparam("external_order_numbers", expanding=True))))

_KNOWN_CUSTOMERS = sa.select(customers.c.id).where(customers.c.tenant_id == sa.bindparam("tenant_id"),
                                                   customers.c.id.in_(sa.bindparam("ids", expanding=True)))


def _held_keys(conn: sa.Connection, tenant_id: str, ecom_store_id: str,
               bodies: Sequence[CreateOrder]) -> dict[tuple[str, str], str]:
    """The held orders' ids by the requests' keys they hold: ("id", externalOrderId) and ("number",
    externalOrderNumber)."""
    taken = {}
    for row in conn.execute(_HELD_KEYS, {
            "tenant_id": tenant_id, "ecom_store_id": ecom_store_id,
            "external_order_ids": sorted({body.externalOrderId for body in bodies}),
            "external_order_numbers": sorted({body.externalOrderNumber for body in bodies})}):
        taken["id", row.external_order_id] = row.id
        taken["number", row.external_order_number] = row.id
    return taken


def _known_customers(conn: sa.Connection, tenant_id: str, customer_ids: set[str]) -> set[str]:
    """Those of the customers given that exist; no statement when the requests leave it to the store's default."""
    if not customer_ids:
        return set()
    return set(conn.scalars(_KNOWN_CUSTOMERS, {"tenant_id": tenant_id, "ids": sorted(customer_ids)}))


def _customer(store: sa.Row, customer_id: str | None, known: set[str]) -> str:
    if customer_id is None:
        if store.default_customer_id is None:
            raise InvalidRequest([problem("customerId", "REQUIRED", "This eCom store has no default customer; "
                                           "give customerId.")])
        return store.default_customer_id
    if customer_id not in known:
        raise CustomerNotFound(f"No customer {customer_id}.")
    return customer_id


def _sku_key(line: LineItemRequest) -> SkuKey:
    return ("id", line.skuId) if line.skuId else ("number", line.skuNumber or "")


def _skus_of(lines: Sequence[LineItemRequest], found: dict[SkuKey, PricedSku | None]) -> list[PricedSku]:
    """Each line's SKU, by its id or number; SkuNotFound naming every one outside the assortment."""
    skus_of_lines, missing = [], []
    for line in lines:
        sku = found[_sku_key(line)]
        if sku is None:
            missing.append(line.skuId or line.skuNumber or "")
        skus_of_lines.append(sku)
    if missing:
        raise SkuNotFound(f"Not in the eCom store's assortment: SKU {', '.join(dict.fromkeys(missing))}.")
    return skus_of_lines


def _next_numbers(conn: sa.Connection, tenant_id: str, count: int) -> Iterator[str]:
    """The tenant's next `count` order numbers, taken by one update of its counter. Counting up locks the counter
    row until commit (PostgreSQL), so concurrent creations take numbers in turn; two creating the first row
    collide and the loser runs again."""
    last = conn.scalar(order_numbers.update().where(order_numbers.c.tenant_id == tenant_id)
                       .values(last_number=order_numbers.c.last_number + count)
                       .returning(order_numbers.c.last_number))
    if last is None:
        last = FIRST_ORDER_NUMBER + count - 1
        conn.execute(order_numbers.insert().values(tenant_id=tenant_id, last_number=last))
    return (str(number) for number in range(last - count + 1, last + 1))


def read_order(engine: sa.Engine, tenant_id: str, ecom_store_id: str | None, id_or_number: str) -> HeldOrder | None:
    """The eCom store's order (any store's of the tenant, for the back office: None) by id or by number, with its
    documents; None for an unknown one or another store's."""
    with engine.connect() as conn:
        held = _read(conn, tenant_id, ecom_store_id, id_or_number)
        return held and HeldOrder(held.order, held.lines, read_documents(conn, tenant_id, held.order.id))


def order_key(id_or_number: str) -> sa.ColumnElement[bool]:
    """The order an operator or web shop names: an all-digit key is its number, anything else its id."""
    return orders.c.number == id_or_number if id_or_number.isdigit() else orders.c.id == id_or_number


def _read(conn: sa.Connection, tenant_id: str, ecom_store_id: str | None, id_or_number: str) -> HeldOrder | None:
    query = sa.select(orders).where(orders.c.tenant_id == tenant_id, order_key(id_or_number))
    if ecom_store_id is not None:
        query = query.where(orders.c.ecom_store_id == ecom_store_id)
    order = conn.execute(query).first()
    if order is None:
        return None
    lines = list(conn.execute(sa.select(order_lines).where(order_lines.c.tenant_id == tenant_id,
                                                           order_lines.c.order_id == order.id)
                              .order_by(order_lines.c.line_number)))
    return HeldOrder(order, lines)


def customer_orders(engine: sa.Engine, tenant_id: str, ecom_store_id: str, customer_id: str) -> list[sa.Row] | None:
    """The customer's orders at this eCom store, newest first; None for an unknown customer."""
    with engine.connect() as conn:
        if conn.scalar(sa.select(customers.c.id).where(customers.c.tenant_id == tenant_id,
                                                       customers.c.id == customer_id)) is None:
            return None
        return list(conn.execute(
            sa.select(orders.c.id, orders.c.number, orders.c.external_order_id, orders.c.external_order_number,
                      orders.c.order_date, orders.c.status, orders.c.gross_amount, orders.c.currency_iso_code)
            .where(orders.c.tenant_id == tenant_id, orders.c.ecom_store_id == ecom_store_id,
                   orders.c.customer_id == customer_id)
            .order_by(orders.c.order_date.desc(), orders.c.id.desc())))
