"""Index to find a tenant's expired forecasts (PostgreSQL only)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21 14:05:00
"""

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

INDEX = "ix_sales_forecasts_tenant_id_horizon_end_date"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.create_index(INDEX, "sales_forecasts", ["tenant_id", "horizon_end_date"])


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index(INDEX, table_name="sales_forecasts")
