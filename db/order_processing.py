"""Processing of received orders: RECEIVED → OPEN, reserving the stock, in one transaction with its events.

Orders are opened in batches: the orders of a tenant waiting at a round (up to BATCH) in one transaction, each step
one statement for the whole batch (claim, read lines, warehouses and stock, write reservations, events), so an
order costs a share of ten statements rather than some eighteen of its own. A batch that fails is opened again one order
at a time, so one bad order holds up no other: it stays RECEIVED, and its failed attempt is counted
(db/order_failures.py): it is tried again after a backoff, and after max_attempts it is parked for an operator. The
poll passes over orders that wait for their next attempt or are parked, so however many old orders fail, newer ones
still open.

The transition is conditional (`UPDATE … WHERE status = 'RECEIVED'`), so an order is reserved once, however many
processors (the server's thread, `pia worker`, a restarted process) reach it. On PostgreSQL the claim skips orders
another processor holds (`FOR UPDATE SKIP LOCKED`): racing processors share the waiting orders instead of queueing
behind each other, and never wait on each other's order rows; the poll skips locked orders too, so orders held
elsewhere do not fill its page. On DuckDB a second writer fails with a write conflict and, run again, finds the
orders OPEN.

Where the stock comes from (SPEC.md is silent; rules/allocation.py): the first serving warehouse, by priority, that
has every line available; when none has, the first by priority, which reserves what it has (reserved never exceeds
on hand) and leaves the rest of each line a backorder (`reserved_quantity` below `quantity`). A store without a
serving warehouse opens its orders without reserving. The orders of a batch take stock in order date order, each
seeing what the earlier ones left. Each reserved line is a reservation row (db/reservations.py).
"""

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from decimal import Decimal

import sqlalchemy as sa

from contracts import events as subjects
from db.engine import is_duckdb
from db.ids import utc_now
from db.order_failures import (
    ProcessingState,
    failure_text,
    forget_failures,
    next_retry_time,
    processing_state,
    record_failures,
    waiting_for_retry,
)
from db.orders import OPEN, RECEIVED, order_key
from db.outbox import pair_events, sku_events
from db.polls import PollGate
from db.reservations import ORDER_LINE, Reservation, reserve
from db.schema import ecom_store_warehouses, order_lines, orders
from db.stock import locked_levels
from db.tenancy import across_tenants
from db.write_turns import transaction_with_retries
from rules.allocation import Wanted, allocate
from rules.retry import RetryPolicy

log = logging.getLogger(__name__)
BATCH = 100
ROUND_SECONDS = 0.1  # the shortest time from one round of opening orders to the next


def received_orders(engine: sa.Engine, now: datetime, limit: int = BATCH) -> list[tuple[str, str]]:
    """(tenant id, order id) of orders to try now, oldest first, across tenants (like the pipeline's poll, the
    processor serves every tenant): RECEIVED, neither parked nor waiting for their next attempt, and on PostgreSQL
    not held by another transaction (a processor opening them, an operator cancelling one)."""
    query = (sa.select(orders.c.tenant_id, orders.c.id).where(orders.c.status == RECEIVED, ~waiting_for_retry(now))
             .order_by(orders.c.order_date, orders.c.id).limit(limit))
    if not is_duckdb(engine):
        query = query.with_for_update(skip_locked=True, of=orders)
    with engine.connect() as conn:
        return [(row.tenant_id, row.id) for row in conn.execute(across_tenants(query, "the processors' poll"))]


def received_backlog(engine: sa.Engine, tenant_id: str | None = None) -> sa.Row:
    """How many orders wait to be opened (RECEIVED), of every tenant (metrics) or of one (the console), and when
    the oldest of them came in."""
    query = sa.select(sa.func.count().label("waiting"), sa.func.min(orders.c.order_date).label("oldest")) \
        .where(orders.c.status == RECEIVED)
    if tenant_id is not None:
        query = query.where(orders.c.tenant_id == tenant_id)
    with engine.connect() as conn:
        return conn.execute(query if tenant_id else across_tenants(query, "the service's metrics")).one()


def process_order(engine: sa.Engine, tenant_id: str, order_id: str) -> bool:
    """Open the order if it is still RECEIVED; False when another processor already did."""
    return process_orders(engine, tenant_id, [order_id]) == 1


def process_orders(engine: sa.Engine, tenant_id: str, order_ids: Sequence[str]) -> int:
    """Open those of the tenant's orders (oldest first) that are still RECEIVED, in one transaction; how many."""

    return transaction_with_retries(engine, lambda conn: _open(conn, tenant_id, order_ids))


def _open(conn: sa.Connection, tenant_id: str, order_ids: Sequence[str]) -> int:
    now = utc_now()
    stores = dict(conn.execute(_claim(conn, tenant_id, order_ids).values(status=OPEN, modified_time=now)
                               .returning(orders.c.id, orders.c.ecom_store_id)).all())
    if not stores:
        return 0
    lines_of: dict[str, list[sa.Row]] = {}
    for line in conn.execute(sa.select(order_lines.c.order_id, order_lines.c.id, order_lines.c.sku_id,
                                       order_lines.c.quantity)
                             .where(order_lines.c.tenant_id == tenant_id, order_lines.c.order_id.in_(sorted(stores)))
                             .order_by(order_lines.c.order_id, order_lines.c.line_number)):
        lines_of.setdefault(line.order_id, []).append(line)
    warehouses_of: dict[str, list[str]] = {}
    for row in conn.execute(sa.select(ecom_store_warehouses.c.ecom_store_id, ecom_store_warehouses.c.warehouse_id)
                            .where(ecom_store_warehouses.c.tenant_id == tenant_id,
                                   ecom_store_warehouses.c.ecom_store_id.in_(sorted(set(stores.values()))))
                            .order_by(ecom_store_warehouses.c.ecom_store_id, ecom_store_warehouses.c.priority,
                                      ecom_store_warehouses.c.warehouse_id)):
        warehouses_of.setdefault(row.ecom_store_id, []).append(row.warehouse_id)
    served = [order_id for order_id in order_ids if order_id in stores and warehouses_of.get(stores[order_id])]
    if served:
        _reserve(conn, tenant_id, now, [(order_id, lines_of.get(order_id, []), warehouses_of[stores[order_id]])
                                        for order_id in served])
    pair_events(conn, tenant_id, subjects.ORDER_CREATED, [(store, order_id) for order_id, store in stores.items()])
    forget_failures(conn, tenant_id, sorted(stores))
    return len(stores)


def _claim(conn: sa.Connection, tenant_id: str, order_ids: Sequence[str]) -> sa.Update:
    """The UPDATE that opens those of the orders still RECEIVED (and, on PostgreSQL, not held by another
    processor, which is opening them)."""
    waiting = sa.and_(orders.c.tenant_id == tenant_id, orders.c.id.in_(sorted(order_ids)), orders.c.status == RECEIVED)
    if not is_duckdb(conn.engine):
        waiting = orders.c.id.in_(sa.select(orders.c.id).where(waiting).with_for_update(skip_locked=True))
    return orders.update().where(orders.c.tenant_id == tenant_id, orders.c.status == RECEIVED, waiting)


def _reserve(conn: sa.Connection, tenant_id: str, now: datetime,
             served: list[tuple[str, list[sa.Row], list[str]]]) -> None:
    """Reserve the stock of each (order, its lines, its serving warehouses by priority), oldest order first, each
    seeing what the earlier ones left (rules/allocation.py, an order's lines together), on the locked stock rows;
    records each order's warehouse and writes InventoryUpdated per SKU reserved."""
    levels = locked_levels(conn, tenant_id, {warehouse for _, _, warehouses in served for warehouse in warehouses},
                           {line.sku_id for _, lines, _ in served for line in lines})
    stock_left: Mapping[tuple[str, str], Decimal] = {key: level.available for key, level in levels.items()}
    wanted: list[Reservation] = []
    warehouse_of: list[tuple[str, str]] = []
    for order_id, lines, warehouse_ids in served:
        allocation = allocate([Wanted(line.id, line.sku_id, line.quantity) for line in lines], warehouse_ids,
                              stock_left, whole_lines=False)
        stock_left, warehouse_id = allocation.left, allocation.location_id
        assert warehouse_id is not None  # a served order's store has warehouses
        warehouse_of.append((order_id, warehouse_id))
        wanted += [Reservation(ORDER_LINE, line.line.line_id, warehouse_id, line.line.sku_id, line.quantity)
                   for line in allocation.lines]
    served_by = sa.values(sa.column("id", sa.String), sa.column("warehouse_id", sa.String),
                          name="served").data(warehouse_of)
    conn.execute(orders.update().where(orders.c.tenant_id == tenant_id, orders.c.id == served_by.c.id)
                 .values(warehouse_id=served_by.c.warehouse_id))
    sku_events(conn, tenant_id, reserve(conn, tenant_id, wanted, now))


def _open_each(engine: sa.Engine, tenant_id: str, order_ids: Sequence[str]) -> tuple[int, dict[str, str]]:
    """Open the orders one at a time; how many opened, and the error of each that failed (it stays RECEIVED)."""
    opened, errors = 0, {}
    for order_id in order_ids:
        try:
            opened += process_order(engine, tenant_id, order_id)
        except Exception as error:
            log.exception("opening order %s of tenant %s failed", order_id, tenant_id)
            errors[order_id] = failure_text(error)
    return opened, errors


def _open_batch(engine: sa.Engine, tenant_id: str, order_ids: Sequence[str], retry: RetryPolicy,
                now: datetime) -> tuple[int, int]:
    """Open the tenant's orders in one transaction, else one at a time, counting each failure; (opened, failed)."""
    try:
        return process_orders(engine, tenant_id, order_ids), 0
    except Exception:
        log.exception("opening %d orders of tenant %s at once failed; opening them one at a time",
                      len(order_ids), tenant_id)
    opened, errors = _open_each(engine, tenant_id, order_ids)
    record_failures(engine, tenant_id, errors, retry, now)
    return opened, len(errors)


def process_received(engine: sa.Engine, retry: RetryPolicy, stop: threading.Event | None = None,
                     clock: Callable[[], datetime] = utc_now) -> int:
    """Process every order waiting now; returns how many this call opened."""
    opened = 0
    while batch := received_orders(engine, clock()):
        handled = 0
        by_tenant: dict[str, list[str]] = {}
        for tenant_id, order_id in batch:
            by_tenant.setdefault(tenant_id, []).append(order_id)
        for tenant_id, order_ids in by_tenant.items():
            if stop is not None and stop.is_set():
                return opened
            done, failed = _open_batch(engine, tenant_id, order_ids, retry, clock())
            opened, handled = opened + done, handled + done + failed
        # Polled again while the page was full, or while some of it was skipped: another processor's poll held
        # those orders for an instant when this claim came, and that processor may have found them held by a
        # third. Orders another processor is opening stay locked, so the next poll passes over them. A page all
        # opened or failed ends the round, so an order that fails is not tried again in it.
        if len(batch) < BATCH and handled == len(batch):
            break
    return opened


def retry_order(engine: sa.Engine, tenant_id: str, id_or_number: str, retry: RetryPolicy,
                clock: Callable[[], datetime] = utc_now) -> ProcessingState | None:
    """An operator's retry: the order's attempts count from zero and it is tried at once (a failure counts as its
    first attempt, and it is retried with backoff as usual). Its state after; None for an unknown order."""
    def forget(conn: sa.Connection) -> str | None:
        found = conn.scalar(sa.select(orders.c.id).where(orders.c.tenant_id == tenant_id, order_key(id_or_number)))
        if found is not None:
            forget_failures(conn, tenant_id, [found])
        return found

    if (order_id := transaction_with_retries(engine, forget)) is None:
        return None
    opened, errors = _open_each(engine, tenant_id, [order_id])
    record_failures(engine, tenant_id, errors, retry, clock())
    if not opened and not errors:
        _await_other_processor(engine, tenant_id, order_id)
    return processing_state(engine, tenant_id, order_id)


def _await_other_processor(engine: sa.Engine, tenant_id: str, order_id: str) -> None:
    """PostgreSQL: once its failures were forgotten, a processor's poll may have taken the order, and the retry's
    claim passed over it (SKIP LOCKED). Wait for that processor's transaction, so the state read next is its outcome
    rather than a RECEIVED it is about to change. (On DuckDB the two writes take turns: the retry saw its end.)"""
    if is_duckdb(engine):
        return
    with engine.begin() as conn:
        conn.execute(sa.select(orders.c.id).where(orders.c.tenant_id == tenant_id, orders.c.id == order_id)
                     .with_for_update())


def run_order_processor(engine: sa.Engine, retry: RetryPolicy, stop: threading.Event, wake: threading.Event,
                        poll_seconds: float) -> None:
    """Process orders until stopped: at once when woken (a new order), else every poll_seconds, which also picks
    up orders a stopped process left RECEIVED and orders whose next attempt has come; on DuckDB a round after one
    that opened nothing asks the database only once something was committed or the next attempt has come
    (db.polls). A failure of the loop itself (the database gone) is logged and tried again at the next round."""
    gate = PollGate(engine)
    while not stop.is_set():
        woken = wake.is_set()
        wake.clear()
        started = time.monotonic()
        if woken or gate.open():
            gate.polling()
            try:
                if not process_received(engine, retry, stop):
                    now = utc_now()
                    gate.idle(next_retry_time(engine, now), now)
            except Exception:
                log.exception("order processing failed; trying again in %.1f s", poll_seconds)
        wake.wait(poll_seconds)
        # Rounds come at most every ROUND_SECONDS: while orders arrive faster, those of that moment are opened as
        # one batch (a transaction of a dozen statements) rather than each in one of their own.
        stop.wait(started + ROUND_SECONDS - time.monotonic())

