"""Stock on hand at a location (warehouse or retail store) per SKU, adjusted by the back office.

An adjustment reads the row, checks the new count and writes it with its InventoryUpdated events in one
transaction. Concurrent adjustments of one row must not lose updates: PostgreSQL locks the row (`FOR UPDATE`);
DuckDB has no row locks and fails the later of two conflicting transactions instead, so this process's
adjustments take turns on a lock, and a conflict with another writer is tried again a few times.
`write_with_retries` and `for_update` are that approach, for every writer of stock rows (click and collect too).
"""

import itertools
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TypeVar

import duckdb
import psycopg
import sqlalchemy as sa

from contracts.formats import DECIMAL_INTEGER_DIGITS
from contracts.rendering import decimal
from db.engine import is_duckdb
from db.ids import utc_now
from db.outbox import sku_events
from db.schema import retail_stores, skus, stock_levels, warehouses

log = logging.getLogger(__name__)
T = TypeVar("T")

ATTEMPTS = 5
_RETRY_BASE_SECONDS = 0.02
MAX_ON_HAND = Decimal(10) ** DECIMAL_INTEGER_DIGITS  # DECIMAL(18,4)
# One per process: the embedded DuckDB file has one owning process, which then takes turns here.
_DUCKDB_WRITES = threading.Lock()


@dataclass(frozen=True)
class Location:
    id: str
    number: str
    name: str
    type: str  # WAREHOUSE or RETAIL_STORE


@dataclass(frozen=True)
class StockLevel:
    location: Location
    sku_id: str
    sku_number: str
    on_hand: Decimal
    reserved: Decimal
    modified_time: datetime | None
    changed: bool

    @property
    def available(self) -> Decimal:
        return max(self.on_hand - self.reserved, Decimal(0))


class StockNotFound(LookupError):
    """The location or SKU does not exist in the tenant; `field` names which."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class StockRefused(ValueError):
    """The adjustment would leave on hand negative or below what is reserved; nothing was written."""

    def __init__(self, field: str, code: str, message: str) -> None:
        super().__init__(message)
        self.field, self.code = field, code


def adjust_stock(engine: sa.Engine, tenant_id: str, location_number: str, sku_number: str, *,
                 delta: Decimal | None = None, on_hand: Decimal | None = None,
                 location_type: str | None = None, reason: str | None = None) -> StockLevel:
    """Add `delta` to on hand, or set it to the counted `on_hand` (exactly one of them).

    Writes InventoryUpdated for the SKU only when on hand changed. `reason` goes to the log.
    """
    if (delta is None) == (on_hand is None):
        raise ValueError("give exactly one of delta and on_hand")

    def attempt() -> StockLevel:
        with engine.begin() as conn:
            location = _location(conn, tenant_id, location_number, location_type)
            sku_id = conn.scalar(sa.select(skus.c.id).where(skus.c.tenant_id == tenant_id,
                                                          skus.c.number == sku_number))
            if sku_id is None:
                raise StockNotFound("skuNumber", f"No SKU {sku_number} in this tenant.")
            return _adjust(conn, tenant_id, location, sku_id, sku_number, delta, on_hand)

    level = write_with_retries(engine, attempt)
    if level.changed:
        log.info("stock adjusted: tenant %s location %s SKU %s on hand now %s (%s)", tenant_id,
                 location_number, sku_number, decimal(level.on_hand), reason or "no reason given")
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
    query = sa.select(stock_levels.c.on_hand, stock_levels.c.reserved, stock_levels.c.modified_time).where(
        stock_levels.c.tenant_id == tenant_id, stock_levels.c.location_id == location.id,
        stock_levels.c.sku_id == sku_id)
    current = conn.execute(for_update(conn, query)).first()
    held, reserved = (current.on_hand, current.reserved) if current else (Decimal(0), Decimal(0))
    new = held + delta if delta is not None else counted
    field = "onHandDelta" if delta is not None else "onHand"
    if new < 0:
        raise StockRefused(field, "NEGATIVE_ON_HAND", f"On hand would be {decimal(new)}; it cannot be negative.")
    if new >= MAX_ON_HAND:
        raise StockRefused(field, "OUT_OF_RANGE", f"On hand would be {decimal(new)}; the most a location holds is "
                           f"{decimal(MAX_ON_HAND - Decimal('0.0001'))}.")
    if new < reserved:
        raise StockRefused(field, "BELOW_RESERVED",
                           f"On hand would be {decimal(new)}, below the {decimal(reserved)} reserved.")

    def level(modified: datetime | None, changed: bool) -> StockLevel:
        return StockLevel(location, sku_id, sku_number, new, reserved, modified, changed)

    if new == held:
        return level(current.modified_time if current else None, changed=False)
    now = utc_now()
    if current is None:
        conn.execute(stock_levels.insert().values(tenant_id=tenant_id, location_id=location.id, sku_id=sku_id,
                                                  on_hand=new, reserved=0, modified_time=now))
    else:
        conn.execute(stock_levels.update().where(
            stock_levels.c.tenant_id == tenant_id, stock_levels.c.location_id == location.id,
            stock_levels.c.sku_id == sku_id).values(on_hand=new, modified_time=now))
    sku_events(conn, tenant_id, [sku_id])
    return level(now, changed=True)


def _is_conflict(error: sa.exc.DBAPIError) -> bool:
    """A write that lost to a concurrent one: DuckDB's transaction conflict, or on PostgreSQL two first
    adjustments of a row both inserting it (the loser finds the row, locked, when it tries again)."""
    return isinstance(error.orig, (duckdb.TransactionException, psycopg.errors.UniqueViolation))


def for_update(conn: sa.Connection, query: sa.Select) -> sa.Select:
    """The query locking the stock rows it reads until the transaction ends (PostgreSQL); DuckDB has no row locks,
    its writers take turns in `write_with_retries`. Lock several rows in one stable order to avoid deadlocks."""
    return query if is_duckdb(conn.engine) else query.with_for_update()


def write_with_retries(engine: sa.Engine, attempt: Callable[[], T]) -> T:
    """Run `attempt` (its own transaction), again after it lost to a concurrent writer; on DuckDB one at a time."""
    for number in itertools.count(1):
        try:
            if is_duckdb(engine):
                with _DUCKDB_WRITES:
                    return attempt()
            return attempt()
        except sa.exc.DBAPIError as error:
            if number == ATTEMPTS or not _is_conflict(error):
                raise
        time.sleep(random.uniform(0.5, 1.0) * _RETRY_BASE_SECONDS * 2 ** (number - 1))
