"""Bulk reads and writes of the pipeline; the one place that tells the two backends apart.

Rows travel as Arrow. DuckDB reads them in place: they are registered as a view on the raw connection that
carries the caller's transaction. PostgreSQL receives them by one COPY into a temporary table that is
dropped at commit. Either way the SQL that follows is the same, and no statement runs per row.
"""

import itertools
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import sqlalchemy as sa

from store.engine import is_duckdb

# Unique within the process, so several staged tables can coexist in one transaction.
_staged_numbers = itertools.count()


@contextmanager
def staged(conn: sa.Connection, rows: pa.Table) -> Iterator[str]:
    """Makes the rows queryable, within the connection's current transaction, under the name yielded."""
    name = f"pia_staged_{next(_staged_numbers)}"
    if is_duckdb(conn.engine):
        raw = _driver_connection(conn)
        raw.register(name, rows)
        try:
            yield name
        except BaseException:
            # An aborted transaction refuses even the unregister; the error that aborted it is the one to report.
            with suppress(duckdb.Error):
                raw.unregister(name)
            raise
        raw.unregister(name)
    else:
        _copy_into_temporary(conn, name, rows)
        yield name


def _driver_connection(conn: sa.Connection) -> Any:
    """The DuckDB or psycopg connection SQLAlchemy began the transaction on.

    For DuckDB, duckdb_engine's wrapper, which delegates to it. Never DuckDBPyConnection.cursor(): that
    opens a second connection, outside the transaction.
    """
    return conn.connection.driver_connection


def _copy_into_temporary(conn: sa.Connection, name: str, rows: pa.Table) -> None:
    columns = ", ".join(f"{field.name} {_postgres_type(field.type)}" for field in rows.schema)
    conn.execute(sa.text(f"CREATE TEMPORARY TABLE {name} ({columns}) ON COMMIT DROP"))
    # CSV written by Polars in one vectorised pass: quoted "" is an empty string, an empty field is null.
    text = pl.from_arrow(rows).write_csv(include_header=False)
    with _driver_connection(conn).cursor() as cursor, \
            cursor.copy(f"COPY {name} FROM STDIN (FORMAT csv)") as copy:
        copy.write(text)


def _postgres_type(arrow_type: pa.DataType) -> str:
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type) \
            or pa.types.is_string_view(arrow_type):
        return "text"
    if pa.types.is_boolean(arrow_type):
        return "boolean"
    if pa.types.is_integer(arrow_type):
        return "bigint"
    if pa.types.is_date(arrow_type):
        return "date"
    if pa.types.is_timestamp(arrow_type) and arrow_type.tz is not None:
        return "timestamptz"
    if pa.types.is_decimal(arrow_type):
        return f"numeric({arrow_type.precision}, {arrow_type.scale})"
    raise TypeError(f"no PostgreSQL type for staged Arrow type {arrow_type}")


def fetch(conn: sa.Connection, sql: str, params: Mapping[str, Any], schema: Mapping[str, pl.DataType]) -> pl.DataFrame:
    """The query's rows as a Polars frame of the given schema (also when there are none).

    The query goes straight to the driver: SQLAlchemy's row objects cost more than the query itself at a few
    thousand rows. SQLAlchemy still compiles it, into each driver's parameter style.
    """
    compiled = sa.text(sql).compile(dialect=conn.dialect)
    if is_duckdb(conn.engine):
        # DuckDB hands Arrow over without a copy only from a relation (sql()); execute() copies, and warns.
        relation = _driver_connection(conn).sql(compiled.string,
                                                params=[params[name] for name in compiled.positiontup])
        return pl.from_arrow(relation.to_arrow_table()).cast(dict(schema))
    with _driver_connection(conn).cursor() as cursor:
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
