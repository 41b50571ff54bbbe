"""Stock at a location (warehouse or retail store) per SKU: on hand, set by the back office, and reserved, the sum of
the service's own reservations (db/reservations.py).

On hand is set one way, whoever sets it: adjustments and counts (`adjust_stock`) and back-office documents
(`set_on_hand`, from the loader) lock the stock rows, write the new counts and, where on hand falls below what is
reserved, release the shortfall from the newest reservations there (a count is a fact: ECOMMERCE.md "Stock"), in
the transaction that writes the InventoryUpdated events. Reserving locks the same rows (`locked_levels`), so a
load or a count racing an order or a cart loses neither. PostgreSQL locks the rows (`for_update`: `FOR UPDATE`,
always in (location, SKU) order, before order lines and reservation rows, so no two transactions deadlock); DuckDB
has no row locks, so every writer of stock rows runs its transaction through db/write_turns.py, which takes turns
and tries a write again after it lost to a concurrent writer.
"""

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

import sqlalchemy as sa

from contracts.formats import DECIMAL_INTEGER_DIGITS
from contracts.rendering import decimal
from db.bulk import insert_rows
from db.engine import is_duckdb
from db.ids import utc_now
from db.outbox import sku_events
from db.reservations import Released, release_shortfall
from db.schema import retail_stores, skus, stock_levels, warehouses
from db.write_turns import transaction_with_retries

log = logging.getLogger(__name__)

MAX_ON_HAND = Decimal(10) ** DECIMAL_INTEGER_DIGITS  # DECIMAL(18,4)


@dataclass(frozen=True)
class Location:
    id: str
    number: str
    name: str
    type: str  # WAREHOUSE or RETAIL_STORE


@dataclass(frozen=True)
class Level:
    on_hand: Decimal
    reserved: Decimal

    @property
    def available(self) -> Decimal:
        return max(self.on_hand - self.reserved, Decimal(0))


NOTHING = Level(Decimal(0), Decimal(0))  # what a location without a stock row holds


@dataclass(frozen=True)
class StockLevel:
    location: Location
    sku_id: str
    sku_number: str
    on_hand: Decimal
    reserved: Decimal
    modified_time: datetime | None
    changed: bool
    released: list[Released] = field(default_factory=list)  # what a count below reserved took back

    @property
    def available(self) -> Decimal:
        return Level(self.on_hand, self.reserved).available


@dataclass(frozen=True)
class OnHandChange:
    """One stock row whose on hand a count or a document changed; `before` is None for a row it created."""

    location_id: str
    sku_id: str
    before: Decimal | None
    after: Decimal
    released: list[Released]


class StockNotFound(LookupError):
    """The location or SKU does not exist in the tenant; `field` names which."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class StockRefused(ValueError):
    """The adjustment would leave on hand negative or out of range; nothing was written."""

    def __init__(self, field: str, code: str, message: str) -> None:
        super().__init__(message)
        self.field, self.code = field, code


def adjust_stock(engine: sa.Engine, tenant_id: str, location_number: str, sku_number: str, *,
                 delta: Decimal | None = None, on_hand: Decimal | None = None,
                 location_type: str | None = None, reason: str | None = None) -> StockLevel:
    """Add `delta` to on hand, or set it to the counted `on_hand` (exactly one of them); below what is reserved, the
    shortfall is released from the newest reservations at the location (`released` lists them).

    Writes InventoryUpdated for the SKU only when on hand changed. `reason` goes to the log.
    """
    if (delta is None) == (on_hand is None):
        raise ValueError("give exactly one of delta and on_hand")

    def attempt(conn: sa.Connection) -> StockLevel:
        location = _location(conn, tenant_id, location_number, location_type)
        sku_id = conn.scalar(sa.select(skus.c.id).where(skus.c.tenant_id == tenant_id, skus.c.number == sku_number))
        if sku_id is None:
            raise StockNotFound("skuNumber", f"No SKU {sku_number} in this tenant.")
        return _adjust(conn, tenant_id, location, sku_id, sku_number, delta, on_hand)

    level = transaction_with_retries(engine, attempt)
    if level.changed:
        log.info("stock adjusted: tenant %s location %s SKU %s on hand now %s, %s reserved units released (%s)",
                 tenant_id, location_number, sku_number, decimal(level.on_hand),
                 decimal(sum((item.quantity for item in level.released), Decimal(0))), reason or "no reason given")
    return level


def _location(conn: sa.Connection, tenant_id: str, number: str, wanted_type: str | None) -> Location:
    found = []
    for kind, table in (("WAREHOUSE", warehouses), ("RETAIL_STORE", retail_stores)):
        if wanted_type in (None, kind):
            row = conn.execute(sa.select(table.c.id, table.c.name)
                               .where(table.c.tenant_id == tenant_id, table.c.number == number)).first()
            if row is not None:
                found.append(Location(row.id, number, row.name, kind))
    if not found:
        raise StockNotFound("locationNumber", f"No {_described(wanted_type)} {number} in this tenant.")
    if len(found) > 1:
        raise StockRefused("locationType", "AMBIGUOUS_LOCATION",
                           f"A warehouse and a retail store both have number {number}; give locationType.")
    return found[0]


def _described(location_type: str | None) -> str:
    return {"WAREHOUSE": "warehouse", "RETAIL_STORE": "retail store"}.get(location_type or "",
                                                                         "warehouse or retail store")


def _adjust(conn: sa.Connection, tenant_id: str, location: Location, sku_id: str, sku_number: str,
            delta: Decimal | None, counted: Decimal | None) -> StockLevel:
    key = (location.id, sku_id)
    locked = locked_levels(conn, tenant_id, [location.id], [sku_id])
    held = locked.get(key, NOTHING)
    new = held.on_hand + delta if delta is not None else counted
    assert new is not None
    field_name = "onHandDelta" if delta is not None else "onHand"
    if new < 0:
        raise StockRefused(field_name, "NEGATIVE_ON_HAND", f"On hand would be {decimal(new)}; it cannot be negative.")
    if new >= MAX_ON_HAND:
        raise StockRefused(field_name, "OUT_OF_RANGE", f"On hand would be {decimal(new)}; the most a location holds "
                           f"is {decimal(MAX_ON_HAND - Decimal('0.0001'))}.")
    changes = set_on_hand(conn, tenant_id, {key: new}, utc_now(), locked=locked) if new != held.on_hand else []
    sku_events(conn, tenant_id, [sku_id] if changes else [])
    level = conn.execute(sa.select(stock_levels.c.on_hand, stock_levels.c.reserved, stock_levels.c.modified_time)
                         .where(stock_levels.c.tenant_id == tenant_id, stock_levels.c.location_id == location.id,
                                stock_levels.c.sku_id == sku_id)).first()
    if level is None:  # no change where nothing was ever stocked: no row is made
        return StockLevel(location, sku_id, sku_number, Decimal(0), Decimal(0), None, changed=False)
    return StockLevel(location, sku_id, sku_number, level.on_hand, level.reserved, level.modified_time,
                      changed=bool(changes), released=changes[0].released if changes else [])


def locked_levels(conn: sa.Connection, tenant_id: str, location_ids: Iterable[str],
                  sku_ids: Iterable[str]) -> dict[tuple[str, str], Level]:
    """The stock rows of every named location and SKU that exist, by (location, SKU), locked until the transaction
    ends (PostgreSQL; in one stable order, so that two transactions never deadlock). A missing row holds nothing."""
    query = (sa.select(stock_levels.c.location_id, stock_levels.c.sku_id, stock_levels.c.on_hand,
                       stock_levels.c.reserved)
             .where(stock_levels.c.tenant_id == tenant_id, stock_levels.c.location_id.in_(sorted(set(location_ids))),
                    stock_levels.c.sku_id.in_(sorted(set(sku_ids))))
             .order_by(stock_levels.c.location_id, stock_levels.c.sku_id))
    return {(row.location_id, row.sku_id): Level(row.on_hand, row.reserved)
            for row in conn.execute(for_update(conn, query))}


def set_on_hand(conn: sa.Connection, tenant_id: str, counted: Mapping[tuple[str, str], Decimal], at: datetime, *,
                locked: Mapping[tuple[str, str], Level] | None = None) -> list[OnHandChange]:
    """Set on hand of each (location, SKU) to its counted quantity, creating missing rows (nothing reserved); where
    it falls below what is reserved, the shortfall is released. Locks the rows unless the caller passes them
    `locked`. Returns the rows that changed (or were created); the caller writes the events."""
    if locked is None:
        locked = locked_levels(conn, tenant_id, (location for location, _ in counted),
                               (sku for _, sku in counted))
    created = [(key, on_hand) for key, on_hand in counted.items() if key not in locked]
    updated = [(key, on_hand) for key, on_hand in counted.items() if key in locked and locked[key].on_hand != on_hand]
    insert_rows(conn, stock_levels, [
        {"tenant_id": tenant_id, "location_id": location_id, "sku_id": sku_id, "on_hand": on_hand, "reserved": 0,
         "modified_time": at} for (location_id, sku_id), on_hand in created])
    if updated:
        conn.execute(stock_levels.update().where(
            stock_levels.c.tenant_id == tenant_id, stock_levels.c.location_id == sa.bindparam("key_location_id"),
            stock_levels.c.sku_id == sa.bindparam("key_sku_id")),
            [{"key_location_id": location_id, "key_sku_id": sku_id, "on_hand": on_hand, "modified_time": at}
             for (location_id, sku_id), on_hand in updated])
    changes = [OnHandChange(location_id, sku_id, None, on_hand, []) for (location_id, sku_id), on_hand in created]
    for (location_id, sku_id), on_hand in updated:
        shortfall = locked[location_id, sku_id].reserved - on_hand
        released = release_shortfall(conn, tenant_id, location_id, sku_id, shortfall, at) if shortfall > 0 else []
        changes.append(OnHandChange(location_id, sku_id, locked[location_id, sku_id].on_hand, on_hand, released))
    return changes


def for_update(conn: sa.Connection, query: sa.Select) -> sa.Select:
    """The query locking the stock rows it reads until the transaction ends (PostgreSQL); DuckDB has no row locks,
    its writers take turns in `db.write_turns.write_with_retries`. Lock several rows in one stable order to avoid
    deadlocks."""
    return query if is_duckdb(conn.engine) else query.with_for_update()
