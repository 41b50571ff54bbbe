"""Many rows at once on either backend, in the caller's transaction: staged Arrow tables and bulk inserts.

Rows travel as Arrow. DuckDB reads them in place: they are registered as a view on the raw connection that
carries the caller's transaction. PostgreSQL receives them by one COPY into a temporary table that is dropped at
commit. Either way the SQL that follows is the same, and no statement runs per row.

Many rows that a transaction then applies (`ingested`): on PostgreSQL the ADBC driver copies them in binary into
an unlogged table of their own (half the CPU of CSV through psycopg, on both sides), which the caller's
transaction reads and drops; see `ingested` for what that means for failures.

Inserting: SQLAlchemy's executemany costs about 50 µs a row on both backends (the back-office demo's 17,000
rows: close to a second). `insert_rows` gives DuckDB the rows as a staged Arrow table with one INSERT … SELECT,
and PostgreSQL a COPY, each row adapted by psycopg as it would be for a parameter.
"""

import itertools
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

import duckdb
import pyarrow as pa
import sqlalchemy as sa

from db.adbc import adbc_connection
from db.engine import is_duckdb

# PostgreSQL: unique within the process, so several staged tables can coexist in one transaction (each stays until
# the commit).
_staged_numbers = itertools.count()


class _DuckDBNames:
    """Names for tables registered on DuckDB connections: the lowest number not in use, so the same few names come
    back and the statements that read them repeat their text. A new name per table made every such statement new
    text, which DuckDB parsed again and which pushed the statements that do repeat out of the parse and compiled
    caches (db.engine.kept_parse, SQLAlchemy's)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_use: set[int] = set()

    @contextmanager
    def taken(self) -> Iterator[str]:
        with self._lock:
            number = next(n for n in itertools.count() if n not in self._in_use)
            self._in_use.add(number)
        try:
            yield f"pia_staged_{number}"
        finally:
            with self._lock:
                self._in_use.discard(number)


_duckdb_names = _DuckDBNames()


@contextmanager
def staged(conn: sa.Connection, rows: pa.Table) -> Iterator[str]:
    """Makes the rows queryable, within the connection's current transaction, under the name yielded."""
    if not is_duckdb(conn.engine):
        name = f"pia_staged_{next(_staged_numbers)}"
        _copy_into_temporary(conn, name, rows)
        yield name
        return
    raw = driver_connection(conn)
    with _duckdb_names.taken() as name:
        raw.register(name, rows)
        try:
            yield name
        except BaseException:
            # An aborted transaction refuses even the unregister; the error that aborted it is the one to report.
            with suppress(duckdb.Error):
                raw.unregister(name)
            raise
        raw.unregister(name)


def driver_connection(conn: sa.Connection) -> Any:
    """The DuckDB or psycopg connection SQLAlchemy began the transaction on.

    For DuckDB, duckdb_engine's wrapper, which delegates to it. Never DuckDBPyConnection.cursor(): that
    opens a second connection, outside the transaction.
    """
    return conn.connection.driver_connection


def _as_csv(rows: pa.Table) -> str:
    """The rows as COPY's CSV (quoted "" an empty string, an empty field null), written by Polars in one vectorised
    pass: COPY's write_row adapts every value in Python (3× slower). Imported on the first PostgreSQL bulk write:
    most `pia admin` commands write none, and Polars is 0.2–0.3 s of their start-up."""
    import polars as pl

    return pl.from_arrow(rows).write_csv(include_header=False)


def _copy_into_temporary(conn: sa.Connection, name: str, rows: pa.Table) -> None:
    columns = ", ".join(f"{field.name} {_postgres_type(field.type)}" for field in rows.schema)
    conn.execute(sa.text(f"CREATE TEMPORARY TABLE {name} ({columns}) ON COMMIT DROP"))
    text = _as_csv(rows)
    with driver_connection(conn).cursor() as cursor, \
            cursor.copy(f"COPY {name} FROM STDIN (FORMAT csv)") as copy:
        copy.write(text)


# Tables of `ingested` are named with the time they were made, so that leftovers can be told by their age.
_INGESTED_PREFIX = "pia_ingest_"


@contextmanager
def ingested(conn: sa.Connection, rows: pa.Table) -> Iterator[str]:
    """As `staged`, for many rows: the name of a table holding them, for the caller's transaction to read.

    DuckDB reads the Arrow table in place, as `staged`. PostgreSQL gets the rows through ADBC's binary COPY into
    an unlogged table (no WAL) that ADBC's own session creates and commits before the caller reads it; the
    caller's transaction drops it at the end of the block, so it goes when that transaction commits. When the
    block raises, or the transaction is rolled back later, the table stays behind until `drop_stale_ingested`.
    """
    if is_duckdb(conn.engine):
        with staged(conn, rows) as name:
            yield name
        return
    name = f"{_INGESTED_PREFIX}{int(time.time())}_{uuid.uuid4().hex[:12]}"
    columns = ", ".join(f"{field.name} {_postgres_type(field.type)}" for field in rows.schema)
    with adbc_connection(conn.engine) as adbc:
        with adbc.cursor() as cursor:
            cursor.execute(f"CREATE UNLOGGED TABLE {name} ({columns})")
            cursor.adbc_ingest(name, rows, mode="append")
        adbc.commit()
    yield name
    conn.execute(sa.text(f"DROP TABLE {name}"))


def drop_stale_ingested(engine: sa.Engine, older_than_seconds: float) -> int:
    """Drops the tables `ingested` left behind (PostgreSQL) that are older than that; returns how many."""
    if is_duckdb(engine):
        return 0
    with engine.begin() as conn:
        names = conn.scalars(sa.text("SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                                     "AND tablename LIKE :prefix"), {"prefix": f"{_INGESTED_PREFIX}%"}).all()
        stale = [name for name in names if int(name.split("_")[2]) < time.time() - older_than_seconds]
        for name in stale:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {name}"))
    return len(stale)


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
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type) \
            or pa.types.is_binary_view(arrow_type):
        return "bytea"
    raise TypeError(f"no PostgreSQL type for staged Arrow type {arrow_type}")


# Below this, one executemany is as quick.
_BULK_FROM_ROWS = 200


def insert_rows(conn: sa.Connection, table: sa.Table, rows: Sequence[dict[str, Any]]) -> None:
    """Inserts rows (dicts with the same keys, column names) into table in the connection's transaction."""
    if not rows:
        return
    if len(rows) < _BULK_FROM_ROWS:
        conn.execute(table.insert(), list(rows))
        return
    append_arrow(conn, table, pa.Table.from_pylist(list(rows), schema=pa.schema(
        [(name, _arrow_type(table.c[name].type)) for name in rows[0]])))


def append_arrow(conn: sa.Connection, table: sa.Table, rows: pa.Table) -> None:
    """Appends the rows (Arrow columns named as table's) to table in the connection's transaction, by one statement
    whatever their number: DuckDB reads them in place, PostgreSQL takes them by COPY."""
    columns = ", ".join(f'"{name}"' for name in rows.column_names)
    if not is_duckdb(conn.engine):
        with driver_connection(conn).cursor() as cursor, \
                cursor.copy(f"COPY {table.name} ({columns}) FROM STDIN (FORMAT csv)") as copy:
            copy.write(_as_csv(rows))
        return
    with staged(conn, rows) as source:
        conn.execute(sa.text(f"INSERT INTO {table.name} ({columns}) SELECT {columns} FROM {source}"))


def _arrow_type(column_type: sa.types.TypeEngine) -> pa.DataType:
    if isinstance(column_type, sa.Boolean):
        return pa.bool_()
    if isinstance(column_type, sa.Integer):
        return pa.int64()
    if isinstance(column_type, sa.Numeric):
        return pa.decimal128(column_type.precision, column_type.scale)
    if isinstance(column_type, sa.DateTime):
        return pa.timestamp("us", tz="UTC") if column_type.timezone else pa.timestamp("us")
    if isinstance(column_type, sa.Date):
        return pa.date32()
    if isinstance(column_type, sa.String):  # Text too
        return pa.string()
    raise TypeError(f"no Arrow type for column type {column_type!r}")
