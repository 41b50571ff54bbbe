"""E-commerce back office: reference lists, products, prices, VAT, warehouses and stock, eCom store settings,
campaigns, customers, event destinations and the event outbox

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 21:50:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_NEW_TABLES = ("campaign_skus", "campaigns", "customer_loyalty_memberships", "customers",
               "ecom_store_event_destinations", "ecom_store_warehouses", "event_outbox", "price_lists", "prices",
               "product_attribute_values", "product_images", "products", "reference_entries", "stock_levels",
               "vat_rates", "warehouses")
_NEW_COLUMNS = {
    "companies": ("base_price_list_id", "freight_vat_rate"),
    "ecom_stores": ("base_assortment_id", "local_assortment_id", "price_list_id", "lead_time_days",
                    "payment_capture_enabled", "default_customer_id"),
    "loyalty_programs": ("company_id",),
    "skus": ("product_id", "gtin", "product_color_id", "size_id", "unit_of_measure_id", "vat_rate_id", "published"),
}


def upgrade() -> None:
    op.create_table('campaign_skus',
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('campaign_id', sa.String(length=36), nullable=False),
    sa.Column('sku_id', sa.String(length=36), nullable=False),
    sa.Column('campaign_price', sa.Numeric(precision=18, scale=4), nullable=False),
    sa.Column('loyalty_membership_required', sa.Boolean(), nullable=False),
    sa.PrimaryKeyConstraint('campaign_id', 'sku_id', name=op.f('pk_campaign_skus'))
    )
    op.create_table('campaigns',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('company_id', sa.String(length=36), nullable=False),
    sa.Column('code', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('campaign_type', sa.String(length=16), nullable=False),
    sa.Column('valid_from', sa.Date(), nullable=False),
    sa.Column('valid_to', sa.Date(), nullable=False),
    sa.Column('released', sa.Boolean(), nullable=False),
    sa.Column('loyalty_program_id', sa.String(length=36), nullable=True),
    sa.Column('modified_time', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_campaigns')),
    sa.UniqueConstraint('tenant_id', 'code', name=op.f('uq_campaigns_tenant_id_code'))
    )
    op.create_table('customer_loyalty_memberships',
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('customer_id', sa.String(length=36), nullable=False),
    sa.Column('loyalty_program_id', sa.String(length=36), nullable=False),
    sa.Column('member_number', sa.String(length=64), nullable=False),
    sa.Column('member_since', sa.Date(), nullable=False),
    sa.PrimaryKeyConstraint('tenant_id', 'customer_id', 'loyalty_program_id', name=op.f('pk_customer_loyalty_memberships'))
    )
    op.create_table('customers',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('first_name', sa.String(length=200), nullable=True),
    sa.Column('last_name', sa.String(length=200), nullable=True),
    sa.Column('email', sa.String(length=320), nullable=True),
    sa.Column('email_key', sa.String(length=320), nullable=True),
    sa.Column('phone', sa.String(length=16), nullable=True),
    sa.Column('birth_date', sa.Date(), nullable=True),
    sa.Column('delivery_address', sa.Text(), nullable=True),
    sa.Column('invoice_address', sa.Text(), nullable=True),
    sa.Column('ext', sa.Text(), nullable=True),
    sa.Column('created_time', sa.DateTime(timezone=True), nullable=False),
    sa.Column('modified_time', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('tenant_id', 'id', name=op.f('pk_customers')),
    sa.UniqueConstraint('tenant_id', 'email_key', name=op.f('uq_customers_tenant_id_email_key')),
    sa.UniqueConstraint('tenant_id', 'phone', name=op.f('uq_customers_tenant_id_phone'))
    )
    op.create_table('ecom_store_event_destinations',
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('ecom_store_id', sa.String(length=36), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('endpoint', sa.String(length=1000), nullable=False),
    sa.Column('entity_path', sa.String(length=260), nullable=True),
    sa.Column('shared_access_key_name', sa.String(length=256), nullable=True),
    sa.Column('sealed_secret', sa.Text(), nullable=False),
    sa.Column('modified_time', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('ecom_store_id', name=op.f('pk_ecom_store_event_destinations'))
    )
    op.create_table('ecom_store_warehouses',
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('ecom_store_id', sa.String(length=36), nullable=False),
    sa.Column('warehouse_id', sa.String(length=36), nullable=False),
    sa.Column('priority', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('ecom_store_id', 'warehouse_id', name=op.f('pk_ecom_store_warehouses'))
    )
    op.create_table('event_outbox',
    sa.Column('event_id', sa.String(length=36), nullable=False),
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('ecom_store_id', sa.String(length=36), nullable=False),
    sa.Column('subject', sa.String(length=64), nullable=False),
    sa.Column('entity_id', sa.String(length=36), nullable=True),
    sa.Column('datetime', sa.DateTime(timezone=True), nullable=False),
    sa.Column('metadata', sa.Text(), nullable=True),
    sa.Column('published_time', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('event_id', name=op.f('pk_event_outbox'))
    )
    op.create_index(op.f('ix_event_outbox_tenant_id_ecom_store_id_event_id'), 'event_outbox', ['tenant_id', 'ecom_store_id', 'event_id'], unique=False)
    op.create_table('price_lists',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('code', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_price_lists')),
    sa.UniqueConstraint('tenant_id', 'code', name=op.f('uq_price_lists_tenant_id_code'))
    )
    op.create_table('prices',
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('price_list_id', sa.String(length=36), nullable=False),
    sa.Column('sku_id', sa.String(length=36), nullable=False),
    sa.Column('price', sa.Numeric(precision=18, scale=4), nullable=False),
    sa.PrimaryKeyConstraint('price_list_id', 'sku_id', name=op.f('pk_prices'))
    )
    op.create_table('product_attribute_values',
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('product_id', sa.String(length=36), nullable=False),
    sa.Column('dynamic_attribute_id', sa.String(length=36), nullable=False),
    sa.Column('value', sa.Text(), nullable=True),
    sa.Column('option_ids', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('product_id', 'dynamic_attribute_id', name=op.f('pk_product_attribute_values'))
    )
    op.create_table('product_images',
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('product_id', sa.String(length=36), nullable=False),
    sa.Column('sort_order', sa.Integer(), nullable=False),
    sa.Column('url', sa.String(length=2000), nullable=False),
    sa.Column('alt_text', sa.String(length=500), nullable=True),
    sa.PrimaryKeyConstraint('product_id', 'sort_order', name=op.f('pk_product_images'))
    )
    op.create_table('products',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('number', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('description', sa.Text(), nullable=True),
    sa.Column('released', sa.Boolean(), nullable=False),
    sa.Column('brand_id', sa.String(length=36), nullable=True),
    sa.Column('product_category_id', sa.String(length=36), nullable=True),
    sa.Column('main_product_group_id', sa.String(length=36), nullable=True),
    sa.Column('sub_product_group_id', sa.String(length=36), nullable=True),
    sa.Column('product_concept_id', sa.String(length=36), nullable=True),
    sa.Column('exclusivity_level_id', sa.String(length=36), nullable=True),
    sa.Column('main_activity_id', sa.String(length=36), nullable=True),
    sa.Column('modified_time', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_products')),
    sa.UniqueConstraint('tenant_id', 'number', name=op.f('uq_products_tenant_id_number'))
    )
    op.create_table('reference_entries',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('list_name', sa.String(length=40), nullable=False),
    sa.Column('code', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('color_code', sa.String(length=16), nullable=True),
    sa.Column('sort_order', sa.Integer(), nullable=True),
    sa.Column('value_type', sa.String(length=8), nullable=True),
    sa.Column('dynamic_attribute_id', sa.String(length=36), nullable=True),
    sa.Column('modified_time', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_reference_entries')),
    sa.UniqueConstraint('tenant_id', 'list_name', 'code', name=op.f('uq_reference_entries_tenant_id_list_name_code'))
    )
    op.create_table('stock_levels',
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('location_id', sa.String(length=36), nullable=False),
    sa.Column('sku_id', sa.String(length=36), nullable=False),
    sa.Column('on_hand', sa.Numeric(precision=18, scale=4), nullable=False),
    sa.Column('reserved', sa.Numeric(precision=18, scale=4), nullable=False),
    sa.Column('modified_time', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('location_id', 'sku_id', name=op.f('pk_stock_levels'))
    )
    op.create_index(op.f('ix_stock_levels_tenant_id_sku_id'), 'stock_levels', ['tenant_id', 'sku_id'], unique=False)
    op.create_table('vat_rates',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('code', sa.String(length=64), nullable=False),
    sa.Column('rate', sa.Numeric(precision=18, scale=4), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_vat_rates')),
    sa.UniqueConstraint('tenant_id', 'code', name=op.f('uq_vat_rates_tenant_id_code'))
    )
    op.create_table('warehouses',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('tenant_id', sa.String(length=36), nullable=False),
    sa.Column('company_id', sa.String(length=36), nullable=False),
    sa.Column('number', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_warehouses')),
    sa.UniqueConstraint('tenant_id', 'number', name=op.f('uq_warehouses_tenant_id_number'))
    )
    op.add_column('companies', sa.Column('base_price_list_id', sa.String(length=36), nullable=True))
    op.add_column('companies', sa.Column('freight_vat_rate', sa.Numeric(precision=18, scale=4), nullable=True))
    op.add_column('ecom_stores', sa.Column('base_assortment_id', sa.String(length=36), nullable=True))
    op.add_column('ecom_stores', sa.Column('local_assortment_id', sa.String(length=36), nullable=True))
    op.add_column('ecom_stores', sa.Column('price_list_id', sa.String(length=36), nullable=True))
    op.add_column('ecom_stores', sa.Column('lead_time_days', sa.Integer(), server_default='0', nullable=False))
    op.add_column('ecom_stores', sa.Column('payment_capture_enabled', sa.Boolean(), server_default=sa.false(), nullable=False))
    op.add_column('ecom_stores', sa.Column('default_customer_id', sa.String(length=36), nullable=True))
    op.add_column('loyalty_programs', sa.Column('company_id', sa.String(length=36), nullable=True))
    op.add_column('skus', sa.Column('product_id', sa.String(length=36), nullable=True))
    op.add_column('skus', sa.Column('gtin', sa.String(length=14), nullable=True))
    op.add_column('skus', sa.Column('product_color_id', sa.String(length=36), nullable=True))
    op.add_column('skus', sa.Column('size_id', sa.String(length=36), nullable=True))
    op.add_column('skus', sa.Column('unit_of_measure_id', sa.String(length=36), nullable=True))
    op.add_column('skus', sa.Column('vat_rate_id', sa.String(length=36), nullable=True))
    op.add_column('skus', sa.Column('published', sa.Boolean(), server_default=sa.false(), nullable=False))
    op.create_index(op.f('ix_skus_tenant_id_product_id'), 'skus', ['tenant_id', 'product_id'], unique=False)


# The four tables that gained columns, as revision 0005 left them: DuckDB cannot drop a column of a table that has a
# unique constraint, so on DuckDB the downgrade rebuilds them from these definitions and moves the rows back.
def _before_0006(table: str) -> sa.Table:
    key = "code" if table == "loyalty_programs" else "number"
    columns = {
        "companies": [sa.Column("number", sa.String(64), nullable=False),
                      sa.Column("name", sa.String(200), nullable=False),
                      sa.Column("currency_iso_code", sa.String(3), nullable=False)],
        "ecom_stores": [sa.Column("company_id", sa.String(36), nullable=False),
                        sa.Column("number", sa.String(64), nullable=False),
                        sa.Column("name", sa.String(200), nullable=False),
                        sa.Column("released", sa.Boolean(), nullable=False)],
        "loyalty_programs": [sa.Column("code", sa.String(64), nullable=False),
                             sa.Column("name", sa.String(200), nullable=False)],
        "skus": [sa.Column("number", sa.String(64), nullable=False),
                 sa.Column("name", sa.String(200), nullable=False)],
    }[table]
    return sa.Table(table, sa.MetaData(), sa.Column("id", sa.String(36), nullable=False),
                    sa.Column("tenant_id", sa.String(36), nullable=False), *columns,
                    sa.PrimaryKeyConstraint("id", name=f"pk_{table}"),
                    sa.UniqueConstraint("tenant_id", key, name=f"uq_{table}_tenant_id_{key}"))


def _rebuild_without_new_columns(table: str) -> None:
    before = _before_0006(table)
    listed = ", ".join(column.name for column in before.columns)
    op.rename_table(table, f"{table}_0006")
    before.create(op.get_bind())
    op.execute(f"INSERT INTO {table} ({listed}) SELECT {listed} FROM {table}_0006")
    op.drop_table(f"{table}_0006")


def downgrade() -> None:
    op.drop_index(op.f("ix_skus_tenant_id_product_id"), table_name="skus")
    for table, columns in _NEW_COLUMNS.items():
        if op.get_bind().dialect.name == "postgresql":
            for column in columns:
                op.drop_column(table, column)
        else:
            _rebuild_without_new_columns(table)
    for table in _NEW_TABLES:
        op.drop_table(table)
