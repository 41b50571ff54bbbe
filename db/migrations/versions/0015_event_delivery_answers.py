"""Event delivery answers (issue 17): each outbox row keeps its last failure's answer in short (what dead letters are
counted by), and each eCom store's delivery state how many of its entities wait out a backoff

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-26 19:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("event_outbox", sa.Column("last_answer", sa.String(length=64), nullable=True))
    op.add_column("event_delivery_state",
                  sa.Column("lanes_in_backoff", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("event_delivery_state", "lanes_in_backoff")
    op.drop_column("event_outbox", "last_answer")
