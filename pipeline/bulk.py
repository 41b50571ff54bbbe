"""Bulk reads and upserts of the pipeline, over rows staged as Arrow (`db.bulk.staged`); no statement runs
per row."""

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl
import pyarrow as pa
import sqlalchemy as sa

from db.bulk import driver_connection, staged
from db.engine import is_duckdb


def fetch(conn: sa.Connection, sql: str, params: Mapping[str, Any], schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    """The query's rows as a Polars frame of the given schema (also when there are none).

    The query goes straight to the driver: SQLAlchemy's row objects cost more than the query itself at a few
    thousand rows. SQLAlchemy still compiles it, into each driver's parameter style.
    """
    compiled = sa.text(sql).compile(dialect=conn.dialect)
    if is_duckdb(conn.engine):
        # DuckDB hands Arrow over without a copy only from a relation (sql()); execute() copies, and warns.
        relation = driver_connection(conn).sql(compiled.string,
                                                params=[params[name] for name in compiled.positiontup])
        return pl.from_arrow(relation.to_arrow_table()).cast(dict(schema))
    with driver_connection(conn).cursor() as cursor:
        cursor.execute(compiled.string, params)
        return pl.DataFrame(cursor.fetchall(), schema=dict(schema), orient="row")


def upsert(conn: sa.Connection, table: sa.Table, rows: pa.Table, key_columns: Sequence[str],
           update_columns: Sequence[str], newest_wins_on: str | None = None) -> int:
    """Inserts the rows, or updates update_columns of the held row with the same key; returns rows written.

    With newest_wins_on, a held row whose value in that column is later than the incoming one is kept
    (null counts as earliest), and not counted as written.
    """
    if rows.num_rows == 0:
        return 0
    columns = ", ".join(rows.column_names)
    assignments = ", ".join(f"{name} = excluded.{name}" for name in update_columns)
    guard = (f" WHERE {table.name}.{newest_wins_on} IS NULL OR {table.name}.{newest_wins_on} <= "
             f"excluded.{newest_wins_on}") if newest_wins_on else ""
    with staged(conn, rows) as source:
        result = conn.execute(sa.text(
            f"INSERT INTO {table.name} ({columns}) SELECT {columns} FROM {source} "
            f"ON CONFLICT ({', '.join(key_columns)}) DO UPDATE SET {assignments}{guard}"))
        return result.rowcount
