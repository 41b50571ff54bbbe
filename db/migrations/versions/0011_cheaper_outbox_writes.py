"""Cheaper outbox writes (issue 9: trigger_events of 100,000 SKUs under a second): on PostgreSQL the outbox's id
columns compare bytewise (COLLATE "C"), and the index on (tenant_id, ecom_store_id, event_id) that every write
paid for gives way to one holding only the dead letters, the rows its readers look for

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24 03:45:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_STORE_INDEX = "ix_event_outbox_tenant_id_ecom_store_id_event_id"
_STORE_COLUMNS = ["tenant_id", "ecom_store_id", "event_id"]
_DEAD_LETTERS_INDEX = "ix_event_outbox_dead_letters"
_ID_COLUMNS = ("event_id", "tenant_id", "ecom_store_id")


def _collate_ids(collation: str) -> None:
    """One ALTER for the three columns, so PostgreSQL rebuilds the table's indexes once."""
    changes = ", ".join(f'ALTER COLUMN {name} TYPE VARCHAR(36) COLLATE "{collation}"' for name in _ID_COLUMNS)
    op.execute(f"ALTER TABLE event_outbox {changes}")


def upgrade() -> None:
    op.drop_index(_STORE_INDEX, table_name="event_outbox")
    if op.get_bind().dialect.name == "postgresql":
        _collate_ids("C")
        op.create_index(_DEAD_LETTERS_INDEX, "event_outbox", _STORE_COLUMNS,
                        postgresql_where=sa.text("dead_letter_time IS NOT NULL"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index(_DEAD_LETTERS_INDEX, table_name="event_outbox")
        _collate_ids("default")
    op.create_index(_STORE_INDEX, "event_outbox", _STORE_COLUMNS)
