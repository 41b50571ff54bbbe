"""Opening received orders in batches, on both backends, in a store of the test's own (no server's processor runs):
the orders of a batch share the stock oldest first, racing processors open each order once, a batch that fails
is opened one order at a time, so only the order that cannot be opened waits for the next round, and orders that
keep failing are counted, backed off and parked without ever holding up newer ones."""

import itertools
import json
import logging
import threading
import time
from collections import Counter
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any
from unittest import mock

import httpx
import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from contracts.orders import CreateOrder
from db import order_processing
from db.customers import put_customer
from db.engine import is_duckdb
from db.ids import new_id, utc_now
from db.order_failures import PARKED, RETRYING, failed_orders, processing_state
from db.order_processing import process_orders, process_received, retry_order, run_order_processor
from db.orders import create_order
from db.schema import (
    assortment_lines,
    ecom_stores,
    event_outbox,
    order_lines,
    orders,
    skus,
    stock_levels,
    warehouses,
)
from db.stock import adjust_stock
from rules.retry import RetryPolicy
from serving.app import create_app
from serving.cli import main
from serving.demo import seed_demo_tenant
from tests.conftest import LiveServer, bearer, client_of, free_port, get_token, wait_for, without_upload_workers
from tests.openapi_check import assert_response_matches

ADDRESS = {"street": "Bryggen 1", "postCode": "5003", "city": "Bergen", "countryIsoCode": "NO"}
# Every failed order is due again at the next round.
AT_ONCE = RetryPolicy(max_attempts=5, base_seconds=0, max_seconds=0)


class Shop:
    """The demo web shop of a fresh tenant (served by warehouse 9001, then 9002) and three of its SKUs."""

    def __init__(self, engine: sa.Engine, name: str | None = None) -> None:
        self.engine = engine
        self.world = seed_demo_tenant(engine, name or f"processing {new_id()}", is_test=False)
        self.tenant_id, self.id = self.world["id"], client_of(self.world, "ecom")["resource"]
        with engine.connect() as conn:
            assortment = conn.scalar(sa.select(ecom_stores.c.base_assortment_id).where(ecom_stores.c.id == self.id))
            self.skus = list(conn.execute(
                sa.select(skus.c.id, skus.c.number)
                .join(assortment_lines, sa.and_(assortment_lines.c.sku_id == skus.c.id,
                                                assortment_lines.c.assortment_id == assortment))
                .where(skus.c.tenant_id == self.tenant_id, skus.c.product_id.is_not(None))
                .order_by(skus.c.number).limit(3)))

    def stock(self, warehouse: str, sku: sa.Row) -> tuple[Decimal, Decimal]:
        """(on hand, reserved) of the SKU at the warehouse."""
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(stock_levels.c.on_hand, stock_levels.c.reserved)
                               .join(warehouses, warehouses.c.id == stock_levels.c.location_id)
                               .where(stock_levels.c.tenant_id == self.tenant_id, warehouses.c.number == warehouse,
                                      stock_levels.c.sku_id == sku.id)).first()
        return (row.on_hand, row.reserved) if row else (Decimal(0), Decimal(0))

    def make_available(self, warehouse: str, sku: sa.Row, count: int) -> None:
        adjust_stock(self.engine, self.tenant_id, warehouse, sku.number, on_hand=self.stock(warehouse, sku)[1] + count)

    def receive(self, *lines: tuple[sa.Row, int], customer_id: str | None = None) -> str:
        """A new order RECEIVED (as a server stores it before its 202), of the SKUs and quantities (for the store's
        default customer unless another is named)."""
        return create_order(self.engine, self.tenant_id, self.id, CreateOrder.model_validate({
            "externalOrderId": new_id(), "externalOrderNumber": new_id(), "deliveryAddress": ADDRESS,
            "customerId": customer_id,
            "lineItems": [{"skuId": sku.id, "quantity": quantity, "netUnitPrice": "100", "vatRate": "25"}
                          for sku, quantity in lines]})).order.id

    def opened(self, order_id: str) -> tuple[str, str | None, list[Decimal]]:
        """(status, warehouse number, reserved quantity of each line) of the order."""
        with self.engine.connect() as conn:
            order = conn.execute(sa.select(orders.c.status, warehouses.c.number)
                                 .outerjoin(warehouses, warehouses.c.id == orders.c.warehouse_id)
                                 .where(orders.c.id == order_id)).one()
            reserved = list(conn.scalars(sa.select(order_lines.c.reserved_quantity).where(
                order_lines.c.order_id == order_id).order_by(order_lines.c.line_number)))
        return order.status, order.number, reserved

    def events(self, subject: str) -> Counter:
        with self.engine.connect() as conn:
            return Counter(conn.scalars(sa.select(event_outbox.c.entity_id).where(
                event_outbox.c.tenant_id == self.tenant_id, event_outbox.c.subject == subject)))


def test_a_batch_shares_the_stock_oldest_order_first(own_store) -> None:
    shop = Shop(own_store[1])
    a, b, _ = shop.skus
    for warehouse, sku, count in (("9001", a, 10), ("9002", a, 10), ("9001", b, 0), ("9002", b, 3)):
        shop.make_available(warehouse, sku, count)
    before = {(warehouse, sku.number): shop.stock(warehouse, sku) for warehouse in ("9001", "9002") for sku in (a, b)}
    ids = [shop.receive((a, 4)), shop.receive((a, 4)), shop.receive((a, 4)), shop.receive((a, 1), (b, 5)),
           shop.receive((b, 3))]

    assert process_orders(shop.engine, shop.tenant_id, ids) == 5  # one transaction
    assert [shop.opened(order_id) for order_id in ids] == [
        ("OPEN", "9001", [4]), ("OPEN", "9001", [4]),
        ("OPEN", "9002", [4]),  # 9001 has 2 left
        ("OPEN", "9001", [1, 0]),  # nowhere has 5 of b: the first warehouse reserves what it has, the rest waits
        ("OPEN", "9002", [3])]
    for (warehouse, number), added in {("9001", a.number): 9, ("9002", a.number): 4, ("9001", b.number): 0,
                                       ("9002", b.number): 3}.items():
        on_hand, reserved = shop.stock(warehouse, a if number == a.number else b)
        assert (on_hand, reserved) == (before[warehouse, number][0], before[warehouse, number][1] + added)
        assert reserved <= on_hand
    assert [shop.events("OrderCreated")[order_id] for order_id in ids] == [1] * 5
    assert shop.events("InventoryUpdated")[a.id] >= 1 and shop.events("InventoryUpdated")[b.id] >= 1
    assert process_orders(shop.engine, shop.tenant_id, ids) == 0  # a second pass finds them open
    assert process_received(shop.engine, AT_ONCE) == 0


def test_racing_processors_open_each_order_once(own_store) -> None:
    """Several rounds, since a processor's claim can meet another's poll only in a narrow window: each round, four
    processors started together open all 24 orders between them, each once, and leave nothing for the next."""
    shop = Shop(own_store[1])
    a = shop.skus[0]
    shop.make_available("9001", a, 8 * 24)
    on_hand, reserved = shop.stock("9001", a)
    for round_number in range(1, 9):
        ids = [shop.receive((a, 1)) for _ in range(24)]
        start, counts = threading.Barrier(4), []

        def processor(start: threading.Barrier, counts: list[int]) -> None:
            start.wait()
            counts.append(process_received(shop.engine, AT_ONCE))

        threads = [threading.Thread(target=processor, args=(start, counts)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sum(counts) == 24, f"round {round_number}: the processors opened {counts}"
        assert process_received(shop.engine, AT_ONCE) == 0
        assert all(shop.opened(order_id) == ("OPEN", "9001", [1]) for order_id in ids)
        assert shop.stock("9001", a) == (on_hand, reserved + 24 * round_number)
        assert [shop.events("OrderCreated")[order_id] for order_id in ids] == [1] * 24


def test_a_failing_batch_is_opened_one_order_at_a_time(own_store, caplog) -> None:
    engine = own_store[1]
    shop = Shop(engine)
    a, b, _ = shop.skus
    shop.make_available("9001", a, 5)
    shop.make_available("9001", b, 5)
    before_a, before_b = shop.stock("9001", a), shop.stock("9001", b)
    first, blocked, last = shop.receive((a, 1)), shop.receive((b, 1)), shop.receive((a, 1))
    # Another writer holds the stock row of b at 9001: on PostgreSQL its row lock outlasts the processor's lock
    # timeout, on DuckDB the processor's update of it conflicts. Either way the batch fails, and so does the order
    # of b on its own; the others open.
    processor = engine if is_duckdb(engine) else sa.create_engine(
        engine.url, connect_args={"options": "-c timezone=UTC -c lock_timeout=200"})
    with engine.connect() as holder:
        holder.execute(stock_levels.update().where(
            stock_levels.c.tenant_id == shop.tenant_id, stock_levels.c.sku_id == b.id,
            stock_levels.c.location_id == sa.select(warehouses.c.id).where(
                warehouses.c.tenant_id == shop.tenant_id, warehouses.c.number == "9001").scalar_subquery())
            .values(modified_time=stock_levels.c.modified_time))
        with caplog.at_level(logging.ERROR, logger="db.order_processing"):
            assert process_received(processor, AT_ONCE) == 2
        holder.rollback()
    assert "opening them one at a time" in caplog.text and blocked in caplog.text
    assert [shop.opened(order_id)[0] for order_id in (first, blocked, last)] == ["OPEN", "RECEIVED", "OPEN"]
    failed = processing_state(engine, shop.tenant_id, blocked)
    assert (failed.attempts, failed.parked) == (1, False) and failed.last_error.startswith(
        "TransactionException" if is_duckdb(engine) else "LockNotAvailable")

    assert process_received(processor, AT_ONCE) == 1  # the next round
    assert shop.opened(blocked) == ("OPEN", "9001", [1])
    assert processing_state(engine, shop.tenant_id, blocked).attempts == 0  # opened: its failures are forgotten
    assert (shop.stock("9001", a), shop.stock("9001", b)) == ((before_a[0], before_a[1] + 2),
                                                              (before_b[0], before_b[1] + 1))
    assert [shop.events("OrderCreated")[order_id] for order_id in (first, blocked, last)] == [1, 1, 1]
    if processor is not engine:
        processor.dispose()


class RefusedOpening:
    """A real fault in the database: it refuses to open any order of one customer. PostgreSQL: a trigger raises.
    DuckDB, which has no triggers: a unique index on the warehouse of that customer's orders (null for everyone
    else's), which an open order of the customer at the warehouse all its orders are served from already fills."""

    def __init__(self, shop: Shop) -> None:
        self.engine, self.customer_id, self.sku = shop.engine, new_id(), shop.skus[1]
        put_customer(shop.engine, shop.tenant_id, self.customer_id, {"first_name": "Kari", "last_name": "Poison"})
        shop.make_available("9001", self.sku, 1000)  # so every order of the SKU is served from 9001
        with self.engine.begin() as conn:
            if is_duckdb(self.engine):
                assert process_orders(shop.engine, shop.tenant_id, [shop.receive((self.sku, 1),
                                                                                 customer_id=self.customer_id)])
                conn.execute(sa.text("CREATE UNIQUE INDEX refused_opening ON orders (tenant_id, (CASE WHEN "
                                     f"customer_id = '{self.customer_id}' THEN warehouse_id END))"))
            else:
                conn.execute(sa.text(
                    "CREATE FUNCTION refuse_opening() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                    "RAISE EXCEPTION 'the test refuses to open order %', OLD.id; END $$"))
                conn.execute(sa.text(
                    "CREATE TRIGGER refuse_opening BEFORE UPDATE ON orders FOR EACH ROW WHEN (NEW.status = 'OPEN' "
                    f"AND NEW.customer_id = '{self.customer_id}') EXECUTE FUNCTION refuse_opening()"))
        self.error = "ConstraintException" if is_duckdb(self.engine) else "RaiseException"

    def lift(self) -> None:
        with self.engine.begin() as conn:
            if is_duckdb(self.engine):
                conn.execute(sa.text("DROP INDEX refused_opening"))
            else:
                conn.execute(sa.text("DROP TRIGGER refuse_opening ON orders"))
                conn.execute(sa.text("DROP FUNCTION refuse_opening"))


def _statuses(shop: Shop, order_ids: list[str]) -> Counter:
    with shop.engine.connect() as conn:
        return Counter(conn.scalars(sa.select(orders.c.status).where(orders.c.tenant_id == shop.tenant_id,
                                                                     orders.c.id.in_(order_ids))))


def test_a_hundred_and_fifty_failing_orders_do_not_hold_up_a_newer_one(own_store) -> None:
    """The issue's starvation: the oldest orders all fail to open (the database refuses them), and one good order
    waits behind them. A processor running with the default backoff opens the good one within seconds; the others
    stay RECEIVED with one failed attempt each, waiting for their next."""
    settings, engine = own_store
    shop = Shop(engine)
    refused = RefusedOpening(shop)
    sku = refused.sku
    failing = [shop.receive((sku, 1), customer_id=refused.customer_id) for _ in range(150)]
    good = shop.receive((sku, 1))
    stop, wake = threading.Event(), threading.Event()
    processor = threading.Thread(target=run_order_processor,
                                 args=(engine, RetryPolicy.of(settings.order), stop, wake, 0.1))
    started = time.monotonic()
    processor.start()
    try:
        wait_for(lambda: shop.opened(good)[0] == "OPEN", 120, "the good order to open")
        took = time.monotonic() - started
    finally:
        stop.set()
        wake.set()
        processor.join()
    print(f"the good order opened {took:.1f} s after the processor started, behind 150 failing ones")
    assert _statuses(shop, failing) == {"RECEIVED": 150}
    states = [processing_state(engine, shop.tenant_id, order_id) for order_id in failing]
    assert all(state.attempts >= 1 and not state.parked and state.last_error.startswith(refused.error)
               for state in states)
    assert shop.events("OrderCreated")[good] == 1 and not any(shop.events("OrderCreated")[id_] for id_ in failing)


def test_orders_arriving_faster_than_rounds_open_together_and_one_after_a_quiet_spell_at_once(own_store) -> None:
    """Rounds of opening start at least ROUND_SECONDS apart (here 3 s, so that this machine's speed hardly
    matters): an order after a quiet spell is opened in a round that starts at once, and ten that arrive one after
    another, each waking the processor, are opened in one or two rounds rather than one each."""
    settings, engine = own_store
    shop = Shop(engine)
    sku = shop.skus[0]
    rounds: list[tuple[float, int]] = []  # each round's start and how many it opened
    spacing: list[float] = []  # before each round after the first, how long the processor waited to space it

    def counted(round_engine: sa.Engine, *args: Any, **kwargs: Any) -> int:
        started = time.monotonic()
        opened = process_received(round_engine, *args, **kwargs)
        if round_engine is engine:  # not the session server's processor, which the patch reaches too
            rounds.append((started, opened))
        return opened

    class Stop(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:  # the processor's stop.wait is its spacing
            spacing.append(max(0.0, timeout or 0.0))
            return super().wait(timeout)

    stop, wake = Stop(), threading.Event()
    with mock.patch.object(order_processing, "ROUND_SECONDS", 3.0), \
            mock.patch.object(order_processing, "process_received", counted):
        processor = threading.Thread(target=run_order_processor,
                                     args=(engine, RetryPolicy.of(settings.order), stop, wake, 60.0))
        processor.start()
        try:
            wait_for(lambda: rounds, 30, "the first round")  # nothing waits: it opens none
            time.sleep(3.1)  # a quiet spell longer than a round's spacing
            first = shop.receive((sku, 1))
            wake.set()
            wait_for(lambda: shop.opened(first)[0] == "OPEN", 30, "the first order to open")
            batch = []
            for _ in range(10):
                batch.append(shop.receive((sku, 1)))
                wake.set()
            wait_for(lambda: _statuses(shop, batch) == {"OPEN": 10}, 30, "the ten to open")
        finally:
            stop.set()
            wake.set()
            processor.join()
    starts, opened = zip(*rounds, strict=True)
    assert opened[:2] == (0, 1) and sum(opened[2:]) == 10 and len([n for n in opened[2:] if n]) <= 2, opened
    assert all(later - earlier >= 3.0 for earlier, later in itertools.pairwise(starts)), starts
    assert spacing[0] == 0.0, f"the round after the quiet spell waited {spacing[0]:.2f} s to start"
    assert all(waited > 0.0 for waited in spacing[1:len(rounds) - 1]), spacing  # the ten's rounds were spaced


def test_orders_another_transaction_holds_do_not_hide_newer_ones(own_store) -> None:
    """PostgreSQL: a processor's claim skips orders another transaction has locked; its poll does too, so 150
    locked orders at the head of the line do not fill its page while a newer order waits behind them."""
    engine = own_store[1]
    if is_duckdb(engine):
        pytest.skip("DuckDB has no row locks: a second writer conflicts instead (the failing-batch test)")
    shop = Shop(engine)
    sku = shop.skus[0]
    held = [shop.receive((sku, 1)) for _ in range(150)]
    good = shop.receive((sku, 1))
    with engine.connect() as holder:
        holder.execute(sa.select(orders.c.id).where(orders.c.tenant_id == shop.tenant_id, orders.c.id.in_(held))
                       .with_for_update())
        assert process_received(engine, AT_ONCE) == 1
        assert shop.opened(good)[0] == "OPEN"
        holder.rollback()
    assert process_received(engine, AT_ONCE) == 150  # released: they open, none counted as failed
    assert failed_orders(engine, shop.tenant_id, RETRYING, after=None, limit=10) == ([], None)


def test_a_retry_answers_what_a_processor_opening_the_order_meanwhile_made_of_it(own_store) -> None:
    """PostgreSQL: once the retry forgot an order's failures, a processor's poll may take the order before the
    retry's claim, which then passes over it. The retry waits for that processor and answers its outcome."""
    engine = own_store[1]
    if is_duckdb(engine):
        pytest.skip("DuckDB has no row locks: the retry's write waits for the processor's turn")
    shop = Shop(engine)
    order_id = shop.receive((shop.skus[0], 1))
    answered: list[Any] = []
    with engine.connect() as processor:  # a processor in the middle of opening it
        processor.execute(sa.select(orders.c.id).where(orders.c.tenant_id == shop.tenant_id, orders.c.id == order_id)
                          .with_for_update())
        retrying = threading.Thread(target=lambda: answered.append(retry_order(engine, shop.tenant_id, order_id,
                                                                               AT_ONCE)))
        processor_pid = processor.scalar(sa.text("SELECT pg_backend_pid()"))
        retrying.start()

        def retry_waits_for_the_processor() -> bool:
            with engine.connect() as conn:
                return bool(conn.scalar(sa.text("SELECT count(*) FROM pg_stat_activity "
                                                "WHERE :pid = ANY(pg_blocking_pids(pid))"), {"pid": processor_pid}))

        # Its claim passed over the order (SKIP LOCKED); it then waits for the processor, or answers at once.
        wait_for(lambda: retry_waits_for_the_processor() or not retrying.is_alive(), 30, "the retry to answer or wait")
        assert retrying.is_alive(), f"the retry answered while the processor held the order: {answered}"
        processor.execute(orders.update().where(orders.c.tenant_id == shop.tenant_id, orders.c.id == order_id)
                          .values(status="OPEN"))
        processor.commit()
        retrying.join(timeout=30)
    assert answered[0].status == "OPEN"


def test_an_order_failing_every_attempt_is_parked_and_an_operator_retries_it(own_store) -> None:
    engine = own_store[1]
    shop = Shop(engine)
    refused = RefusedOpening(shop)
    sku = refused.sku
    bad = [shop.receive((sku, 1), customer_id=refused.customer_id) for _ in range(3)]
    retry = RetryPolicy(max_attempts=3, base_seconds=0, max_seconds=0)
    for attempt in (1, 2, 3):
        process_received(engine, retry)
        assert {processing_state(engine, shop.tenant_id, order_id).attempts for order_id in bad} == {attempt}
    assert all(processing_state(engine, shop.tenant_id, order_id).parked for order_id in bad)
    good = shop.receive((sku, 1))
    assert process_received(engine, retry) == 1  # parked orders are not tried again
    assert {processing_state(engine, shop.tenant_id, order_id).attempts for order_id in bad} == {3}
    assert shop.opened(good)[0] == "OPEN"

    page, after = failed_orders(engine, shop.tenant_id, PARKED, after=None, limit=2)
    assert [state.order_id for state in page] == sorted(bad)[:2] and after == sorted(bad)[1]
    assert [state.order_id for state in failed_orders(engine, shop.tenant_id, PARKED, after=after, limit=2)[0]] \
        == sorted(bad)[2:]
    assert failed_orders(engine, shop.tenant_id, RETRYING, after=None, limit=10) == ([], None)

    again = retry_order(engine, shop.tenant_id, bad[0], retry)  # the fault is still there: one attempt counted
    assert (again.status, again.attempts, again.parked) == ("RECEIVED", 1, False)
    assert again.last_error.startswith(refused.error)
    refused.lift()
    opened = retry_order(engine, shop.tenant_id, page[1].number, retry)  # by number, as read off the list
    assert (opened.order_id, opened.status, opened.attempts, opened.last_error) == (page[1].order_id, "OPEN", 0, None)
    assert retry_order(engine, shop.tenant_id, page[1].number, retry) == opened  # again: nothing left to do
    assert retry_order(engine, shop.tenant_id, new_id(), retry) is None
    assert process_received(engine, retry) == 1  # the one being retried; the parked one waits for an operator
    assert [state.order_id for state in failed_orders(engine, shop.tenant_id, PARKED, after=None, limit=9)[0]] \
        == [bad[2]]
    assert retry_order(engine, shop.tenant_id, bad[2], retry).status == "OPEN"
    assert _statuses(shop, bad) == {"OPEN": 3}


def test_operators_list_and_retry_failed_orders_through_the_admin_api_and_directly(own_store) -> None:
    """A server whose processor parks an order after two failed attempts; the operator lists the parked orders and
    retries them, over HTTP and with `pia admin order` through the API (--url) and on the database directly."""
    settings, engine = own_store
    shop = Shop(engine)
    refused = RefusedOpening(shop)
    bad = sorted(shop.receive((refused.sku, 1), customer_id=refused.customer_id) for _ in range(3))
    port = free_port()
    served = without_upload_workers(settings).with_changes(order={"max_attempts": 2, "retry_base_seconds": 0.0})
    server = LiveServer(create_app(served, engine, issuer=f"http://127.0.0.1:{port}"), port)
    admin = client_of(shop.world, "admin")
    direct = {"PIA_DATA_DIR": str(settings.data_dir), "PIA_DATABASE_URL": settings.database_url, "PIA_ADMIN_URL": "",
              "PIA_SECRET_KEY": settings.secret_key.get_secret_value()}
    through_api = {**direct, "PIA_ADMIN_URL": server.url, "PIA_ADMIN_CLIENT_ID": admin["clientId"],
                   "PIA_ADMIN_CLIENT_SECRET": admin["clientSecret"]}

    def pia(env: dict[str, str], *args: str) -> Any:
        result = CliRunner().invoke(main, ["admin", "order", *args, "--tenant", shop.tenant_id], env=env)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    server.start()
    try:
        wait_for(lambda: all(processing_state(engine, shop.tenant_id, order_id).parked for order_id in bad), 60,
                 "the failing orders to be parked")
        with httpx.Client(base_url=server.url, timeout=30) as http:
            headers = bearer(get_token(http, shop.world, admin))
            orders_path = f"/admin/v1/tenants/{shop.tenant_id}/orders"
            listed = http.get(orders_path, params={"processing": "FAILED"}, headers=headers)
            assert_response_matches(document_of(http), listed)
            assert [item["orderId"] for item in listed.json()["items"]] == bad
            assert all(item["status"] == "RECEIVED" and item["attempts"] == 2 and item["parked"]
                       and item["nextAttemptTime"] is None and item["lastError"].startswith(refused.error)
                       for item in listed.json()["items"])
            assert http.get(orders_path, params={"processing": "RETRYING"}, headers=headers).json() == {
                "items": [], "nextAfter": None}
            assert pia(through_api, "list", "--processing", "FAILED") == listed.json()
            first_page = pia(through_api, "list", "--processing", "FAILED", "--limit", "2")
            assert first_page["nextAfter"] == bad[1]

            refused.lift()
            retried = http.post(f"{orders_path}/{bad[0]}/retry", headers=headers)
            assert_response_matches(document_of(http), retried)
            state = retried.json()
            assert (state["orderId"], state["status"], state["attempts"], state["parked"]) == (bad[0], "OPEN", 0, False)
            assert pia(through_api, "retry", bad[1])["status"] == "OPEN"
            unknown = http.post(f"{orders_path}/{new_id()}/retry", headers=headers)
            assert_response_matches(document_of(http), unknown)
            assert unknown.status_code == 404
    finally:
        server.stop()
    assert [item["orderId"] for item in pia(direct, "list", "--processing", "FAILED")["items"]] == [bad[2]]
    assert pia(direct, "retry", bad[2])["status"] == "OPEN"
    assert pia(direct, "list", "--processing", "FAILED") == {"items": [], "nextAfter": None}
    assert _statuses(shop, bad) == {"OPEN": 3}


def document_of(http: httpx.Client) -> dict[str, Any]:
    return http.get("/v1/openapi.json").json()


def test_any_sequence_of_orders_rounds_time_and_retries_keeps_attempts_as_the_model_says(own_store) -> None:
    """A model of processing, on a shop whose database refuses one customer's orders: random sequences of good and
    refused orders, processing rounds, time passing (or not) and operator retries. After every step each order's
    status, attempts and parking are the model's, every wait lies within the backoff's bounds, a good order never
    waits behind refused ones, and OrderCreated is written once per opened order."""
    engine = own_store[1]
    shop = Shop(engine)
    refused = RefusedOpening(shop)
    retry = RetryPolicy(max_attempts=3, base_seconds=10, max_seconds=30)
    started = utc_now()

    class Processing(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.now = started
            self.attempts: dict[str, int] = {}  # every order of this run: failed attempts so far
            self.refused: set[str] = set()
            self.due: set[str] = set()  # refused orders a round would try now
            self.opened: set[str] = set()

        def clock(self) -> datetime:
            return self.now

        @rule(is_refused=st.booleans())
        def receive(self, is_refused: bool) -> None:
            order_id = shop.receive((refused.sku, 1), customer_id=refused.customer_id if is_refused else None)
            self.attempts[order_id] = 0
            if is_refused:
                self.refused.add(order_id)
                self.due.add(order_id)

        @rule()
        def process_round(self) -> None:
            waiting_good = set(self.attempts) - self.refused - self.opened
            assert process_received(engine, retry, clock=self.clock) == len(waiting_good)
            self.opened |= waiting_good
            for order_id in self.due:
                self.attempts[order_id] += 1
            self.due.clear()

        @rule(seconds=st.sampled_from([1, 4, 31]))
        def time_passes(self, seconds: int) -> None:
            self.now += timedelta(seconds=seconds)
            for order_id in self.refused:
                state = processing_state(engine, shop.tenant_id, order_id)
                if state.retry_at is not None and state.retry_at <= self.now:
                    self.due.add(order_id)

        @precondition(lambda self: self.refused)
        @rule(data=st.data())
        def operator_retries(self, data: st.DataObject) -> None:
            order_id = data.draw(st.sampled_from(sorted(self.refused)))
            state = retry_order(engine, shop.tenant_id, order_id, retry, clock=self.clock)
            assert (state.status, state.attempts) == ("RECEIVED", 1)
            self.attempts[order_id] = 1
            self.due.discard(order_id)

        @invariant()
        def states_are_the_models(self) -> None:
            for order_id, attempts in self.attempts.items():
                state = processing_state(engine, shop.tenant_id, order_id)
                assert state.status == ("OPEN" if order_id in self.opened else "RECEIVED")
                assert state.attempts == attempts <= retry.max_attempts
                assert state.parked == (attempts == retry.max_attempts)
                if 0 < attempts < retry.max_attempts:
                    step = min(retry.max_seconds, retry.base_seconds * 2 ** (attempts - 1))
                    wait = (state.retry_at - state.last_attempt_time).total_seconds()
                    assert step / 2 <= wait <= step
                    assert state.last_error.startswith(refused.error)
            created = shop.events("OrderCreated")
            assert all(created[order_id] == (order_id in self.opened) for order_id in self.attempts)

        def teardown(self) -> None:
            # The next run starts from a clean line: this run's waiting orders leave it.
            with engine.begin() as conn:
                conn.execute(orders.update().where(orders.c.tenant_id == shop.tenant_id,
                                                   orders.c.id.in_(list(self.attempts)), orders.c.status == "RECEIVED")
                             .values(status="CANCELLED"))

    run_state_machine_as_test(Processing, settings=settings(max_examples=8, stateful_step_count=12, deadline=None))
