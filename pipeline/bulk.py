"""Bulk reads and writes of the pipeline, over rows staged as Arrow (`db.bulk`); no statement runs per row."""

from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl
import sqlalchemy as sa

from db.bulk import driver_connection, ingested
from db.engine import duckdb_statement, is_duckdb


def fetch(conn: sa.Connection, sql: str, params: Mapping[str, Any], schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    """The query's rows as a Polars frame of the given schema (also when there are none).

    The query goes straight to the driver: SQLAlchemy's row objects cost more than the query itself at a few
    thousand rows. SQLAlchemy still compiles it, into each driver's parameter style.
    """
    compiled = sa.text(sql).compile(dialect=conn.dialect)
    if is_duckdb(conn.engine):
        # DuckDB hands Arrow over without a copy only from a relation (sql()); execute() copies, and warns.
        raw = driver_connection(conn)
        relation = raw.sql(duckdb_statement(raw, compiled.string),
                           params=[params[name] for name in compiled.positiontup])
        return pl.from_arrow(relation.to_arrow_table()).cast(dict(schema))
    # Executed through SQLAlchemy, which tells a lost connection from other errors; the rows are the driver's.
    result = conn.exec_driver_sql(compiled.string, dict(params))
    try:
        return pl.DataFrame(result.cursor.fetchall(), schema=dict(schema), orient="row")
    finally:
        result.close()


def write(conn: sa.Connection, table: sa.Table, rows: pl.DataFrame, key_columns: Sequence[str],
          update_columns: Sequence[str], *, inserted_elsewhere: bool = False) -> int:
    """Writes rows whose boolean column `held` tells whether the table holds their key: one UPDATE of
    update_columns for those it holds, one INSERT for the others; returns the rows written.

    Two plain statements instead of one `INSERT … ON CONFLICT`, whose speculative insertion costs more (measured:
    PostgreSQL 6.4 against 4.0 µs a new row, DuckDB 3.0 against 1.4). A held row whose generated_at is later than
    the incoming one is kept (null counts as earliest) and not counted. With inserted_elsewhere (other writers
    may add rows of these keys meanwhile), an insert that meets a held key leaves it and is not counted either.
    """
    if rows.height == 0:
        return 0
    columns = [name for name in rows.columns if name != "held"]
    names = ", ".join(columns)
    # The tenant is named even where the key does not hold it (store lines: a store id names its tenant anyway).
    matched = dict.fromkeys(["tenant_id", *key_columns])
    matches = " AND ".join(f"{table.name}.{name} = source.{name}" for name in matched)
    assignments = ", ".join(f"{name} = source.{name}" for name in update_columns)
    newest_wins = f"({table.name}.generated_at IS NULL OR {table.name}.generated_at <= source.generated_at)"
    conflicts = f" ON CONFLICT ({', '.join(key_columns)}) DO NOTHING" if inserted_elsewhere else ""
    with ingested(conn, rows.to_arrow()) as source:
        updated = conn.execute(sa.text(f"UPDATE {table.name} SET {assignments} FROM {source} AS source "
                                       f"WHERE source.held AND {matches} AND {newest_wins}")).rowcount
        inserted = conn.execute(sa.text(f"INSERT INTO {table.name} ({names}) SELECT {names} FROM {source} "
                                        f"WHERE NOT held{conflicts}")).rowcount
    return updated + inserted
