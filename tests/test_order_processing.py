"""Opening received orders in batches, on both backends, in a store of the test's own (no server's processor runs):
the orders of a batch share the stock oldest first, racing processors open each order once, and a batch that fails
is opened one order at a time, so only the order that cannot be opened waits for the next round."""

import logging
import threading
from collections import Counter
from decimal import Decimal

import sqlalchemy as sa

from contracts.orders import CreateOrder
from db.engine import is_duckdb
from db.ids import new_id
from db.order_processing import process_orders, process_received
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
from serving.demo import seed_demo_tenant
from tests.conftest import client_of

ADDRESS = {"street": "Bryggen 1", "postCode": "5003", "city": "Bergen", "countryIsoCode": "NO"}


class Shop:
    """The demo web shop of a fresh tenant (served by warehouse 9001, then 9002) and three of its SKUs."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        world = seed_demo_tenant(engine, f"processing {new_id()}", is_test=False)
        self.tenant_id, self.id = world["id"], client_of(world, "ecom")["resource"]
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

    def receive(self, *lines: tuple[sa.Row, int]) -> str:
        """A new order RECEIVED (as a server stores it before its 202), of the SKUs and quantities."""
        return create_order(self.engine, self.tenant_id, self.id, CreateOrder.model_validate({
            "externalOrderId": new_id(), "externalOrderNumber": new_id(), "deliveryAddress": ADDRESS,
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
    assert process_received(shop.engine) == 0


def test_racing_processors_open_each_order_once(own_store) -> None:
    shop = Shop(own_store[1])
    a = shop.skus[0]
    shop.make_available("9001", a, 30)
    on_hand, reserved = shop.stock("9001", a)
    ids = [shop.receive((a, 1)) for _ in range(24)]
    start, counts = threading.Barrier(4), []

    def processor() -> None:
        start.wait()
        counts.append(process_received(shop.engine))

    threads = [threading.Thread(target=processor) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(counts) == 24 and process_received(shop.engine) == 0
    assert all(shop.opened(order_id) == ("OPEN", "9001", [1]) for order_id in ids)
    assert shop.stock("9001", a) == (on_hand, reserved + 24)
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
            assert process_received(processor) == 2
        holder.rollback()
    assert "opening them one at a time" in caplog.text and blocked in caplog.text
    assert [shop.opened(order_id)[0] for order_id in (first, blocked, last)] == ["OPEN", "RECEIVED", "OPEN"]

    assert process_received(processor) == 1  # the next round
    assert shop.opened(blocked) == ("OPEN", "9001", [1])
    assert (shop.stock("9001", a), shop.stock("9001", b)) == ((before_a[0], before_a[1] + 2),
                                                              (before_b[0], before_b[1] + 1))
    assert [shop.events("OrderCreated")[order_id] for order_id in (first, blocked, last)] == [1, 1, 1]
    if processor is not engine:
        processor.dispose()
