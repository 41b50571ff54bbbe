"""Stock that never lies, as a model-based property (issue 16), on both backends: Hypothesis drives random sequences
of everything that moves stock through the store functions (orders created, opened, picked, capture reports,
shipped, returned, cancelled, refund reports; click and collect carts reserved, collected, cancelled, expired;
stock adjusted and counted; back-office documents loaded with and without stock, their `reserved` random), and after
every step checks the whole tenant:

- every location and SKU: reserved = the sum of its ACTIVE reservation rows, 0 ≤ reserved, 0 ≤ on hand, and the
  inventory route shows available = max(on hand − reserved, 0);
- every order line: reserved_quantity = its ACTIVE rows, never delivered beyond its quantity nor returned beyond what
  was delivered, the units in a pending capture still reserved; receipts = invoices; refunds ≤ invoiced;
- every cart: an ACTIVE one holds each line whole (reserved + short), an ended one holds nothing;
- the step's InventoryUpdated events in the outbox name exactly the SKUs whose stock it changed (and the inventory
  route shows those as their rows say).

The orders' amounts are test_order_reconciliation.py's subject; its catalogue, order lines and the step of an order's
life are reused here, with a second warehouse, a retail store for click and collect, and scarce stock.
"""

import contextlib
from collections import defaultdict
from datetime import timedelta
from decimal import Decimal as D
from typing import Any

import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from contracts.errors import InsufficientInventory
from contracts.events import INVENTORY_UPDATED
from db import click_and_collect, fulfilment
from db.backoffice import load_document
from db.ids import new_id
from db.inventory import sku_inventory
from db.order_documents import CAPTURE, INVOICE, PENDING, RECEIPT, REFUND, RETURN_INVOICE, taken, units
from db.order_processing import process_orders
from db.orders import create_order, read_order
from db.schema import (
    click_and_collect_reservations,
    ecom_stores,
    event_outbox,
    orders,
    retail_stores,
    skus,
    stock_levels,
    warehouses,
)
from db.stock import StockRefused, adjust_stock
from db.tenants import create_tenant
from serving.rendering.catalogue import inventory
from tests.stock_checks import assert_stock_is_true
from tests.test_order_reconciliation import Lifecycle, Shop, catalogue, of_kind, order_request, plain_line, step, sum_of

SKUS = ("V0", "V12", "V15", "V25")  # the plain SKUs of the reconciliation catalogue
LOCATIONS = ("W1", "W2", "R1")
HOLD = timedelta(hours=72)
ZERO = D(0)
on_hands = st.integers(min_value=0, max_value=12).map(D)


class StockModel(RuleBasedStateMachine):
    engine: sa.Engine  # set per backend by the test

    def __init__(self) -> None:
        super().__init__()
        engine = self.engine
        self.tenant = create_tenant(engine, f"stock model {new_id()}", is_test=True)
        self.customer = new_id()
        document = catalogue(self.customer)
        document["warehouses"].append({"number": "W2", "name": "Reservelager", "companyNumber": "C1"})
        document["retailStores"] = [{"number": "R1", "name": "Butikk", "companyNumber": "C1", "released": True}]
        for store in document["ecomStores"]:
            store["servingWarehouseNumbers"] = ["W1", "W2"]
        document["stock"] = []
        load_document(engine, self.tenant, document)
        with engine.connect() as conn:
            self.stores = {bool(capture): store_id for store_id, capture in conn.execute(
                sa.select(ecom_stores.c.id, ecom_stores.c.payment_capture_enabled)
                .where(ecom_stores.c.tenant_id == self.tenant))}
            self.sku_ids = dict(conn.execute(sa.select(skus.c.number, skus.c.id)
                                             .where(skus.c.tenant_id == self.tenant)).all())
            self.locations = {number: location_id for table in (warehouses, retail_stores)
                              for number, location_id in conn.execute(
                                  sa.select(table.c.number, table.c.id).where(table.c.tenant_id == self.tenant))}
        self.orders: list[str] = []
        self.carts: list[click_and_collect.Reservation] = []
        self.levels, self.events = self._levels(), self._events()

    # --- stock ----------------------------------------------------------------------------------------------

    @initialize(levels=st.dictionaries(st.tuples(st.sampled_from(LOCATIONS), st.sampled_from(SKUS)), on_hands,
                                       min_size=1))
    def stock_arrives(self, levels: dict[tuple[str, str], D]) -> None:
        self._load_stock(levels, reserved={})

    @rule(location=st.sampled_from(LOCATIONS), sku=st.sampled_from(SKUS), delta=st.integers(-6, 8).map(D))
    def adjust(self, location: str, sku: str, delta: D) -> None:
        try:
            adjust_stock(self.engine, self.tenant, location, sku, delta=delta)
        except StockRefused as refused:
            assert refused.code == "NEGATIVE_ON_HAND"

    @rule(location=st.sampled_from(LOCATIONS), sku=st.sampled_from(SKUS), counted=on_hands)
    def count(self, location: str, sku: str, counted: D) -> None:
        level = adjust_stock(self.engine, self.tenant, location, sku, on_hand=counted)
        assert level.on_hand == counted or not level.changed

    @rule(levels=st.none() | st.dictionaries(st.tuples(st.sampled_from(LOCATIONS), st.sampled_from(SKUS)), on_hands,
                                             min_size=1, max_size=4),
          reserved=st.dictionaries(st.tuples(st.sampled_from(LOCATIONS), st.sampled_from(SKUS)), on_hands),
          name=st.sampled_from(["Vare", "Vare, ny"]))
    def load(self, levels: dict[tuple[str, str], D] | None, reserved: dict[tuple[str, str], D], name: str) -> None:
        """A back-office document with stock (on hand set; the `reserved` it may carry, any figure, changes nothing)
        or without (a SKU renamed)."""
        if levels is None:
            load_document(self.engine, self.tenant, {"skus": [{"number": "V0", "name": name}]})
        else:
            self._load_stock(levels, reserved)

    def _load_stock(self, levels: dict[tuple[str, str], D], reserved: dict[tuple[str, str], D]) -> None:
        load_document(self.engine, self.tenant, {"stock": [
            {"locationNumber": location, "skuNumber": sku, "onHand": str(on_hand),
             **({"reserved": str(reserved[location, sku])} if (location, sku) in reserved else {})}
            for (location, sku), on_hand in levels.items()]})

    # --- orders ---------------------------------------------------------------------------------------------

    @rule(capture=st.booleans(), lines=st.lists(plain_line(), min_size=1, max_size=3), opened=st.booleans())
    def create_order(self, capture: bool, lines: list[dict[str, Any]], opened: bool) -> None:
        held = create_order(self.engine, self.tenant, self.stores[capture], order_request(self.customer, lines))
        self.orders.append(held.order.id)
        if opened:
            assert process_orders(self.engine, self.tenant, [held.order.id]) == 1

    @precondition(lambda self: self.orders)
    @rule()
    def open_received(self) -> None:
        process_orders(self.engine, self.tenant, self.orders)

    @precondition(lambda self: self.orders)
    @rule(data=st.data(), cancel_received=st.booleans())
    def move_an_order(self, data: st.DataObject, cancel_received: bool) -> None:
        """One thing the order allows: test_order_reconciliation.py's step (pick, cancel, capture and refund reports,
        ship, return); a RECEIVED order may be cancelled whole."""
        held = self._order(data)
        if held.order.status == "RECEIVED":
            if cancel_received:
                fulfilment.cancel(self.engine, self.tenant, held.order.id, None)
            return
        life = Lifecycle(self.engine, Shop(self.tenant, self.stores, self.sku_ids, self.locations["W1"],
                                           self.customer), held.order.id)
        # Picking a backorder is refused while its warehouse lacks the units; nothing changes then.
        with contextlib.suppress(InsufficientInventory):
            step(data, life, held)

    def _order(self, data: st.DataObject) -> Any:
        held = read_order(self.engine, self.tenant, None, data.draw(st.sampled_from(self.orders), label="order"))
        assert held is not None
        return held

    # --- click and collect ----------------------------------------------------------------------------------

    @rule(lines=st.lists(st.tuples(st.sampled_from(SKUS), st.integers(1, 4).map(D)), min_size=1, max_size=3))
    def reserve_cart(self, lines: list[tuple[str, D]]) -> None:
        # Refused when short: nothing was reserved then, which the checks after the step hold it to.
        with contextlib.suppress(click_and_collect.Insufficient):
            self.carts.append(click_and_collect.reserve(
                self.engine, self.tenant, self.stores[True], self.locations["R1"], "Kari", None,
                [click_and_collect.WantedLine(self.sku_ids[sku], quantity) for sku, quantity in lines]))

    @precondition(lambda self: self.carts)
    @rule(data=st.data(), collect=st.booleans())
    def end_cart(self, data: st.DataObject, collect: bool) -> None:
        cart = data.draw(st.sampled_from(self.carts), label="cart")
        end = click_and_collect.collect if collect else click_and_collect.cancel
        try:
            ended = end(self.engine, self.tenant, cart.parked_cart_id)
            assert ended.state == ("COLLECTED" if collect else "CANCELLED")
        except click_and_collect.CartNotActive as refused:
            assert refused.cart.state != ("COLLECTED" if collect else "CANCELLED")

    @precondition(lambda self: self.carts)
    @rule(data=st.data())
    def expire_carts(self, data: st.DataObject) -> None:
        """The hold passes for the carts made up to a chosen one (this test's store holds no other tenant's)."""
        cart = data.draw(st.sampled_from(self.carts), label="expiring up to")
        click_and_collect.expire_carts(self.engine, cart.created_time + HOLD, HOLD)

    # --- what must hold after every step ---------------------------------------------------------------------

    @invariant()
    def stock_is_true(self) -> None:
        """The rows explain every reserved unit; the step's InventoryUpdated events name exactly the SKUs whose stock
        it changed, and the inventory route shows each of those as its rows say."""
        assert_stock_is_true(self.engine, self.tenant)
        levels, events = self._levels(), self._events()
        changed = {sku for sku in set(levels) | set(self.levels) if levels.get(sku) != self.levels.get(sku)}
        announced = {sku for sku in events if events[sku] != self.events.get(sku, 0)}
        assert announced == changed, (changed, announced)
        self.levels, self.events = levels, events
        for sku_id in changed:
            found = sku_inventory(self.engine, self.tenant, self.stores[True], sku_id)
            assert found is not None  # every SKU is in the web shop's assortment
            shown = {(row["locationId"], D(row["onHand"]), D(row["reserved"])) for row in inventory(found)["locations"]}
            assert {row for row in shown if row[1] or row[2]} == {row for row in levels[sku_id] if row[1] or row[2]}
            for location in inventory(found)["locations"]:
                assert D(location["available"]) == max(D(location["onHand"]) - D(location["reserved"]), ZERO)

    @invariant()
    def orders_reconcile(self) -> None:
        for order_id in self.orders:
            held = read_order(self.engine, self.tenant, None, order_id)
            assert held is not None
            receipts, invoices = of_kind(held, RECEIPT), of_kind(held, INVOICE)
            return_invoices, refunds = of_kind(held, RETURN_INVOICE), of_kind(held, REFUND)
            for line in held.lines:
                pending = units(of_kind(held, CAPTURE, PENDING), line.id)
                assert line.delivered_quantity + line.cancelled_quantity + pending <= line.quantity
                assert line.delivered_quantity == units(receipts, line.id)
                assert 0 <= line.returned_quantity == units(return_invoices, line.id) <= line.delivered_quantity
                assert pending <= line.reserved_quantity <= line.quantity - line.cancelled_quantity \
                    - line.delivered_quantity
                assert taken(refunds, line.id).gross <= taken(invoices, line.id).gross
            assert [(r.gross_amount, r.vat_amount) for r in receipts] == [(i.gross_amount, i.vat_amount)
                                                                           for i in invoices]
            assert sum_of(refunds).gross <= sum_of(invoices).gross

    @invariant()
    def carts_hold_their_lines(self) -> None:
        for made in self.carts:
            cart = click_and_collect.read_cart(self.engine, self.tenant, made.parked_cart_id)
            assert cart is not None
            for line in cart.lines:
                if cart.state == "ACTIVE":
                    assert line.reserved + line.short == line.quantity and line.collected == 0
                else:
                    assert line.reserved == 0
                    assert line.collected == (line.quantity - line.short if cart.state == "COLLECTED" else 0)

    def _levels(self) -> dict[str, frozenset[tuple[str, D, D]]]:
        """Per SKU: its (location, on hand, reserved) rows."""
        per_sku: dict[str, set[tuple[str, D, D]]] = defaultdict(set)
        with self.engine.connect() as conn:
            for row in conn.execute(sa.select(stock_levels.c.sku_id, stock_levels.c.location_id,
                                              stock_levels.c.on_hand, stock_levels.c.reserved)
                                    .where(stock_levels.c.tenant_id == self.tenant)):
                per_sku[row.sku_id].add((row.location_id, row.on_hand, row.reserved))
        return {sku: frozenset(rows) for sku, rows in per_sku.items()}

    def _events(self) -> dict[str, int]:
        """InventoryUpdated events written so far per SKU, to the web shop (its assortment holds every SKU)."""
        with self.engine.connect() as conn:
            return dict(conn.execute(
                sa.select(event_outbox.c.entity_id, sa.func.count())
                .where(event_outbox.c.tenant_id == self.tenant, event_outbox.c.ecom_store_id == self.stores[True],
                       event_outbox.c.subject == INVENTORY_UPDATED)
                .group_by(event_outbox.c.entity_id)).all())


def test_stock_never_lies_whatever_happens(own_store) -> None:
    _, engine = own_store

    class Model(StockModel):
        pass

    Model.engine = engine
    run_state_machine_as_test(Model, settings=settings(
        max_examples=20, stateful_step_count=25, deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]))
    with engine.connect() as conn:  # the runs did meet the situations the checks are about
        assert conn.scalar(sa.select(sa.func.count()).select_from(click_and_collect_reservations)
                           .where(click_and_collect_reservations.c.state != "ACTIVE")) > 0
        assert conn.scalar(sa.select(sa.func.count()).select_from(orders).where(orders.c.status != "RECEIVED")) > 0
