"""Event delivery: per outbox row its delivery, failed attempts and dead letter; per eCom store its delivery state

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-24 01:10:00
"""

import sqlalchemy as sa
from alembic import op

from db.migrate import altering_indexed_table

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_OUTBOX_INDEXES = {"ix_event_outbox_tenant_id_ecom_store_id_event_id": ["tenant_id", "ecom_store_id", "event_id"]}
_NEW_COLUMNS = ("delivered_time", "attempts", "last_error", "dead_letter_time")


def _instant(name: str) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=True)


def upgrade() -> None:
    def add_columns() -> None:
        op.add_column("event_outbox", _instant("delivered_time"))
        op.add_column("event_outbox", sa.Column("attempts", sa.Integer(), server_default="0", nullable=False))
        op.add_column("event_outbox", sa.Column("last_error", sa.Text(), nullable=True))
        op.add_column("event_outbox", _instant("dead_letter_time"))

    altering_indexed_table("event_outbox", _OUTBOX_INDEXES, add_columns)
    if op.get_bind().dialect.name == "postgresql":
        op.create_index("ix_event_outbox_unpublished", "event_outbox", ["event_id"],
                        postgresql_where=sa.text("published_time IS NULL"))
        op.create_index("ix_event_outbox_undelivered", "event_outbox", ["ecom_store_id", "event_id"],
                        postgresql_where=sa.text("delivered_time IS NULL AND dead_letter_time IS NULL"))
    op.create_table(
        "event_delivery_state",
        sa.Column("tenant_id", sa.String(length=36), nullable=False),
        sa.Column("ecom_store_id", sa.String(length=36), nullable=False),
        sa.Column("last_delivered_event_id", sa.String(length=36), nullable=True),
        _instant("last_delivered_time"),
        sa.Column("consecutive_failures", sa.Integer(), server_default="0", nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        _instant("last_failure_time"),
        sa.Column("credentials_refused", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("modified_time", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("ecom_store_id", name=op.f("pk_event_delivery_state")),
    )


def downgrade() -> None:
    op.drop_table("event_delivery_state")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_event_outbox_undelivered", table_name="event_outbox")
        op.drop_index("ix_event_outbox_unpublished", table_name="event_outbox")

    def drop_columns() -> None:
        for name in _NEW_COLUMNS:
            op.drop_column("event_outbox", name)

    altering_indexed_table("event_outbox", _OUTBOX_INDEXES, drop_columns)
