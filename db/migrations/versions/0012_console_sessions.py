"""The operator console's sessions (issue 21): a row per signed-in session, keyed by the SHA-256 of its id

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26 15:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("session_hash", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(36), nullable=False),
        sa.Column("client_id", sa.String(36), nullable=False),
        sa.Column("created_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_time", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("session_hash", name="pk_console_sessions"),
    )
    op.create_index("ix_console_sessions_expires_time", "console_sessions", ["expires_time"])


def downgrade() -> None:
    op.drop_index("ix_console_sessions_expires_time", table_name="console_sessions")
    op.drop_table("console_sessions")
