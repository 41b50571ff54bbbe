"""Held demand planning data as Arrow, in the schemas of contracts/held_datasets.py: the Arrow pages of the lists,
and the tenant-wide exports streamed in record batches.

Rows leave the database columnar and stay so: DuckDB hands its result over as an Arrow record batch reader;
PostgreSQL streams `COPY (query) TO STDOUT` as CSV, which Polars parses a chunk at a time. Either way no Python
object is made per row, and an export holds one chunk at a time in Python, however many rows the tenant has
(PostgreSQL reads the primary key's index in order; DuckDB sorts inside its own memory, spilling to disk when
short). Polars then shapes a chunk into the contract's schema (the quantities' text split into exact decimals,
the store number split into the retail and eCom columns).
"""

from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import date, datetime
from typing import Literal

import polars as pl
import pyarrow as pa
import sqlalchemy as sa

from contracts.held_datasets import REPLENISHMENT_PARAMETERS, SALES_FORECAST_DAYS, SALES_FORECASTS
from db.bulk import driver_connection
from db.engine import is_duckdb
from db.held import (
    ForecastKey,
    KeyT,
    ParameterKey,
    held_forecasts,
    held_parameters,
    key_names,
    page_length,
    page_query,
)

Layout = Literal["horizon", "daily"]
LAYOUTS: tuple[Layout, ...] = ("horizon", "daily")
# Rows per record batch of an export: large enough that per-batch costs vanish, small enough that a daily
# batch of forecasts (up to 62 days each) stays a few tens of MB.
BATCH_ROWS = 16_384

_DECIMAL = pl.Decimal(18, 4)
_INSTANT = pl.Datetime("us", "UTC")
# The columns the database rows are read with, as Polars types (PostgreSQL's CSV is parsed into these).
_FORECAST_COLUMNS = {"is_ecom": pl.Boolean, "store_number": pl.String, "sku_number": pl.String,
                     "horizon_start_date": pl.Date, "horizon_end_date": pl.Date, "quantities": pl.String,
                     "generated_at": _INSTANT, "modified_time": _INSTANT}
_PARAMETER_COLUMNS = {"store_number": pl.String, "sku_number": pl.String, "replenishment_type": pl.String,
                      "reorder_point": _DECIMAL, "maximum_inventory": _DECIMAL, "modified_time": _INSTANT,
                      "parameter_source": pl.String, "locked": pl.Boolean}


@dataclass(frozen=True)
class ArrowPage:
    """A page of a list as an Arrow table in the contract's schema, and the key to read the next page after."""

    table: pa.Table
    next: ForecastKey | ParameterKey | None


# --- pages ----------------------------------------------------------------------------------------------

def sales_forecast_arrow_page(engine: sa.Engine, tenant_id: str, *, retail_store_number: str | None,
                              ecom_store_number: str | None, after: ForecastKey | None, limit: int,
                              today: date) -> ArrowPage:
    """The page `db.held.sales_forecast_page` reads, as SALES_FORECASTS."""
    rows = held_forecasts(tenant_id, retail_store_number=retail_store_number,
                          ecom_store_number=ecom_store_number, today=today)
    return _arrow_page(engine, rows, ForecastKey, after, limit, _FORECASTS)


def replenishment_parameter_arrow_page(engine: sa.Engine, tenant_id: str, *, retail_store_number: str | None,
                                       modified_since: datetime | None, after: ParameterKey | None,
                                       limit: int) -> ArrowPage:
    """The page `db.held.replenishment_parameter_page` reads, as REPLENISHMENT_PARAMETERS."""
    rows = held_parameters(tenant_id, retail_store_number=retail_store_number, modified_since=modified_since,
                           after=after, windowed=modified_since is None)
    return _arrow_page(engine, rows, ParameterKey, after, limit, _PARAMETERS)


def _arrow_page(engine: sa.Engine, rows: sa.FromClause, key_type: type[KeyT], after: KeyT | None, limit: int,
                dataset: "_Dataset") -> ArrowPage:
    """As db.held's page reader, cutting the fetched rows with Polars."""
    query = page_query(_narrowed(rows, dataset), key_type, after, limit)
    with engine.connect() as conn, closing(_frames(conn, query, dataset.columns, limit + 2)) as read:
        frames = list(read)
    fetched = pl.concat(frames) if frames else pl.DataFrame(schema=dataset.columns)
    names = key_names(key_type)
    store = names[:-1]
    first_store_rows = fetched.join(fetched.head(1).select(store), on=store, how="semi").height
    length = page_length(limit, first_store_rows)
    page = fetched.head(length)
    following = key_type(**page.select(names).row(length - 1, named=True)) if fetched.height > length else None
    return ArrowPage(_table(dataset.shape(page), dataset.schema), following)


# --- exports --------------------------------------------------------------------------------------------

def sales_forecast_batches(engine: sa.Engine, tenant_id: str, *, today: date, layout: Layout = "horizon",
                           batch_rows: int = BATCH_ROWS) -> Generator[pa.RecordBatch, None, None]:
    """Every unexpired held forecast of the tenant, by store then SKU as the list, in record batches of at most
    batch_rows rows: SALES_FORECASTS, or SALES_FORECAST_DAYS (one row per day) with the daily layout."""
    rows = held_forecasts(tenant_id, today=today)
    dataset = _FORECASTS if layout == "horizon" else _FORECAST_DAYS
    return _batches(engine, _in_key_order(_narrowed(rows, dataset), ForecastKey), dataset, batch_rows)


def replenishment_parameter_batches(engine: sa.Engine, tenant_id: str, *,
                                    batch_rows: int = BATCH_ROWS) -> Generator[pa.RecordBatch, None, None]:
    """Every replenishment parameter in use of the tenant, by store then SKU, as REPLENISHMENT_PARAMETERS."""
    rows = held_parameters(tenant_id)
    return _batches(engine, _in_key_order(_narrowed(rows, _PARAMETERS), ParameterKey), _PARAMETERS, batch_rows)


def _narrowed(rows: sa.FromClause, dataset: "_Dataset") -> sa.Subquery:
    """Just the columns the dataset reads, in its order (PostgreSQL's CSV columns are named by position)."""
    return sa.select(*(rows.c[name] for name in dataset.columns)).subquery()


def _in_key_order(rows: sa.FromClause, key_type: type[KeyT]) -> sa.Select:
    return sa.select(rows).order_by(*(rows.c[name] for name in key_names(key_type)))


def _batches(engine: sa.Engine, query: sa.Select, dataset: "_Dataset",
             batch_rows: int) -> Generator[pa.RecordBatch, None, None]:
    """The shaped rows of the query in record batches; one connection, held until the last batch is taken (or
    the generator is closed)."""
    # The frames are closed before the connection: an unfinished COPY holds psycopg's connection lock.
    with engine.connect() as conn, closing(_frames(conn, query, dataset.columns, batch_rows)) as frames:
        for frame in frames:
            # The daily layout turns a chunk of forecasts into many more rows: cut it again. A part may be made
            # of several chunks (Polars parses CSV in parallel): one record batch each.
            for part in dataset.shape(frame).iter_slices(batch_rows):
                yield from _table(part.rechunk(), dataset.schema).to_batches()


# --- reading --------------------------------------------------------------------------------------------

def _frames(conn: sa.Connection, query: sa.Select, columns: dict[str, pl.DataType],
            batch_rows: int) -> Iterator[pl.DataFrame]:
    """The query's rows as frames with these columns and types, streamed; none when there are no rows."""
    compiled = query.compile(dialect=conn.dialect)
    if is_duckdb(conn.engine):
        # The driver's own relation: an Arrow reader over the pending result, without a copy per row.
        parameters = [compiled.params[name] for name in compiled.positiontup or ()]
        reader = driver_connection(conn).sql(str(compiled), params=parameters).to_arrow_reader(batch_rows)
        try:
            for batch in reader:
                if batch.num_rows:
                    yield pl.DataFrame(pl.from_arrow(batch)).cast(columns)  # type: ignore[arg-type]
        finally:
            reader.close()  # the connection refuses its next statement while a result is open
        return
    with closing(_postgres_csv_chunks(conn, str(compiled), compiled.params, batch_rows)) as chunks:
        for chunk in chunks:
            frame = pl.read_csv(chunk, has_header=False, new_columns=list(columns),
                                schema_overrides=dict.fromkeys(columns, pl.String))
            yield frame.with_columns(_from_text(name, kind) for name, kind in columns.items())


def _postgres_csv_chunks(conn: sa.Connection, sql: str, parameters: dict[str, object],
                         batch_rows: int) -> Iterator[bytes]:
    """COPY's CSV of the query in chunks of about batch_rows whole lines (no column we read holds a line break)."""
    # psycopg merges the parameters into the statement client-side: COPY takes no bound parameters.
    with driver_connection(conn).cursor() as cursor, \
            cursor.copy(f"COPY ({sql}) TO STDOUT (FORMAT csv)", parameters) as copy:
        pending = bytearray()
        lines = 0
        for data in copy:  # the server sends a message per row: gather them into large chunks
            pending += data
            lines += 1
            if lines >= batch_rows:
                end = pending.rindex(b"\n") + 1
                yield bytes(pending[:end])
                del pending[:end]
                lines = 0
        if pending:
            yield bytes(pending)


def _from_text(name: str, kind: pl.DataType) -> pl.Expr:
    """PostgreSQL's CSV text of a column as its type: t/f booleans, ISO dates, timestamps with a +00 offset."""
    text = pl.col(name)
    if kind == pl.Boolean:
        return (text == "t").alias(name)
    if kind == pl.Date:
        return text.str.to_date("%Y-%m-%d")
    if kind == _INSTANT:
        return text.str.to_datetime("%Y-%m-%d %H:%M:%S%.f%#z", time_unit="us", time_zone="UTC")
    return text.cast(kind)


# --- shaping into the contract's schemas ----------------------------------------------------------------

def _forecasts(rows: pl.DataFrame) -> pl.DataFrame:
    return rows.select(*_forecast_store(), pl.col("sku_number").alias("skuNumber"),
                       pl.col("horizon_start_date").alias("horizonStartDate"),
                       pl.col("horizon_end_date").alias("horizonEndDate"),
                       _quantities().alias("quantities"), *_forecast_times())


def _forecast_days(rows: pl.DataFrame) -> pl.DataFrame:
    # A held forecast has one quantity per day of its horizon (checked at upload), so the lists explode together.
    return rows.select(*_forecast_store(), pl.col("sku_number").alias("skuNumber"),
                       pl.date_ranges("horizon_start_date", "horizon_end_date").alias("date"),
                       _quantities().alias("quantity"), *_forecast_times()).explode("date", "quantity")


def _forecast_store() -> list[pl.Expr]:
    return [pl.when(~pl.col("is_ecom")).then(pl.col("store_number")).alias("retailStoreNumber"),
            pl.when(pl.col("is_ecom")).then(pl.col("store_number")).alias("ecomStoreNumber")]


def _quantities() -> pl.Expr:
    """The stored JSON array of canonical decimal strings (pipeline.apply.quantities_json: ["1.5","2"], nothing
    escaped, no spaces) as exact decimals.
    Split as text: twice as fast as decoding it as JSON, the largest cost of an export."""
    items = pl.col("quantities").str.strip_chars("[]").str.replace_all('"', "", literal=True).str.split(",")
    return items.list.eval(pl.element().cast(_DECIMAL))


def _forecast_times() -> list[pl.Expr]:
    return [pl.col("generated_at").alias("generatedAt"), pl.col("modified_time").alias("modifiedTime")]


def _parameters(rows: pl.DataFrame) -> pl.DataFrame:
    return rows.select(pl.col("store_number").alias("retailStoreNumber"), pl.col("sku_number").alias("skuNumber"),
                       pl.col("replenishment_type").alias("replenishmentType"),
                       pl.col("reorder_point").alias("reorderPoint"),
                       pl.col("maximum_inventory").alias("maximumInventory"),
                       pl.col("parameter_source").alias("parameterSource"), "locked",
                       pl.col("modified_time").alias("modifiedTime"))


@dataclass(frozen=True)
class _Dataset:
    """How the database's rows of a dataset become the contract's: the columns read, the shaping, the schema."""

    columns: dict[str, pl.DataType]
    shape: Callable[[pl.DataFrame], pl.DataFrame]
    schema: pa.Schema


_FORECASTS = _Dataset(_FORECAST_COLUMNS, _forecasts, SALES_FORECASTS)
_FORECAST_DAYS = _Dataset(_FORECAST_COLUMNS, _forecast_days, SALES_FORECAST_DAYS)
_PARAMETERS = _Dataset(_PARAMETER_COLUMNS, _parameters, REPLENISHMENT_PARAMETERS)


def _table(frame: pl.DataFrame, schema: pa.Schema) -> pa.Table:
    """The frame as an Arrow table of exactly the schema (Polars' large strings and lists cast to plain ones)."""
    return frame.to_arrow().cast(schema)
