"""Order processing failures: per RECEIVED order that failed to open, its attempts, last error and next attempt
(null once parked for an operator)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-25 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "order_processing_failures",
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("order_id", sa.String(length=36), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("last_attempt_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("tenant_id", "order_id", name=op.f("pk_order_processing_failures")),
    )


def downgrade() -> None:
    op.drop_table("order_processing_failures")
