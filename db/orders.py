"""Sales orders of an eCom store: creation (SPEC.md's order creation rules) and reads.

Creation checks the duplicate keys, customer, SKUs and campaign prices in a reading transaction (two statements),
then stores the order RECEIVED with its lines and the tenant's next number in a writing one, whose inserted rows
are the answer; processing (db/order_processing.py) reserves the stock afterwards. Concurrent creations of one
order meet in the unique keys (externalOrderId and externalOrderNumber per eCom store): the loser's writing
transaction fails and is run again by `write_with_retries`, and the second run finds the winner's order and answers
409 DUPLICATE_ORDER. (On DuckDB writers take turns, so the second simply finds it.)
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import orjson
import sqlalchemy as sa

from contracts.errors import CustomerNotFound, DuplicateOrder, InvalidRequest, SkuNotFound
from contracts.orders import CreateOrder, LineItemRequest
from contracts.rendering import decimal
from db.catalogue import in_assortment
from db.ids import new_id, utc_now
from db.order_documents import Document, read_documents
from db.schema import (
    campaign_skus,
    campaigns,
    companies,
    customers,
    ecom_stores,
    order_lines,
    order_numbers,
    orders,
    prices,
    products,
    skus,
)
from db.stock import write_with_retries
from rules.amounts import freight_amounts, line_amounts, order_amounts
from rules.pricing import Campaign, PricedSku, price_lines, problem

RECEIVED, OPEN = "RECEIVED", "OPEN"
FIRST_ORDER_NUMBER = 100001


@dataclass(frozen=True)
class HeldOrder:
    order: sa.Row
    lines: list[sa.Row]  # by line number
    documents: list[Document] = field(default_factory=list)  # in the order they were made


@dataclass(frozen=True)
class _NewOrder:
    """A checked order, ready to insert: the values of its row (but the number) and of its lines' rows."""

    order: dict[str, Any]
    lines: list[dict[str, Any]]


def create_order(engine: sa.Engine, tenant_id: str, ecom_store_id: str, request: CreateOrder) -> HeldOrder:
    """Store the order RECEIVED; raises DuplicateOrder, CustomerNotFound, SkuNotFound or InvalidRequest."""
    with engine.connect() as conn:
        # The checks only read, in a transaction of their own: on DuckDB they run beside other writers, and only
        # the inserts take a writer's turn.
        with conn.begin():
            new = _checked(conn, tenant_id, ecom_store_id, request)

        def attempt() -> HeldOrder:
            with conn.begin():
                return _stored(conn, new)

        return write_with_retries(engine, attempt)


def _checked(conn: sa.Connection, tenant_id: str, ecom_store_id: str, request: CreateOrder) -> _NewOrder:
    """SPEC.md's creation rules against what is held; the rows to insert, or the error to answer."""
    store = _store_context(conn, tenant_id, ecom_store_id, request)
    if store.existing_order_id:
        raise DuplicateOrder(store.existing_order_id)
    customer_id = _customer(store, request.customerId)
    order_date = utc_now()
    day = order_date.date()
    found = _skus(conn, tenant_id, store, request.lineItems, day)
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
_INSERT_ORDER = orders.insert().returning(*orders.c)
_INSERT_LINES = order_lines.insert().returning(*order_lines.c, sort_by_parameter_order=True)


def _stored(conn: sa.Connection, new: _NewOrder) -> HeldOrder:
    """Insert the checked order with the tenant's next number; the answer is built from the inserted rows, so
    nothing is read back. An order with the same keys that committed since the checks is DuplicateOrder (an
    insert racing its commit on PostgreSQL fails in the unique keys, and `write_with_retries` runs this again)."""
    order = new.order
    existing = _duplicate_of(conn, order)
    if existing:
        raise DuplicateOrder(existing)
    number = _next_number(conn, order["tenant_id"])
    held = conn.execute(_INSERT_ORDER, {**order, "number": number}).one()
    return HeldOrder(held, list(conn.execute(_INSERT_LINES, new.lines)))


def _json(value: object) -> str:
    return orjson.dumps(value).decode()


# The checks' statements are built once, with bound parameters: building and keying them per order cost about a
# millisecond of Python.
def _param(name: str, type_: type[sa.types.TypeEngine] = sa.String) -> sa.BindParameter:
    return sa.bindparam(name, type_=type_)


# The id of the eCom store's order with either external key (the web shop's keys are unique per store).
_DUPLICATE = sa.select(orders.c.id).where(
    orders.c.tenant_id == _param("tenant_id"), orders.c.ecom_store_id == _param("ecom_store_id"),
    sa.or_(orders.c.external_order_id == _param("external_order_id"),
           orders.c.external_order_number == _param("external_order_number"))).limit(1)

# The eCom store with its company's currency, base price list and freight VAT rate, the id of an order the request
# repeats (or null), and the given customer's id if it exists (null when unknown or not given).
_STORE_CONTEXT = (
    sa.select(ecom_stores, companies.c.currency_iso_code, companies.c.base_price_list_id, companies.c.freight_vat_rate,
              _DUPLICATE.scalar_subquery().label("existing_order_id"),
              sa.select(customers.c.id).where(customers.c.tenant_id == _param("tenant_id"),
                                              customers.c.id == _param("customer_id"))
              .scalar_subquery().label("known_customer_id"))
    .join(companies, sa.and_(companies.c.tenant_id == _param("tenant_id"),
                             companies.c.id == ecom_stores.c.company_id))
    .where(ecom_stores.c.tenant_id == _param("tenant_id"), ecom_stores.c.id == _param("ecom_store_id")))


def _sku_lookup() -> sa.Select:
    """The SKUs (by id or number) in the store's base or local assortment, each with its price from the store's price
    list, else the base one, and a row per released campaign of the company covering it on the day (or one row
    without)."""
    tenant = _param("tenant_id")
    own, base = prices.alias("own"), prices.alias("base")

    def price_in(price: sa.FromClause, price_list: str) -> sa.ColumnElement[bool]:
        return sa.and_(price.c.tenant_id == tenant, price.c.price_list_id == _param(price_list),
                       price.c.sku_id == skus.c.id)

    covering = campaign_skus.join(campaigns, sa.and_(
        campaigns.c.tenant_id == tenant, campaigns.c.id == campaign_skus.c.campaign_id,
        campaigns.c.company_id == _param("company_id"), campaigns.c.released,
        campaigns.c.valid_from <= _param("day", sa.Date), campaigns.c.valid_to >= _param("day", sa.Date)))
    return (
        sa.select(skus.c.id, skus.c.number, products.c.name,
                  sa.func.coalesce(own.c.price, base.c.price).label("price"), campaigns.c.id.label("campaign_id"),
                  campaigns.c.code, campaigns.c.campaign_type, campaign_skus.c.campaign_price)
        .join(products, sa.and_(products.c.tenant_id == tenant, products.c.id == skus.c.product_id))
        .outerjoin(own, price_in(own, "price_list_id"))
        .outerjoin(base, price_in(base, "base_price_list_id"))
        .outerjoin(covering, sa.and_(campaign_skus.c.tenant_id == tenant, campaign_skus.c.sku_id == skus.c.id))
        .where(skus.c.tenant_id == tenant,
               sa.or_(skus.c.id.in_(sa.bindparam("ids", expanding=True)),
                      skus.c.number.in_(sa.bindparam("numbers", expanding=True))),
               in_assortment(tenant, [_param("base_assortment_id"), _param("local_assortment_id")], skus.c.id)))


_SKU_LOOKUP = _sku_lookup()


def _duplicate_of(conn: sa.Connection, order: dict[str, Any]) -> str | None:
    return conn.scalar(_DUPLICATE, {key: order[key] for key in (
        "tenant_id", "ecom_store_id", "external_order_id", "external_order_number")})


def _store_context(conn: sa.Connection, tenant_id: str, ecom_store_id: str, request: CreateOrder) -> sa.Row:
    return conn.execute(_STORE_CONTEXT, {
        "tenant_id": tenant_id, "ecom_store_id": ecom_store_id, "external_order_id": request.externalOrderId,
        "external_order_number": request.externalOrderNumber, "customer_id": request.customerId}).one()


def _customer(store: sa.Row, customer_id: str | None) -> str:
    if customer_id is None:
        if store.default_customer_id is None:
            raise InvalidRequest([problem("customerId", "REQUIRED", "This eCom store has no default customer; "
                                           "give customerId.")])
        return store.default_customer_id
    if store.known_customer_id is None:
        raise CustomerNotFound(f"No customer {customer_id}.")
    return customer_id


def _skus(conn: sa.Connection, tenant_id: str, store: sa.Row, lines: Sequence[LineItemRequest],
          day: date) -> list[PricedSku]:
    """Each line's SKU, as the eCom store sees it, with its price and campaigns on `day` (one statement);
    SkuNotFound naming every one outside the assortment."""
    rows = conn.execute(_SKU_LOOKUP, {
        "tenant_id": tenant_id, "company_id": store.company_id, "day": day, "price_list_id": store.price_list_id,
        "base_price_list_id": store.base_price_list_id, "base_assortment_id": store.base_assortment_id,
        "local_assortment_id": store.local_assortment_id,
        "ids": sorted({line.skuId for line in lines if line.skuId}),
        "numbers": sorted({line.skuNumber for line in lines if line.skuNumber and not line.skuId})})
    by_id: dict[str, PricedSku] = {}
    for row in rows:  # a row per campaign covering the SKU, or one without
        sku = by_id.setdefault(row.id, PricedSku(row.id, row.number, row.name, row.price, []))
        if row.campaign_id is not None:
            sku.offers.append(Campaign(row.campaign_id, row.code, row.campaign_type, row.campaign_price))
    by_number = {sku.number: sku for sku in by_id.values()}
    found, missing = [], []
    for line in lines:
        sku = by_id.get(line.skuId) if line.skuId else by_number.get(line.skuNumber or "")
        if sku is None:
            missing.append(line.skuId or line.skuNumber or "")
        found.append(sku)
    if missing:
        raise SkuNotFound(f"Not in the eCom store's assortment: SKU {', '.join(dict.fromkeys(missing))}.")
    return found


def _next_number(conn: sa.Connection, tenant_id: str) -> str:
    """The tenant's next order number. Counting up locks the counter row until commit (PostgreSQL), so concurrent
    creations take numbers in turn; two creating the first row collide and the loser runs again."""
    last = conn.scalar(order_numbers.update().where(order_numbers.c.tenant_id == tenant_id)
                       .values(last_number=order_numbers.c.last_number + 1).returning(order_numbers.c.last_number))
    if last is None:
        last = FIRST_ORDER_NUMBER
        conn.execute(order_numbers.insert().values(tenant_id=tenant_id, last_number=last))
    return str(last)


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
