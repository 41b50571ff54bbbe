"""Held forecast quantities as 8-byte integers of ten-thousandths in a BYTEA (DuckDB: BLOB) instead of JSON text
(issue 19): a page or an export turns them into Arrow decimals without parsing text (db.held_quantities)

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29 02:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

# Each quantity of the JSON array (canonical decimal strings, four places at most, non-negative) as its integer of
# ten-thousandths in 8 big-endian bytes, in the array's order.
_TO_BYTES = {
    "postgresql": "(SELECT string_agg(int8send((value::numeric * 10000)::bigint), ''::bytea ORDER BY day) "
                  "FROM json_array_elements_text(quantities::json) WITH ORDINALITY AS element(value, day))",
    "duckdb": """list_reduce(list_transform(from_json(quantities, '["DECIMAL(18,4)"]'), lambda value:
                     unhex(lpad(to_hex(CAST(CAST(value AS DECIMAL(38,4)) * 10000 AS BIGINT)), 16, '0'))),
                 lambda held, more: held || more)""",
}
# And back: canonical decimal strings ("12", "0.5"), as pipeline.apply wrote them before this revision.
_DECIMAL_TEXT = """CASE WHEN {q} % 10000 = 0 THEN ({q} // 10000)::VARCHAR
    ELSE ({q} // 10000)::VARCHAR || '.' || rtrim(lpad(({q} % 10000)::VARCHAR, 4, '0'), '0') END"""
_TO_TEXT = {
    "postgresql": "(SELECT '[' || string_agg('\"' || " + _DECIMAL_TEXT.format(q="value").replace("//", "/")
                  + " || '\"', ',' ORDER BY day) || ']' FROM (SELECT day, "
                  "('x' || encode(substring(quantities FROM day FOR 8), 'hex'))::bit(64)::bigint AS value "
                  "FROM generate_series(1, length(quantities), 8) AS day) AS element)",
    "duckdb": "'[' || array_to_string(list_transform(range(0, octet_length(quantities) // 8), lambda day: "
              "'\"' || " + _DECIMAL_TEXT.format(q="CAST('0x' || substr(hex(quantities), day * 16 + 1, 16) AS BIGINT)")
              + " || '\"'), ',') || ']'",
}


def _replace_quantities(new_type: sa.types.TypeEngine, conversions: dict[str, str]) -> None:
    """The quantities column replaced by one of the new type holding each row's converted value."""
    dialect = op.get_bind().dialect.name
    if dialect == "duckdb":
        # DuckDB cannot make a column NOT NULL in the transaction that filled it: the table is made anew.
        _rebuilt_on_duckdb(new_type, conversions[dialect])
        return
    op.add_column("sales_forecasts", sa.Column("converted_quantities", new_type, nullable=True))
    op.execute(f"UPDATE sales_forecasts SET converted_quantities = {conversions[dialect]}")
    op.drop_column("sales_forecasts", "quantities")
    op.alter_column("sales_forecasts", "converted_quantities", new_column_name="quantities", nullable=False)


def _rebuilt_on_duckdb(quantities_type: sa.types.TypeEngine, conversion: str) -> None:
    instant = sa.DateTime(timezone=True)
    op.create_table(
        "converted_sales_forecasts",
        sa.Column("tenant_id", sa.String(36), nullable=False), sa.Column("is_ecom", sa.Boolean(), nullable=False),
        sa.Column("store_number", sa.String(64), nullable=False),
        sa.Column("sku_number", sa.String(64), nullable=False),
        sa.Column("horizon_start_date", sa.Date(), nullable=False),
        sa.Column("horizon_end_date", sa.Date(), nullable=False),
        sa.Column("quantities", quantities_type, nullable=False),
        sa.Column("generated_at", instant, nullable=False), sa.Column("modified_time", instant, nullable=False),
        sa.Column("batch_id", sa.String(36), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "is_ecom", "store_number", "sku_number",
                                name="pk_sales_forecasts"))
    kept = "tenant_id, is_ecom, store_number, sku_number, horizon_start_date, horizon_end_date"
    op.execute(f"INSERT INTO converted_sales_forecasts SELECT {kept}, {conversion}, generated_at, modified_time, "
               "batch_id FROM sales_forecasts")
    op.drop_table("sales_forecasts")
    op.rename_table("converted_sales_forecasts", "sales_forecasts")


def upgrade() -> None:
    _replace_quantities(sa.LargeBinary(), _TO_BYTES)


def downgrade() -> None:
    _replace_quantities(sa.Text(), _TO_TEXT)
