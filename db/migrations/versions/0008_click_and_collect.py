"""Click and collect reservations and their lines

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 23:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('click_and_collect_reservations',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('ecom_store_id', sa.String(length=36), nullable=False),
    sa.Column('cart_id', sa.String(length=36), nullable=False),
    sa.Column('reservation_name', sa.String(length=200), nullable=False),
    sa.Column('retail_store_id', sa.String(length=36), nullable=False),
    sa.Column('customer_id', sa.String(length=36), nullable=True),
    sa.Column('created_time', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_click_and_collect_reservations'))
    )
    op.create_table('click_and_collect_lines',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('reservation_id', sa.String(length=36), nullable=False),
    sa.Column('line_number', sa.Integer(), nullable=False),
    sa.Column('sku_id', sa.String(length=36), nullable=False),
    sa.Column('quantity', sa.Numeric(precision=18, scale=4), nullable=False),
    sa.Column('location_id', sa.String(length=36), nullable=False),
    sa.Column('reserved_from_warehouse', sa.Boolean(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_click_and_collect_lines'))
    )
    op.create_index(op.f('ix_click_and_collect_lines_tenant_id_reservation_id'), 'click_and_collect_lines',
                    ['tenant_id', 'reservation_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_click_and_collect_lines_tenant_id_reservation_id'), table_name='click_and_collect_lines')
    op.drop_table('click_and_collect_lines')
    op.drop_table('click_and_collect_reservations')
