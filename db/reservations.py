"""Reservations as rows: every reserved unit belongs to a `stock_reservations` row, owned by an order line or a click
and collect cart line, at one location; a stock level's `reserved` is the sum of its ACTIVE rows.

The functions here are the only writers of reservation rows, and they keep `stock_levels.reserved` (and an order
line's `reserved_quantity`, the sum of its ACTIVE rows) equal to those sums in the caller's transaction. The caller
holds the stock rows concerned (db/stock.py `locked_levels`, or the row a count changes) before calling: every
change to a (location, SKU)'s reservations happens under that row's lock, so two transactions never change them at
once, and locking stock rows before order lines and reservation rows keeps PostgreSQL free of deadlocks.

Ending part of a row splits it: the row keeps the units still ACTIVE and a new row (same owner, place and creation
time) takes the ended ones, so a row's quantity never changes once it has ended. Consuming ends the oldest units
first; releasing, expiring and a count's shortfall end the newest first.
"""

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from decimal import Decimal

import sqlalchemy as sa

from db.bulk import insert_rows
from db.ids import new_id
from db.schema import (
    click_and_collect_lines,
    order_document_lines,
    order_documents,
    order_lines,
    orders,
    stock_levels,
    stock_reservations,
)

ORDER_LINE, CART_LINE = "ORDER_LINE", "CART_LINE"
ACTIVE, CONSUMED, RELEASED, EXPIRED, SHORT = "ACTIVE", "CONSUMED", "RELEASED", "EXPIRED", "SHORT"
ZERO = Decimal(0)


@dataclass(frozen=True)
class Reservation:
    """Units to reserve for an owner at a location."""

    owner_type: str
    owner_id: str
    location_id: str
    sku_id: str
    quantity: Decimal


@dataclass(frozen=True)
class Ended:
    """Units of an owner that ended (consumed, released, expired or short) at a location."""

    owner_type: str
    owner_id: str
    location_id: str
    sku_id: str
    quantity: Decimal
    state: str


@dataclass(frozen=True)
class Released(Ended):
    """Units a stock count took back, with what owns them: an order's line, or a parked cart's line."""

    order_id: str | None = None
    order_number: str | None = None
    parked_cart_id: str | None = None


def reserve(conn: sa.Connection, tenant_id: str, wanted: Sequence[Reservation], at: datetime) -> set[str]:
    """ACTIVE rows for `wanted` (each quantity above 0), added to the locations' `reserved` and the order lines'
    `reserved_quantity`; returns the SKUs whose stock changed."""
    wanted = [item for item in wanted if item.quantity > 0]
    insert_rows(conn, stock_reservations, [
        {"id": new_id(), "tenant_id": tenant_id, "owner_type": item.owner_type, "owner_id": item.owner_id,
         "location_id": item.location_id, "sku_id": item.sku_id, "quantity": item.quantity, "state": ACTIVE,
         "created_time": at} for item in wanted])
    _change_sums(conn, tenant_id, [(item.owner_type, item.owner_id, item.location_id, item.sku_id, item.quantity)
                                   for item in wanted], at, consumed=False)
    return {item.sku_id for item in wanted}


def end(conn: sa.Connection, tenant_id: str, units: Mapping[str, Decimal | None], state: str,
        at: datetime) -> list[Ended]:
    """End units of owners' ACTIVE rows (owner id → units, None: all it holds) in `state`. CONSUMED units leave the
    location (on hand goes down with reserved, never below 0); the other states only give them back. Asking more
    than an owner holds ends what it holds."""
    rows = _active(conn, tenant_id, stock_reservations.c.owner_id.in_(sorted(units)),
                   oldest_first=state == CONSUMED)
    left = {owner: quantity for owner, quantity in units.items()}
    taken = []
    for row in rows:
        wanted = left[row.owner_id]
        quantity = row.quantity if wanted is None else min(row.quantity, wanted)
        if quantity > 0:
            taken.append((row, quantity))
            if wanted is not None:
                left[row.owner_id] = wanted - quantity
    return _end_rows(conn, tenant_id, taken, lambda row: state, at, consumed=state == CONSUMED)


def release_shortfall(conn: sa.Connection, tenant_id: str, location_id: str, sku_id: str, shortfall: Decimal,
                      at: datetime) -> list[Released]:
    """A count left on hand `shortfall` below what is reserved at the location: release that much from its newest
    ACTIVE rows. An order line's units go back to waiting for stock (RELEASED); a cart line's are SHORT. Units in a
    capture waiting for its payment report are picked and never released, so a shortfall they make stays."""
    rows = _active(conn, tenant_id, sa.and_(stock_reservations.c.location_id == location_id,
                                            stock_reservations.c.sku_id == sku_id), oldest_first=False)
    releasable = _releasable_order_units(conn, tenant_id, [row.owner_id for row in rows
                                                           if row.owner_type == ORDER_LINE])
    taken = []
    for row in rows:
        if shortfall <= 0:
            break
        limit = releasable.get(row.owner_id, ZERO) if row.owner_type == ORDER_LINE else row.quantity
        quantity = min(row.quantity, limit, shortfall)
        if quantity > 0:
            taken.append((row, quantity))
            shortfall -= quantity
            if row.owner_type == ORDER_LINE:
                releasable[row.owner_id] -= quantity
    ended = _end_rows(conn, tenant_id, taken, lambda row: RELEASED if row.owner_type == ORDER_LINE else SHORT, at,
                      consumed=False)
    return _described(conn, tenant_id, ended)


def active_units(conn: sa.Connection, tenant_id: str, owner_ids: Iterable[str]) -> dict[str, Decimal]:
    """Units each owner holds ACTIVE (owners holding none are left out)."""
    wanted = sorted(set(owner_ids))
    if not wanted:
        return {}
    return {owner: quantity for owner, quantity in conn.execute(
        sa.select(stock_reservations.c.owner_id, sa.func.sum(stock_reservations.c.quantity))
        .where(stock_reservations.c.tenant_id == tenant_id, stock_reservations.c.owner_id.in_(wanted),
               stock_reservations.c.state == ACTIVE)
        .group_by(stock_reservations.c.owner_id))}


def _active(conn: sa.Connection, tenant_id: str, where: sa.ColumnElement[bool], *, oldest_first: bool) -> list[sa.Row]:
    created = stock_reservations.c.created_time
    order = (created, stock_reservations.c.id) if oldest_first else (created.desc(), stock_reservations.c.id.desc())
    return list(conn.execute(sa.select(stock_reservations).where(
        stock_reservations.c.tenant_id == tenant_id, stock_reservations.c.state == ACTIVE, where).order_by(*order)))


def _releasable_order_units(conn: sa.Connection, tenant_id: str, line_ids: list[str]) -> dict[str, Decimal]:
    """Per order line: its ACTIVE units less those in captures waiting for their payment report (db/order_documents.py
    kinds and statuses), which are picked."""
    held = active_units(conn, tenant_id, line_ids)
    if not held:
        return {}
    picked = dict(conn.execute(
        sa.select(order_document_lines.c.order_line_id, sa.func.sum(order_document_lines.c.quantity))
        .join(order_documents, sa.and_(order_documents.c.tenant_id == tenant_id,
                                       order_documents.c.id == order_document_lines.c.document_id))
        .where(order_document_lines.c.tenant_id == tenant_id, order_document_lines.c.order_line_id.in_(sorted(held)),
               order_documents.c.kind == "CAPTURE", order_documents.c.status == "PENDING")
        .group_by(order_document_lines.c.order_line_id)).all())
    return {line: max(quantity - picked.get(line, ZERO), ZERO) for line, quantity in held.items()}


def _end_rows(conn: sa.Connection, tenant_id: str, taken: list[tuple[sa.Row, Decimal]],
              state_of: Callable[[sa.Row], str], at: datetime, *, consumed: bool) -> list[Ended]:
    """End `quantity` of each row (the whole row, or a split-off part of it) in the state `state_of` gives it."""
    whole = [{"key_id": row.id, "state": state_of(row), "ended_time": at}
             for row, quantity in taken if quantity == row.quantity]
    parts = [(row, quantity) for row, quantity in taken if quantity < row.quantity]
    where = sa.and_(stock_reservations.c.tenant_id == tenant_id, stock_reservations.c.id == sa.bindparam("key_id"))
    if whole:
        conn.execute(stock_reservations.update().where(where), whole)
    if parts:
        conn.execute(stock_reservations.update().where(where).values(
            quantity=stock_reservations.c.quantity - sa.bindparam("taken", type_=stock_reservations.c.quantity.type)),
            [{"key_id": row.id, "taken": quantity} for row, quantity in parts])
        insert_rows(conn, stock_reservations, [
            {"id": new_id(), "tenant_id": tenant_id, "owner_type": row.owner_type, "owner_id": row.owner_id,
             "location_id": row.location_id, "sku_id": row.sku_id, "quantity": quantity, "state": state_of(row),
             "created_time": row.created_time, "ended_time": at} for row, quantity in parts])
    ended = [Ended(row.owner_type, row.owner_id, row.location_id, row.sku_id, quantity, state_of(row))
             for row, quantity in taken]
    _change_sums(conn, tenant_id, [(item.owner_type, item.owner_id, item.location_id, item.sku_id, -item.quantity)
                                   for item in ended], at, consumed=consumed)
    return ended


def _change_sums(conn: sa.Connection, tenant_id: str, changes: list[tuple[str, str, str, str, Decimal]],
                 at: datetime, *, consumed: bool) -> None:
    """Add each change (owner type, owner, location, SKU, quantity) to the location's `reserved` (and, when the units
    were consumed, take them off on hand, never below 0) and to an order line's `reserved_quantity`: one
    UPDATE … FROM (VALUES …) per table."""
    per_level: dict[tuple[str, str], Decimal] = {}
    per_line: dict[str, Decimal] = {}
    for owner_type, owner_id, location_id, sku_id, quantity in changes:
        per_level[location_id, sku_id] = per_level.get((location_id, sku_id), ZERO) + quantity
        if owner_type == ORDER_LINE:
            per_line[owner_id] = per_line.get(owner_id, ZERO) + quantity
    if per_level:
        levels = sa.values(sa.column("location_id", sa.String), sa.column("sku_id", sa.String),
                           sa.column("change", stock_levels.c.reserved.type), name="changes").data(
            [(location_id, sku_id, change) for (location_id, sku_id), change in sorted(per_level.items())])
        values = {"reserved": stock_levels.c.reserved + levels.c.change, "modified_time": at}
        if consumed:
            values["on_hand"] = sa.func.greatest(stock_levels.c.on_hand + levels.c.change, 0)
        conn.execute(stock_levels.update().where(
            stock_levels.c.tenant_id == tenant_id, stock_levels.c.location_id == levels.c.location_id,
            stock_levels.c.sku_id == levels.c.sku_id).values(values))
    if per_line:
        lines = sa.values(sa.column("id", sa.String), sa.column("change", order_lines.c.reserved_quantity.type),
                          name="line_changes").data(sorted(per_line.items()))
        conn.execute(order_lines.update().where(order_lines.c.tenant_id == tenant_id, order_lines.c.id == lines.c.id)
                     .values(reserved_quantity=order_lines.c.reserved_quantity + lines.c.change))


def _described(conn: sa.Connection, tenant_id: str, ended: list[Ended]) -> list[Released]:
    """The ended units with their owners' order (id, number) or parked cart."""
    order_of = {row.id: row for row in conn.execute(
        sa.select(order_lines.c.id, orders.c.id.label("order_id"), orders.c.number)
        .join(orders, sa.and_(orders.c.tenant_id == tenant_id, orders.c.id == order_lines.c.order_id))
        .where(order_lines.c.tenant_id == tenant_id,
               order_lines.c.id.in_(sorted({item.owner_id for item in ended if item.owner_type == ORDER_LINE}))))}
    cart_of = dict(conn.execute(
        sa.select(click_and_collect_lines.c.id, click_and_collect_lines.c.reservation_id)
        .where(click_and_collect_lines.c.tenant_id == tenant_id,
               click_and_collect_lines.c.id.in_(sorted({item.owner_id for item in ended
                                                        if item.owner_type == CART_LINE})))).all())
    described = []
    for item in ended:
        order = order_of.get(item.owner_id)
        described.append(Released(**asdict(item), order_id=order.order_id if order else None,
                                  order_number=order.number if order else None,
                                  parked_cart_id=cart_of.get(item.owner_id)))
    return described
