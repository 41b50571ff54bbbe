"""Stock reservations as rows (issue 16): every reserved unit belongs to a row of `stock_reservations`; a parked
cart has a state; stock levels refuse negative on hand and reserved

The upgrade writes an ACTIVE row for what is reserved today (each order line's `reserved_quantity` at its order's
warehouse, each click and collect line at its location; their times the order date and the cart's creation) and
sets every stock level's `reserved` to the sum of its ACTIVE rows. That sum is the service's own figure: a
`reserved` that a back-office document wrote over it (or a figure no order or cart explains) is not kept.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-25 10:00:00
"""

import sqlalchemy as sa
from alembic import op

from db.ids import numbered_ids
from db.tenancy import across_tenants

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_STOCK_INDEX = "ix_stock_levels_tenant_id_sku_id"
_CHECKS = {"ck_stock_levels_on_hand": "on_hand >= 0", "ck_stock_levels_reserved": "reserved >= 0"}
_ACTIVE_CARTS = "ix_click_and_collect_reservations_active"
_BACK_FILL = "the upgrade writes every tenant's reservations and stock levels"


def _id(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.String(length=36), nullable=nullable)


def _decimal(name: str) -> sa.Column:
    return sa.Column(name, sa.Numeric(precision=18, scale=4), nullable=False)


def _instant(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "stock_reservations",
        _id("id"), _id("tenant_id"),
        sa.Column("owner_type", sa.String(length=16), nullable=False),
        _id("owner_id"), _id("location_id"), _id("sku_id"), _decimal("quantity"),
        sa.Column("state", sa.String(length=16), nullable=False),
        _instant("created_time"), _instant("ended_time", nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stock_reservations")),
        sa.CheckConstraint("quantity > 0", name="ck_stock_reservations_quantity"),
    )
    op.create_index(op.f("ix_stock_reservations_tenant_id_owner_id"), "stock_reservations", ["tenant_id", "owner_id"])
    op.create_index(op.f("ix_stock_reservations_tenant_id_location_id_sku_id"), "stock_reservations",
                    ["tenant_id", "location_id", "sku_id"])
    op.add_column("click_and_collect_reservations",
                  sa.Column("state", sa.String(length=16), server_default="ACTIVE", nullable=False))
    op.add_column("click_and_collect_reservations", _instant("ended_time", nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        op.create_index(_ACTIVE_CARTS, "click_and_collect_reservations", ["tenant_id", "created_time"],
                        postgresql_where=sa.text("state = 'ACTIVE'"))
    _back_fill()
    if op.get_bind().dialect.name == "postgresql":
        for name, condition in _CHECKS.items():
            op.create_check_constraint(name, "stock_levels", condition)
    else:  # DuckDB cannot add a CHECK to a table: it is made again with them
        _rebuild_stock_levels(checked=True)


def _back_fill() -> None:
    reservations = sa.table("stock_reservations", *(sa.column(name) for name in (
        "id", "tenant_id", "owner_type", "owner_id", "location_id", "sku_id", "quantity", "state", "created_time")))
    orders = sa.table("orders", sa.column("tenant_id"), sa.column("id"), sa.column("warehouse_id"),
                      sa.column("order_date"))
    lines = sa.table("order_lines", sa.column("tenant_id"), sa.column("id"), sa.column("order_id"),
                     sa.column("sku_id"), sa.column("reserved_quantity"))
    carts = sa.table("click_and_collect_reservations", sa.column("tenant_id"), sa.column("id"),
                     sa.column("created_time"))
    cart_lines = sa.table("click_and_collect_lines", sa.column("tenant_id"), sa.column("id"),
                          sa.column("reservation_id"), sa.column("location_id"), sa.column("sku_id"),
                          sa.column("quantity"))
    position = sa.func.row_number().over()
    order_rows = (sa.select(numbered_ids(position), lines.c.tenant_id, sa.literal("ORDER_LINE"), lines.c.id,
                            orders.c.warehouse_id, lines.c.sku_id, lines.c.reserved_quantity, sa.literal("ACTIVE"),
                            orders.c.order_date)
                  .join(orders, sa.and_(orders.c.tenant_id == lines.c.tenant_id, orders.c.id == lines.c.order_id))
                  .where(lines.c.reserved_quantity > 0, orders.c.warehouse_id.is_not(None)))
    cart_rows = (sa.select(numbered_ids(position), cart_lines.c.tenant_id, sa.literal("CART_LINE"), cart_lines.c.id,
                           cart_lines.c.location_id, cart_lines.c.sku_id, cart_lines.c.quantity, sa.literal("ACTIVE"),
                           carts.c.created_time)
                 .join(carts, sa.and_(carts.c.tenant_id == cart_lines.c.tenant_id,
                                      carts.c.id == cart_lines.c.reservation_id)))
    columns = [column.name for column in reservations.columns]
    for rows in (order_rows, cart_rows):
        op.execute(across_tenants(reservations.insert().from_select(columns, rows), _BACK_FILL))
    levels = sa.table("stock_levels", sa.column("tenant_id"), sa.column("location_id"), sa.column("sku_id"),
                      sa.column("reserved"))
    active = (sa.select(sa.func.coalesce(sa.func.sum(reservations.c.quantity), 0))
              .where(reservations.c.tenant_id == levels.c.tenant_id, reservations.c.location_id == levels.c.location_id,
                     reservations.c.sku_id == levels.c.sku_id, reservations.c.state == "ACTIVE")
              .scalar_subquery())
    op.execute(across_tenants(levels.update().values(reserved=active), _BACK_FILL))


def _stock_levels(checked: bool) -> sa.Table:
    """stock_levels as 0011 left it, with or without the checks of 0012."""
    checks = [sa.CheckConstraint(condition, name=name) for name, condition in _CHECKS.items()] if checked else []
    return sa.Table("stock_levels", sa.MetaData(), _id("tenant_id"), _id("location_id"), _id("sku_id"),
                    _decimal("on_hand"), _decimal("reserved"), _instant("modified_time"),
                    sa.PrimaryKeyConstraint("location_id", "sku_id", name="pk_stock_levels"), *checks)


def _rebuild_stock_levels(checked: bool) -> None:
    """DuckDB: the table made again, with or without the checks, holding the same rows."""
    table = _stock_levels(checked)
    listed = ", ".join(column.name for column in table.columns)
    op.drop_index(_STOCK_INDEX, table_name="stock_levels")  # DuckDB renames no table that an index depends on
    op.rename_table("stock_levels", "stock_levels_0012")
    table.create(op.get_bind())
    op.execute(f"INSERT INTO stock_levels ({listed}) SELECT {listed} FROM stock_levels_0012")
    op.drop_table("stock_levels_0012")
    op.create_index(_STOCK_INDEX, "stock_levels", ["tenant_id", "sku_id"])


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name in _CHECKS:
            op.drop_constraint(name, "stock_levels", type_="check")
        op.drop_index(_ACTIVE_CARTS, table_name="click_and_collect_reservations")
    else:
        _rebuild_stock_levels(checked=False)
    op.drop_column("click_and_collect_reservations", "ended_time")
    op.drop_column("click_and_collect_reservations", "state")
    op.drop_index(op.f("ix_stock_reservations_tenant_id_location_id_sku_id"), table_name="stock_reservations")
    op.drop_index(op.f("ix_stock_reservations_tenant_id_owner_id"), table_name="stock_reservations")
    op.drop_table("stock_reservations")
