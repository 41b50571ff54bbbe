"""What must hold of a tenant's stock whatever happened to it (issue 16): every reserved unit belongs to an ACTIVE
reservation row, and nothing is negative. Shared by the stock tests, the model-based test among them."""

from collections import defaultdict
from decimal import Decimal

import sqlalchemy as sa

from db.reservations import ACTIVE, ORDER_LINE
from db.schema import order_lines, stock_levels, stock_reservations

ZERO = Decimal(0)


def assert_stock_is_true(engine: sa.Engine, tenant_id: str) -> None:
    """For every location and SKU: reserved = the sum of its ACTIVE reservation rows, 0 ≤ reserved, 0 ≤ on hand; for
    every order line: reserved_quantity = the sum of its ACTIVE rows; every row's quantity above 0."""
    with engine.connect() as conn:
        levels = conn.execute(sa.select(stock_levels.c.location_id, stock_levels.c.sku_id, stock_levels.c.on_hand,
                                        stock_levels.c.reserved)
                              .where(stock_levels.c.tenant_id == tenant_id)).all()
        rows = conn.execute(sa.select(stock_reservations).where(stock_reservations.c.tenant_id == tenant_id)).all()
        lines = dict(conn.execute(sa.select(order_lines.c.id, order_lines.c.reserved_quantity)
                                  .where(order_lines.c.tenant_id == tenant_id)).all())
    active: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    per_line: dict[str, Decimal] = defaultdict(Decimal)
    for row in rows:
        assert row.quantity > 0, row
        assert (row.ended_time is None) == (row.state == ACTIVE), row
        if row.state == ACTIVE:
            active[row.location_id, row.sku_id] += row.quantity
            if row.owner_type == ORDER_LINE:
                per_line[row.owner_id] += row.quantity
    held = {(level.location_id, level.sku_id): level for level in levels}
    assert set(active) <= set(held), "a reservation at a location and SKU without a stock row"
    for key, level in held.items():
        assert level.reserved == active.get(key, ZERO), (key, level, active.get(key))
        assert level.reserved >= 0 and level.on_hand >= 0, (key, level)
    for line_id, reserved in lines.items():
        assert reserved == per_line.get(line_id, ZERO), (line_id, reserved, per_line.get(line_id))
