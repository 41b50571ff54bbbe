"""Order documents (captures, receipts, invoices, shipments, return invoices, refunds), their lines, document
numbers, and the cancelled quantity of an order line

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-24 00:40:00
"""

import sqlalchemy as sa
from alembic import op

from db.migrate import altering_indexed_table

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def _id(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.String(length=36), nullable=nullable)


def _decimal(name: str, nullable: bool = True) -> sa.Column:
    return sa.Column(name, sa.Numeric(precision=18, scale=4), nullable=nullable)


_LINES_INDEXES = {"ix_order_lines_tenant_id_order_id": ["tenant_id", "order_id"]}


def upgrade() -> None:
    altering_indexed_table("order_lines", _LINES_INDEXES, lambda: op.add_column("order_lines", sa.Column(
        "cancelled_quantity", sa.Numeric(precision=18, scale=4), server_default="0", nullable=False)))
    op.create_table(
        "order_documents",
        _id("id"), _id("tenant_id"), _id("order_id"),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("number", sa.String(length=20), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=True),
        sa.Column("created_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_time", sa.DateTime(timezone=True), nullable=True),
        _decimal("gross_amount", nullable=False), _decimal("vat_amount", nullable=False),
        _decimal("freight_gross_amount"), _decimal("freight_vat_amount"), _decimal("reported_amount"),
        _id("capture_id", nullable=True), _id("receipt_id", nullable=True), _id("invoice_id", nullable=True),
        _id("refund_id", nullable=True), _id("return_invoice_id", nullable=True),
        sa.Column("carrier", sa.String(length=100), nullable=True),
        sa.Column("tracking_number", sa.String(length=100), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_order_documents")),
    )
    op.create_index(op.f("ix_order_documents_tenant_id_order_id"), "order_documents", ["tenant_id", "order_id"])
    op.create_table(
        "order_document_lines",
        _id("tenant_id"), _id("order_id"), _id("document_id"), _id("order_line_id"),
        _decimal("quantity", nullable=False), _decimal("gross_amount", nullable=False),
        _decimal("vat_amount", nullable=False),
        sa.PrimaryKeyConstraint("document_id", "order_line_id", name=op.f("pk_order_document_lines")),
    )
    op.create_index(op.f("ix_order_document_lines_tenant_id_order_id"), "order_document_lines",
                    ["tenant_id", "order_id"])
    op.create_table(
        "document_numbers",
        _id("tenant_id"),
        sa.Column("series", sa.String(length=16), nullable=False),
        sa.Column("last_number", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "series", name=op.f("pk_document_numbers")),
    )


def downgrade() -> None:
    op.drop_table("document_numbers")
    op.drop_index(op.f("ix_order_document_lines_tenant_id_order_id"), table_name="order_document_lines")
    op.drop_table("order_document_lines")
    op.drop_index(op.f("ix_order_documents_tenant_id_order_id"), table_name="order_documents")
    op.drop_table("order_documents")
    altering_indexed_table("order_lines", _LINES_INDEXES, lambda: op.drop_column("order_lines", "cancelled_quantity"))
