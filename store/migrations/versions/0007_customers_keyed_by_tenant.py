"""Customers keyed by (tenant_id, id): callers choose customer ids, and two tenants may hold the same one

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 22:00:00

An integrator that keeps the same customer ids in its test tenant and its production tenant must be able to
PUT both; with `id` alone as the key the second tenant's PUT would collide with the first. The membership rows
are keyed by tenant the same way.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_CUSTOMER_COLUMNS = ("id", "tenant_id", "first_name", "last_name", "email", "email_key", "phone", "birth_date",
                     "delivery_address", "invoice_address", "ext", "created_time", "modified_time")
_MEMBERSHIP_COLUMNS = ("tenant_id", "customer_id", "loyalty_program_id", "member_number", "member_since")


def _customers_table(name: str, key: Sequence[str]) -> None:
    op.create_table(
        name,
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("first_name", sa.String(length=200), nullable=True),
        sa.Column("last_name", sa.String(length=200), nullable=True),
        sa.Column("email", sa.String(length=320), nullable=True),
        sa.Column("email_key", sa.String(length=320), nullable=True),
        sa.Column("phone", sa.String(length=16), nullable=True),
        sa.Column("birth_date", sa.Date(), nullable=True),
        sa.Column("delivery_address", sa.Text(), nullable=True),
        sa.Column("invoice_address", sa.Text(), nullable=True),
        sa.Column("ext", sa.Text(), nullable=True),
        sa.Column("created_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("modified_time", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(*key, name="pk_customers"),
        sa.UniqueConstraint("tenant_id", "email_key", name="uq_customers_tenant_id_email_key"),
        sa.UniqueConstraint("tenant_id", "phone", name="uq_customers_tenant_id_phone"),
    )


def _memberships_table(name: str, key: Sequence[str]) -> None:
    op.create_table(
        name,
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("customer_id", sa.String(length=36), nullable=False),
        sa.Column("loyalty_program_id", sa.String(length=36), nullable=False),
        sa.Column("member_number", sa.String(length=64), nullable=False),
        sa.Column("member_since", sa.Date(), nullable=False),
        sa.PrimaryKeyConstraint(*key, name="pk_customer_loyalty_memberships"),
    )


_TABLES = (("customers", _customers_table, _CUSTOMER_COLUMNS),
           ("customer_loyalty_memberships", _memberships_table, _MEMBERSHIP_COLUMNS))


def _rekey(keys: dict[str, Sequence[str]]) -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table, key in keys.items():
            constraint = "pk_customers" if table == "customers" else "pk_customer_loyalty_memberships"
            op.drop_constraint(constraint, table, type_="primary")
            op.create_primary_key(constraint, table, list(key))
        return
    # DuckDB cannot alter a primary key: rebuild each table under the new key and move the rows over.
    for table, create, columns in _TABLES:
        op.rename_table(table, f"{table}_rekeyed")
        create(table, keys[table])
        listed = ", ".join(columns)
        op.execute(f"INSERT INTO {table} ({listed}) SELECT {listed} FROM {table}_rekeyed")
        op.drop_table(f"{table}_rekeyed")


def upgrade() -> None:
    _rekey({"customers": ("tenant_id", "id"),
            "customer_loyalty_memberships": ("tenant_id", "customer_id", "loyalty_program_id")})


def downgrade() -> None:
    _rekey({"customers": ("id",), "customer_loyalty_memberships": ("customer_id", "loyalty_program_id")})
