"""Click and collect (ECOMMERCE.md "Click and collect"): parked carts at a retail store of the eCom store's network,
reserved, then collected by the customer, cancelled by the store, or expired when not collected in time.

Reserving checks the request against the store and reserves every line or nothing, in one transaction with its
InventoryUpdated events. Each line is reserved whole at one location (rules/allocation.py): the retail store when it
has the quantity available (on hand − reserved), else the first serving warehouse by priority that has it. Each
line's units are a reservation row (db/reservations.py). Concurrent reservations never oversell: the stock rows are
locked (PostgreSQL, in location and SKU order) or the writers take turns (DuckDB), as for every stock writer
(db/stock.py, db/write_turns.py).

A cart ends once. Collecting consumes its lines' reservations (on hand and reserved both go down at each line's
location), cancelling releases them, expiry releases them as EXPIRED; each writes InventoryUpdated for the SKUs it
changed, on the locked cart, so a repeat answers the same and changes nothing, and any other end of an ended cart is
refused (CartNotActive). A stock count may have taken some of a line's units back (SHORT): collecting takes only
what is still reserved.
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial

import sqlalchemy as sa

from db import reservations
from db.catalogue import store_settings, visible_skus
from db.engine import is_duckdb
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
    stock_reservations,
    warehouses,
)
from db.stock import for_update, locked_levels
from db.tenants import list_tenants
from db.write_turns import transaction_with_retries, write_with_retries
from rules.allocation import Wanted, allocate

log = logging.getLogger(__name__)
ACTIVE, COLLECTED, CANCELLED, EXPIRED = "ACTIVE", "COLLECTED", "CANCELLED", "EXPIRED"
# What becomes of a cart's reservations when it ends.
_ROW_STATE = {COLLECTED: reservations.CONSUMED, CANCELLED: reservations.RELEASED, EXPIRED: reservations.EXPIRED}
EXPIRY_BATCH = 100
ZERO = Decimal(0)


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


@dataclass(frozen=True)
class CartLine(ReservedLine):
    location_number: str
    location_name: str
    reserved: Decimal  # units still reserved (ACTIVE)
    short: Decimal  # units a stock count found missing
    collected: Decimal


@dataclass(frozen=True)
class Cart(Reservation):
    """A parked cart as the back office reads it."""

    lines: list[CartLine]  # type: ignore[assignment]
    ecom_store_id: str
    state: str
    ended_time: datetime | None


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


class CartNotFound(LookupError):
    pass


class CartNotActive(ValueError):
    """The cart ended another way (its `state`); nothing changed."""

    def __init__(self, cart: Cart) -> None:
        super().__init__(cart.state)
        self.cart = cart


def reserve(engine: sa.Engine, tenant_id: str, ecom_store_id: str, retail_store_id: str, reservation_name: str,
            customer_id: str | None, wanted: Sequence[WantedLine]) -> Reservation:
    """Reserve every line or nothing; raises NotInNetwork, UnknownCustomer, UnknownSkus or Insufficient."""

    return transaction_with_retries(engine, lambda conn: _reserve(conn, tenant_id, ecom_store_id, retail_store_id,
                                                                  reservation_name, customer_id, wanted))


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
    levels = locked_levels(conn, tenant_id, candidates, sku_ids)
    allocation = allocate([Wanted(new_id(), line.sku_id, line.quantity) for line in wanted], candidates,
                          {key: level.available for key, level in levels.items()}, whole_lines=True)
    shortages = [(line.line.sku_id, known[line.line.sku_id].number, line.line.quantity)
                 for line in allocation.lines if line.short]
    if shortages:
        raise Insufficient(shortages)

    now = utc_now()
    reserved = [ReservedLine(line.line.line_id, line.line.sku_id, known[line.line.sku_id].number,
                             known[line.line.sku_id].product_name, line.quantity, line.location_id,
                             reserved_from_warehouse=line.location_id != retail_store_id)
                for line in allocation.lines if line.location_id is not None]
    reservation = Reservation(new_id(), new_id(), reservation_name, retail_store_id, store.name, customer_id, now,
                              reserved)
    _save(conn, tenant_id, ecom_store_id, reservation)
    changed = reservations.reserve(conn, tenant_id, [
        reservations.Reservation(reservations.CART_LINE, line.cart_line_id, line.location_id, line.sku_id,
                                 line.quantity) for line in reserved], now)
    sku_events(conn, tenant_id, changed)
    return reservation


def _save(conn: sa.Connection, tenant_id: str, ecom_store_id: str, reservation: Reservation) -> None:
    conn.execute(click_and_collect_reservations.insert().values(
        id=reservation.parked_cart_id, tenant_id=tenant_id, ecom_store_id=ecom_store_id, cart_id=reservation.cart_id,
        reservation_name=reservation.reservation_name, retail_store_id=reservation.retail_store_id,
        customer_id=reservation.customer_id, created_time=reservation.created_time, state=ACTIVE))
    conn.execute(click_and_collect_lines.insert(), [
        {"id": line.cart_line_id, "tenant_id": tenant_id, "reservation_id": reservation.parked_cart_id,
         "line_number": number, "sku_id": line.sku_id, "quantity": line.quantity, "location_id": line.location_id,
         "reserved_from_warehouse": line.reserved_from_warehouse}
        for number, line in enumerate(reservation.lines)])


# --- a cart's life ---------------------------------------------------------------------------------------------


def read_cart(engine: sa.Engine, tenant_id: str, parked_cart_id: str) -> Cart | None:
    with engine.connect() as conn:
        return _read(conn, tenant_id, parked_cart_id)


def collect(engine: sa.Engine, tenant_id: str, parked_cart_id: str) -> Cart:
    """The customer took the goods: what is still reserved leaves each line's location."""
    return _end(engine, tenant_id, parked_cart_id, COLLECTED)


def cancel(engine: sa.Engine, tenant_id: str, parked_cart_id: str) -> Cart:
    """The store cancels the cart: its reservations are released."""
    return _end(engine, tenant_id, parked_cart_id, CANCELLED)


def _end(engine: sa.Engine, tenant_id: str, parked_cart_id: str, state: str) -> Cart:
    """End an ACTIVE cart in `state`; the same end again answers the cart unchanged, another raises CartNotActive."""

    def attempt(conn: sa.Connection) -> Cart:
        header = conn.execute(for_update(conn, _header(tenant_id, parked_cart_id))).first()
        if header is None:
            raise CartNotFound(parked_cart_id)
        if header.state == ACTIVE:
            _end_locked(conn, tenant_id, parked_cart_id, state, utc_now())
        cart = _read(conn, tenant_id, parked_cart_id)
        assert cart is not None
        if cart.state != state:
            raise CartNotActive(cart)
        return cart

    return transaction_with_retries(engine, attempt)


def _header(tenant_id: str, parked_cart_id: str) -> sa.Select:
    return sa.select(click_and_collect_reservations.c.state).where(
        click_and_collect_reservations.c.tenant_id == tenant_id, click_and_collect_reservations.c.id == parked_cart_id)


def _end_locked(conn: sa.Connection, tenant_id: str, parked_cart_id: str, state: str, at: datetime) -> None:
    """End the cart, whose header the caller holds: the stock rows of its lines are locked before its reservations
    change (db/reservations.py)."""
    lines = conn.execute(sa.select(click_and_collect_lines.c.id, click_and_collect_lines.c.location_id,
                                   click_and_collect_lines.c.sku_id)
                         .where(click_and_collect_lines.c.tenant_id == tenant_id,
                                click_and_collect_lines.c.reservation_id == parked_cart_id)).all()
    locked_levels(conn, tenant_id, (line.location_id for line in lines), (line.sku_id for line in lines))
    ended = reservations.end(conn, tenant_id, dict.fromkeys((line.id for line in lines), None), _ROW_STATE[state],
                             at)
    conn.execute(click_and_collect_reservations.update().where(
        click_and_collect_reservations.c.tenant_id == tenant_id, click_and_collect_reservations.c.id == parked_cart_id)
        .values(state=state, ended_time=at))
    sku_events(conn, tenant_id, {item.sku_id for item in ended})


def _read(conn: sa.Connection, tenant_id: str, parked_cart_id: str) -> Cart | None:
    header = conn.execute(
        sa.select(click_and_collect_reservations, retail_stores.c.name.label("retail_store_name"))
        .join(retail_stores, sa.and_(retail_stores.c.tenant_id == tenant_id,
                                     retail_stores.c.id == click_and_collect_reservations.c.retail_store_id))
        .where(click_and_collect_reservations.c.tenant_id == tenant_id,
               click_and_collect_reservations.c.id == parked_cart_id)).first()
    if header is None:
        return None
    store, warehouse = retail_stores.alias("store"), warehouses.alias("warehouse")
    lines = conn.execute(
        sa.select(click_and_collect_lines, skus.c.number.label("sku_number"), products.c.name.label("product_name"),
                  sa.func.coalesce(store.c.number, warehouse.c.number).label("location_number"),
                  sa.func.coalesce(store.c.name, warehouse.c.name).label("location_name"))
        .join(skus, sa.and_(skus.c.tenant_id == tenant_id, skus.c.id == click_and_collect_lines.c.sku_id))
        .outerjoin(products, sa.and_(products.c.tenant_id == tenant_id, products.c.id == skus.c.product_id))
        .outerjoin(store, sa.and_(store.c.tenant_id == tenant_id, store.c.id == click_and_collect_lines.c.location_id))
        .outerjoin(warehouse, sa.and_(warehouse.c.tenant_id == tenant_id,
                                      warehouse.c.id == click_and_collect_lines.c.location_id))
        .where(click_and_collect_lines.c.tenant_id == tenant_id,
               click_and_collect_lines.c.reservation_id == parked_cart_id)
        .order_by(click_and_collect_lines.c.line_number)).all()
    units: dict[tuple[str, str], Decimal] = {  # (line, reservation state) → units
        (row.owner_id, row.state): row.quantity for row in conn.execute(
            sa.select(stock_reservations.c.owner_id, stock_reservations.c.state,
                      sa.func.sum(stock_reservations.c.quantity).label("quantity"))
            .where(stock_reservations.c.tenant_id == tenant_id,
                   stock_reservations.c.owner_id.in_([line.id for line in lines]))
            .group_by(stock_reservations.c.owner_id, stock_reservations.c.state))}
    return Cart(header.id, header.cart_id, header.reservation_name, header.retail_store_id, header.retail_store_name,
                header.customer_id, header.created_time,
                [CartLine(line.id, line.sku_id, line.sku_number, line.product_name or "", line.quantity,
                          line.location_id, line.reserved_from_warehouse, line.location_number, line.location_name,
                          *(units.get((line.id, state), ZERO)
                            for state in (reservations.ACTIVE, reservations.SHORT, reservations.CONSUMED)))
                 for line in lines],
                header.ecom_store_id, header.state, header.ended_time)


@dataclass(frozen=True)
class ActiveCart:
    """An ACTIVE cart as a list of holds shows it: where it waits and what it holds."""

    parked_cart_id: str
    reservation_name: str
    retail_store_number: str
    retail_store_name: str
    ecom_store_id: str
    created_time: datetime
    lines: int
    units: Decimal


def active_carts(engine: sa.Engine, tenant_id: str, *, after: str | None,
                 limit: int) -> tuple[list[ActiveCart], str | None]:
    """A page of the tenant's ACTIVE carts, oldest first, which is soonest to expire (every cart is held equally
    long), after the cart `after`; with the parked cart id to continue after when more follow."""
    carts = click_and_collect_reservations
    held = (sa.select(click_and_collect_lines.c.reservation_id, sa.func.count().label("lines"),
                      sa.func.sum(click_and_collect_lines.c.quantity).label("units"))
            .where(click_and_collect_lines.c.tenant_id == tenant_id)
            .group_by(click_and_collect_lines.c.reservation_id).subquery())
    query = (sa.select(carts.c.id, carts.c.reservation_name, retail_stores.c.number, retail_stores.c.name,
                       carts.c.ecom_store_id, carts.c.created_time, sa.func.coalesce(held.c.lines, 0),
                       sa.func.coalesce(held.c.units, ZERO))
             .join(retail_stores, sa.and_(retail_stores.c.tenant_id == tenant_id,
                                          retail_stores.c.id == carts.c.retail_store_id))
             .outerjoin(held, held.c.reservation_id == carts.c.id)
             .where(carts.c.tenant_id == tenant_id, carts.c.state == ACTIVE)
             .order_by(carts.c.created_time, carts.c.id).limit(limit + 1))  # one more says whether more follow
    with engine.connect() as conn:
        if after is not None:
            # Keyset on (created_time, id): the cart to continue after, if it is still there.
            start = conn.scalar(sa.select(carts.c.created_time).where(carts.c.tenant_id == tenant_id,
                                                                      carts.c.id == after))
            if start is not None:
                query = query.where(sa.or_(carts.c.created_time > start,
                                           sa.and_(carts.c.created_time == start, carts.c.id > after)))
        rows = [ActiveCart(*row) for row in conn.execute(query)]
    page = rows[:limit]
    return page, page[-1].parked_cart_id if len(rows) > limit else None


def active_cart_counts(engine: sa.Engine, tenant_id: str, made_by: datetime) -> tuple[int, int]:
    """The tenant's ACTIVE carts, and how many of them were made at or before `made_by` (the first to expire)."""
    carts = click_and_collect_reservations
    query = sa.select(sa.func.count(), sa.func.count().filter(carts.c.created_time <= made_by)).where(
        carts.c.tenant_id == tenant_id, carts.c.state == ACTIVE)
    with engine.connect() as conn:
        active, due = conn.execute(query).one()
    return active, due


# --- expiry ------------------------------------------------------------------------------------------------------


def expire_carts(engine: sa.Engine, now: datetime, hold: timedelta) -> datetime | None:
    """Expire every ACTIVE cart created `hold` or longer before `now`, tenant by tenant, each cart in its own
    transaction; returns when the next ACTIVE cart falls due (None: there is none). Several processes may do this at
    once: a cart another holds or has ended is passed by."""
    cutoff, next_due = now - hold, None
    for tenant in list_tenants(engine):
        oldest = _expire_tenant(engine, tenant.id, cutoff)
        if oldest is not None and (next_due is None or oldest + hold < next_due):
            next_due = oldest + hold
    return next_due


def _expire_tenant(engine: sa.Engine, tenant_id: str, cutoff: datetime) -> datetime | None:
    """Expire the tenant's carts made at or before `cutoff`, oldest first; returns when its oldest ACTIVE cart left
    was made."""
    active = sa.and_(click_and_collect_reservations.c.tenant_id == tenant_id,
                     click_and_collect_reservations.c.state == ACTIVE)
    while True:
        with engine.connect() as conn:
            due = list(conn.scalars(
                sa.select(click_and_collect_reservations.c.id)
                .where(active, click_and_collect_reservations.c.created_time <= cutoff)
                .order_by(click_and_collect_reservations.c.created_time, click_and_collect_reservations.c.id)
                .limit(EXPIRY_BATCH)))
        expired = 0
        for parked_cart_id in due:
            try:
                expired += write_with_retries(engine, partial(_expire, engine, tenant_id, parked_cart_id, cutoff))
            except Exception:
                log.exception("expiring cart %s of tenant %s failed; trying again next time", parked_cart_id,
                              tenant_id)
        if len(due) < EXPIRY_BATCH or not expired:
            break
    with engine.connect() as conn:
        return conn.scalar(sa.select(sa.func.min(click_and_collect_reservations.c.created_time)).where(active))


def _expire(engine: sa.Engine, tenant_id: str, parked_cart_id: str, cutoff: datetime) -> int:
    with engine.begin() as conn:
        query = _header(tenant_id, parked_cart_id).where(click_and_collect_reservations.c.state == ACTIVE,
                                                         click_and_collect_reservations.c.created_time <= cutoff)
        if not is_duckdb(conn.engine):
            query = query.with_for_update(skip_locked=True)  # another process is ending it
        if conn.execute(query).first() is None:
            return 0
        _end_locked(conn, tenant_id, parked_cart_id, EXPIRED, utc_now())
        return 1
