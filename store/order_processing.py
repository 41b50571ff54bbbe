"""Processing of received orders: RECEIVED → OPEN, reserving the stock, in one transaction with its events.

The transition is conditional (`UPDATE … WHERE status = 'RECEIVED'`): PostgreSQL makes a second processor wait
for the first and then find nothing to update; on DuckDB the second fails with a write conflict and, run again,
finds the order OPEN. So an order is reserved once, however many processors (the server's thread, `pia worker`,
a restarted process) reach it.

Where the stock comes from (SPEC.md is silent): the first serving warehouse, by priority, that has every line
available; when none has, the first by priority, which reserves what it has (reserved never exceeds on hand) and
leaves the rest of each line a backorder (`reserved_quantity` below `quantity`). A store without a serving
warehouse opens its orders without reserving.
"""

import logging
import threading
from decimal import Decimal

import sqlalchemy as sa

from contracts import events as subjects
from events.outbox import order_event, sku_events
from store.engine import is_duckdb
from store.ids import utc_now
from store.orders import OPEN, RECEIVED
from store.schema import ecom_store_warehouses, order_lines, orders, stock_levels
from store.stock import write_with_retries

log = logging.getLogger(__name__)
BATCH = 100


def received_orders(engine: sa.Engine, limit: int = BATCH) -> list[tuple[str, str]]:
    """(tenant id, order id) of orders waiting for processing, oldest first, across tenants (like the
    pipeline's poll, the processor serves every tenant)."""
    with engine.connect() as conn:
        return [(row.tenant_id, row.id) for row in conn.execute(
            sa.select(orders.c.tenant_id, orders.c.id).where(orders.c.status == RECEIVED)
            .order_by(orders.c.order_date, orders.c.id).limit(limit))]


def process_order(engine: sa.Engine, tenant_id: str, order_id: str) -> bool:
    """Open the order if it is still RECEIVED; False when another processor already did."""

    def attempt() -> bool:
        with engine.begin() as conn:
            return _open(conn, tenant_id, order_id)

    return write_with_retries(engine, attempt)


def _open(conn: sa.Connection, tenant_id: str, order_id: str) -> bool:
    now = utc_now()
    opened = conn.execute(orders.update().where(orders.c.tenant_id == tenant_id, orders.c.id == order_id,
                                                orders.c.status == RECEIVED)
                          .values(status=OPEN, modified_time=now))
    if opened.rowcount != 1:
        return False
    ecom_store_id = conn.scalar(sa.select(orders.c.ecom_store_id).where(orders.c.tenant_id == tenant_id,
                                                                        orders.c.id == order_id))
    lines = list(conn.execute(sa.select(order_lines.c.id, order_lines.c.sku_id, order_lines.c.quantity)
                              .where(order_lines.c.tenant_id == tenant_id, order_lines.c.order_id == order_id)))
    wanted: dict[str, Decimal] = {}
    for line in lines:
        wanted[line.sku_id] = wanted.get(line.sku_id, Decimal(0)) + line.quantity
    warehouse_ids = list(conn.scalars(
        sa.select(ecom_store_warehouses.c.warehouse_id)
        .where(ecom_store_warehouses.c.tenant_id == tenant_id, ecom_store_warehouses.c.ecom_store_id == ecom_store_id)
        .order_by(ecom_store_warehouses.c.priority, ecom_store_warehouses.c.warehouse_id)))
    if warehouse_ids:
        available = _available(conn, tenant_id, warehouse_ids, sorted(wanted))
        warehouse_id = next((warehouse for warehouse in warehouse_ids
                             if all(available.get((warehouse, sku), 0) >= qty for sku, qty in wanted.items())),
                            warehouse_ids[0])
        taken = dict.fromkeys(wanted, Decimal(0))
        for line in lines:  # lines of one SKU share its available stock in line order
            reserved = min(line.quantity, available.get((warehouse_id, line.sku_id), Decimal(0)) - taken[line.sku_id])
            taken[line.sku_id] += reserved
            conn.execute(order_lines.update().where(order_lines.c.tenant_id == tenant_id,
                                                    order_lines.c.id == line.id).values(reserved_quantity=reserved))
        for sku_id in sorted(sku for sku, quantity in taken.items() if quantity > 0):
            conn.execute(stock_levels.update().where(
                stock_levels.c.tenant_id == tenant_id, stock_levels.c.location_id == warehouse_id,
                stock_levels.c.sku_id == sku_id).values(reserved=stock_levels.c.reserved + taken[sku_id],
                                                        modified_time=now))
        conn.execute(orders.update().where(orders.c.tenant_id == tenant_id, orders.c.id == order_id)
                     .values(warehouse_id=warehouse_id))
        sku_events(conn, tenant_id, [sku for sku, quantity in taken.items() if quantity > 0])
    order_event(conn, tenant_id, ecom_store_id, subjects.ORDER_CREATED, order_id)
    return True


def _available(conn: sa.Connection, tenant_id: str, warehouse_ids: list[str],
               sku_ids: list[str]) -> dict[tuple[str, str], Decimal]:
    """On hand less reserved per (warehouse, SKU); the rows stay locked until commit on PostgreSQL, taken in
    one order so that two processors never deadlock."""
    query = (sa.select(stock_levels.c.location_id, stock_levels.c.sku_id, stock_levels.c.on_hand,
                       stock_levels.c.reserved)
             .where(stock_levels.c.tenant_id == tenant_id, stock_levels.c.location_id.in_(warehouse_ids),
                    stock_levels.c.sku_id.in_(sku_ids))
             .order_by(stock_levels.c.location_id, stock_levels.c.sku_id))
    if not is_duckdb(conn.engine):
        query = query.with_for_update()
    return {(row.location_id, row.sku_id): max(row.on_hand - row.reserved, Decimal(0))
            for row in conn.execute(query)}


def process_received(engine: sa.Engine, stop: threading.Event | None = None) -> int:
    """Process every order waiting now; returns how many this call opened."""
    opened = 0
    while batch := received_orders(engine):
        for tenant_id, order_id in batch:
            if stop is not None and stop.is_set():
                return opened
            opened += process_order(engine, tenant_id, order_id)
        if len(batch) < BATCH:
            break
    return opened


def run_order_processor(engine: sa.Engine, stop: threading.Event, wake: threading.Event,
                        poll_seconds: float) -> None:
    """Process orders until stopped: at once when woken (a new order), else every poll_seconds, which also picks
    up orders a stopped process left RECEIVED. A failure is logged and tried again at the next round."""
    while not stop.is_set():
        wake.clear()
        try:
            process_received(engine, stop)
        except Exception:
            log.exception("order processing failed; trying again in %.1f s", poll_seconds)
        wake.wait(poll_seconds)
