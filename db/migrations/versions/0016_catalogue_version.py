"""The tenant's catalogue version (issue 19): counted up by every back-office load, so that a process may keep what
order creation reads of the catalogue while it stands

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-27 06:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("tenants", sa.Column("catalogue_version", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("tenants", "catalogue_version")
