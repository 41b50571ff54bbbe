"""Orders: sales orders of eCom stores, their lines, and the per-tenant order number counter

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 23:10:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def _instant(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _decimal(name: str, nullable: bool = True) -> sa.Column:
    return sa.Column(name, sa.Numeric(precision=18, scale=4), nullable=nullable)


def _id(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.String(length=36), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "orders",
        _id("id"), _id("tenant_id"), _id("ecom_store_id"),
        sa.Column("number", sa.String(length=20), nullable=False),
        sa.Column("external_order_id", sa.String(length=100), nullable=False),
        sa.Column("external_order_number", sa.String(length=100), nullable=False),
        _id("customer_id"),
        sa.Column("status", sa.String(length=24), nullable=False),
        _instant("order_date"),
        sa.Column("delivery_date", sa.Date(), nullable=False),
        sa.Column("currency_iso_code", sa.String(length=3), nullable=False),
        sa.Column("delivery_address", sa.Text(), nullable=False),
        sa.Column("invoice_address", sa.Text(), nullable=True),
        sa.Column("freight", sa.Text(), nullable=True),
        _decimal("freight_gross_amount"), _decimal("freight_vat_amount"),
        _decimal("gross_amount", nullable=False), _decimal("vat_amount", nullable=False),
        _id("warehouse_id", nullable=True),
        _instant("modified_time"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_orders")),
        sa.UniqueConstraint("tenant_id", "ecom_store_id", "external_order_id",
                            name=op.f("uq_orders_tenant_id_ecom_store_id_external_order_id")),
        sa.UniqueConstraint("tenant_id", "ecom_store_id", "external_order_number",
                            name=op.f("uq_orders_tenant_id_ecom_store_id_external_order_number")),
        sa.UniqueConstraint("tenant_id", "number", name=op.f("uq_orders_tenant_id_number")),
    )
    op.create_index(op.f("ix_orders_tenant_id_customer_id"), "orders", ["tenant_id", "customer_id"])
    if op.get_bind().dialect.name == "postgresql":
        op.create_index("ix_orders_received", "orders", ["order_date", "id"],
                        postgresql_where=sa.text("status = 'RECEIVED'"))
    op.create_table(
        "order_lines",
        _id("id"), _id("tenant_id"), _id("order_id"),
        sa.Column("line_number", sa.Integer(), nullable=False),
        _id("sku_id"),
        sa.Column("sku_number", sa.String(length=64), nullable=False),
        sa.Column("product_name", sa.String(length=200), nullable=False),
        _decimal("quantity", nullable=False), _decimal("net_unit_price", nullable=False),
        _decimal("vat_rate", nullable=False), _decimal("net_unit_order_discount_amount"),
        sa.Column("campaign_code", sa.String(length=64), nullable=True),
        _id("campaign_id", nullable=True),
        sa.Column("price_type", sa.String(length=16), nullable=False),
        _decimal("gross_amount", nullable=False), _decimal("vat_amount", nullable=False),
        _decimal("reserved_quantity", nullable=False), _decimal("delivered_quantity", nullable=False),
        _decimal("returned_quantity", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_order_lines")),
    )
    op.create_index(op.f("ix_order_lines_tenant_id_order_id"), "order_lines", ["tenant_id", "order_id"])
    op.create_table(
        "order_numbers",
        _id("tenant_id"),
        sa.Column("last_number", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", name=op.f("pk_order_numbers")),
    )


def downgrade() -> None:
    op.drop_table("order_numbers")
    op.drop_index(op.f("ix_order_lines_tenant_id_order_id"), table_name="order_lines")
    op.drop_table("order_lines")
    op.drop_index(op.f("ix_orders_tenant_id_customer_id"), table_name="orders")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_orders_received", table_name="orders")
    op.drop_table("orders")
