"""Click and collect reservations (ECOMMERCE.md): stock set aside at a retail store of the eCom store's network.

One transaction checks the request against the store, reserves every line and writes InventoryUpdated, or
writes nothing. Each line is reserved whole at one location (never split): the retail store when it has the
quantity available (on hand − reserved), else the first serving warehouse by priority that has it. Concurrent
reservations never oversell: the stock rows are locked (PostgreSQL, in location and SKU order) or the writers take
turns (DuckDB), as for stock adjustments (db/stock.py).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

import sqlalchemy as sa

from db.catalogue import store_settings, visible_skus
from db.ids import new_id, utc_now
from db.outbox import sku_events
from db.schema import (
    click_and_collect_lines,
    click_and_collect_reservations,
    customers,
    ecom_store_warehouses,
    products,
    retail_stores,
    skus,
    stock_levels,
)
from db.stock import for_update, write_with_retries


@dataclass(frozen=True)
class WantedLine:
    sku_id: str
    quantity: Decimal


@dataclass(frozen=True)
class ReservedLine:
    cart_line_id: str
    sku_id: str
    sku_number: str
    product_name: str
    quantity: Decimal
    location_id: str
    reserved_from_warehouse: bool


@dataclass(frozen=True)
class Reservation:
    parked_cart_id: str
    cart_id: str
    reservation_name: str
    retail_store_id: str
    retail_store_name: str
    customer_id: str | None
    created_time: datetime
    lines: list[ReservedLine]


class NotInNetwork(LookupError):
    """The retail store is not a released store of the eCom store's company (or does not exist)."""


class UnknownCustomer(LookupError):
    pass


class UnknownSkus(LookupError):
    """SKUs outside the eCom store's assortment, in request order."""

    def __init__(self, sku_ids: list[str]) -> None:
        super().__init__(", ".join(sku_ids))
        self.sku_ids = sku_ids


class Insufficient(ValueError):
    """Lines no location could fill; nothing was reserved. Each: (sku_id, sku_number, quantity wanted)."""

    def __init__(self, shortages: list[tuple[str, str, Decimal]]) -> None:
        super().__init__(", ".join(number for _, number, _ in shortages))
        self.shortages = shortages


def reserve(engine: sa.Engine, tenant_id: str, ecom_store_id: str, retail_store_id: str, reservation_name: str,
            customer_id: str | None, wanted: Sequence[WantedLine]) -> Reservation:
    """Reserve every line or nothing; raises NotInNetwork, UnknownCustomer, UnknownSkus or Insufficient."""

    def attempt() -> Reservation:
        with engine.begin() as conn:
            return _reserve(conn, tenant_id, ecom_store_id, retail_store_id, reservation_name, customer_id, wanted)

    return write_with_retries(engine, attempt)


def _reserve(conn: sa.Connection, tenant_id: str, ecom_store_id: str, retail_store_id: str, reservation_name: str,
             customer_id: str | None, wanted: Sequence[WantedLine]) -> Reservation:
    settings = store_settings(conn, tenant_id, ecom_store_id)
    store = conn.execute(sa.select(retail_stores.c.name).where(
        retail_stores.c.tenant_id == tenant_id, retail_stores.c.id == retail_store_id,
        retail_stores.c.company_id == (settings.company_id if settings else None), retail_stores.c.released)).first()
    if store is None:
        raise NotInNetwork(retail_store_id)
    if customer_id is not None and conn.scalar(sa.select(customers.c.id).where(
            customers.c.tenant_id == tenant_id, customers.c.id == customer_id)) is None:
        raise UnknownCustomer(customer_id)
    sku_ids = sorted({line.sku_id for line in wanted})
    known = {row.id: row for row in conn.execute(
        visible_skus(tenant_id, ecom_store_id)
        .with_only_columns(skus.c.id, skus.c.number, products.c.name.label("product_name"))
        .join(products, sa.and_(products.c.tenant_id == tenant_id, products.c.id == skus.c.product_id))
        .where(skus.c.id.in_(sku_ids)))}
    unknown = [line.sku_id for line in wanted if line.sku_id not in known]
    if unknown:
        raise UnknownSkus(list(dict.fromkeys(unknown)))

    # Where a line may come from, best first: the store itself, then the serving warehouses by priority.
    warehouse_ids = list(conn.scalars(
        sa.select(ecom_store_warehouses.c.warehouse_id)
        .where(ecom_store_warehouses.c.tenant_id == tenant_id, ecom_store_warehouses.c.ecom_store_id == ecom_store_id)
        .order_by(ecom_store_warehouses.c.priority, ecom_store_warehouses.c.warehouse_id)))
    candidates = [retail_store_id, *warehouse_ids]
    available = _locked_availability(conn, tenant_id, candidates, sku_ids)

    now, parked_cart_id = utc_now(), new_id()
    reserved: list[ReservedLine] = []
    shortages = []
    for line in wanted:
        sku = known[line.sku_id]
        location = next((loc for loc in candidates
                         if available.get((loc, line.sku_id), Decimal(0)) >= line.quantity), None)
        if location is None:
            shortages.append((line.sku_id, sku.number, line.quantity))
            continue
        available[(location, line.sku_id)] -= line.quantity  # a later line of the same SKU sees what is left
        reserved.append(ReservedLine(new_id(), line.sku_id, sku.number, sku.product_name, line.quantity, location,
                                     reserved_from_warehouse=location != retail_store_id))
    if shortages:
        raise Insufficient(shortages)

    taken: dict[tuple[str, str], Decimal] = {}
    for line in reserved:
        key = (line.location_id, line.sku_id)
        taken[key] = taken.get(key, Decimal(0)) + line.quantity
    for (location_id, sku_id), quantity in sorted(taken.items()):
        conn.execute(stock_levels.update().where(
            stock_levels.c.tenant_id == tenant_id, stock_levels.c.location_id == location_id,
            stock_levels.c.sku_id == sku_id).values(reserved=stock_levels.c.reserved + quantity, modified_time=now))
    reservation = Reservation(parked_cart_id, new_id(), reservation_name, retail_store_id, store.name, customer_id,
                              now, reserved)
    _save(conn, tenant_id, ecom_store_id, reservation)
    sku_events(conn, tenant_id, sku_ids)
    return reservation


def _locked_availability(conn: sa.Connection, tenant_id: str, location_ids: list[str],
                         sku_ids: list[str]) -> dict[tuple[str, str], Decimal]:
    """What each (location, SKU) has available, its stock rows locked in one stable order (no deadlocks). A missing
    row holds nothing, so reserving never creates one."""
    query = (sa.select(stock_levels.c.location_id, stock_levels.c.sku_id, stock_levels.c.on_hand,
                       stock_levels.c.reserved)
             .where(stock_levels.c.tenant_id == tenant_id, stock_levels.c.location_id.in_(location_ids),
                    stock_levels.c.sku_id.in_(sku_ids))
             .order_by(stock_levels.c.location_id, stock_levels.c.sku_id))
    return {(row.location_id, row.sku_id): max(row.on_hand - row.reserved, Decimal(0))
            for row in conn.execute(for_update(conn, query))}


def _save(conn: sa.Connection, tenant_id: str, ecom_store_id: str, reservation: Reservation) -> None:
    conn.execute(click_and_collect_reservations.insert().values(
        id=reservation.parked_cart_id, tenant_id=tenant_id, ecom_store_id=ecom_store_id, cart_id=reservation.cart_id,
        reservation_name=reservation.reservation_name, retail_store_id=reservation.retail_store_id,
        customer_id=reservation.customer_id, created_time=reservation.created_time))
    conn.execute(click_and_collect_lines.insert(), [
        {"id": line.cart_line_id, "tenant_id": tenant_id, "reservation_id": reservation.parked_cart_id,
         "line_number": number, "sku_id": line.sku_id, "quantity": line.quantity, "location_id": line.location_id,
         "reserved_from_warehouse": line.reserved_from_warehouse}
        for number, line in enumerate(reservation.lines)])
