"""Held demand planning data as Arrow, in the schemas of contracts/held_datasets.py: the Arrow pages of the lists,
and the tenant-wide exports streamed in record batches.

Rows leave the database columnar and stay so: DuckDB hands its result over as an Arrow record batch reader, and
so does the ADBC driver for PostgreSQL (binary COPY decoded in C; psycopg's COPY cost about 2.5 µs a row in
Python). Either way no Python object is made per row, and an export holds one record batch at a time in Python,
however many rows the tenant has
(PostgreSQL reads the primary key's index in order; DuckDB sorts inside its own memory, spilling to disk when
short). Arrow's compute functions then shape a chunk into the contract's schema (the store number split into the
retail and eCom columns); the quantities' stored integers become exact decimals as a chunk is read
(db.held_quantities). Pages on DuckDB and the paths that cut or sort rows hold them as Polars frames meanwhile.
"""

import functools
import threading
import time
from collections.abc import Callable, Generator, Iterator
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, nullcontext
from dataclasses import dataclass
from datetime import date, datetime
from typing import Literal

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import sqlalchemy as sa
from cachetools import LRUCache, cached
from sqlalchemy.sql.cache_key import CacheKey

from contracts.held_datasets import REPLENISHMENT_PARAMETERS, SALES_FORECAST_DAYS, SALES_FORECASTS
from db.adbc import InlinedTemplate, adbc_connection, inlined
from db.bulk import driver_connection
from db.continued_reads import CAPACITY, parked_reads
from db.engine import duckdb_statement, is_duckdb
from db.held import (
    PAGE_PART,
    ForecastKey,
    KeyT,
    PageKey,
    ParameterKey,
    first_store_after,
    held_forecasts,
    held_parameters,
    key_names,
    page_length,
    page_query,
    store_page_query,
)
from db.held_quantities import POLARS_DECIMAL, as_decimals
from db.parameter_window import parameter_page_rows

Layout = Literal["horizon", "daily"]
LAYOUTS: tuple[Layout, ...] = ("horizon", "daily")
# Rows per record batch of an export: large enough that per-batch costs vanish, small enough that a daily
# batch of forecasts (up to 62 days each) stays a few tens of MB.
BATCH_ROWS = 16_384
# PostgreSQL's rows come through ADBC in record batches of about this many bytes (the driver's default is 16 MB).
_BATCH_BYTES = 4 * 1024 * 1024

# Threads reading ahead for parked reads (db.continued_reads), at most one each; a read reads its next frame
# whenever it holds no more than this many pages of rows (3 against 1: 424k against 400k rows/s paged over HTTP,
# medians of three runs each, alternating, 2026-11-30).
_READ_AHEAD = ThreadPoolExecutor(max_workers=CAPACITY, thread_name_prefix="read-ahead")
_READ_AHEAD_PAGES = 3

_INSTANT = pl.Datetime("us", "UTC")
# The columns the database rows are read with, as Polars types.
_QUANTITIES = pl.List(POLARS_DECIMAL)  # stored as bytes (db.held_quantities)
_FORECAST_COLUMNS = {"is_ecom": pl.Boolean, "store_number": pl.String, "sku_number": pl.String,
                     "horizon_start_date": pl.Date, "horizon_end_date": pl.Date, "quantities": _QUANTITIES,
                     "generated_at": _INSTANT, "modified_time": _INSTANT}
_PARAMETER_COLUMNS = {"store_number": pl.String, "sku_number": pl.String, "replenishment_type": pl.String,
                      "reorder_point": POLARS_DECIMAL, "maximum_inventory": POLARS_DECIMAL, "modified_time": _INSTANT,
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
    """Unexpired held forecasts as SALES_FORECASTS: retail stores first, then eCom stores; by store number, then SKU
    number; a page never spans two stores."""
    if not is_duckdb(engine):
        # The statements are built and compiled once per shape; each page writes its values in.
        retail, ecom = retail_store_number is not None, ecom_store_number is not None
        values = {"tenant_id": tenant_id, "today": today, "retail_store_number": retail_store_number,
                  "ecom_store_number": ecom_store_number, **_key_values(after)}
        if after is None:
            template = _forecast_page_template(retail, ecom, limit)
            return _arrow_page(engine, template.render(values), ForecastKey, limit, _FORECASTS, in_parts=True)
        listing = ("sales_forecasts", tenant_id, retail_store_number, ecom_store_number, today)
        return _continued_page(engine, listing, after, limit, _FORECASTS,
                               lambda: _forecasts_after_template(retail, ecom).render(values))
    rows = held_forecasts(tenant_id, retail_store_number=retail_store_number,
                          ecom_store_number=ecom_store_number, today=today, columns=list(_FORECAST_COLUMNS))
    return _sought_page(engine, rows, ForecastKey, after, limit, _FORECASTS)


def _sought_page(engine: sa.Engine, rows: sa.FromClause, key_type: type[KeyT], after: KeyT | None, limit: int,
                 dataset: "_Dataset") -> ArrowPage:
    """A DuckDB page by seeking (db.held's "paging by seeking"): the store of the next row, then that store's rows,
    in one transaction, so the store is found and read in one snapshot."""
    with engine.connect() as conn:
        store = first_store_after(conn, rows, key_type, after)
        if store is None:
            return ArrowPage(dataset.schema.empty_table(), None)
        return _arrow_page(engine, store_page_query(rows, key_type, store, after, limit), key_type, limit, dataset,
                           in_parts=False, conn=conn)


@functools.lru_cache(maxsize=64)
def _forecast_page_template(retail: bool, ecom: bool, limit: int) -> InlinedTemplate:
    """The PostgreSQL query of a first page of forecasts, its values bound parameters named after
    sales_forecast_arrow_page's arguments; unordered (see db.held.page_query)."""
    return InlinedTemplate(page_query(_forecasts_of(retail, ecom), ForecastKey, None, limit, ordered=False))


@functools.lru_cache(maxsize=8)
def _forecasts_after_template(retail: bool, ecom: bool) -> InlinedTemplate:
    """The PostgreSQL query of every forecast after a page key (after_store_number…), in key order: the rest of
    the list, which a continued read takes its pages from."""
    rows = _forecasts_of(retail, ecom)
    key = [rows.c[name] for name in key_names(ForecastKey)]
    after = [sa.bindparam(f"after_{name}", type_=column.type) for name, column in zip(key_names(ForecastKey), key,
                                                                                        strict=True)]
    return InlinedTemplate(sa.select(rows).where(sa.tuple_(*key) > sa.tuple_(*after)).order_by(*key))


def _forecasts_of(retail: bool, ecom: bool) -> sa.Subquery:
    """The held forecasts a page reads, the tenant, today and the store filters given being bound parameters."""
    return held_forecasts(sa.bindparam("tenant_id"),  # type: ignore[arg-type]
                          retail_store_number=sa.bindparam("retail_store_number") if retail else None,
                          ecom_store_number=sa.bindparam("ecom_store_number") if ecom else None,
                          today=sa.bindparam("today"), columns=list(_FORECAST_COLUMNS))  # type: ignore[arg-type]


def _key_values(after: PageKey | None) -> dict[str, object]:
    """The page key's values as a page template names them (after_store_number…); none for a first page."""
    return {f"after_{name}": value for name, value in after.to_dict().items()} if after else {}


def replenishment_parameter_arrow_page(engine: sa.Engine, tenant_id: str, *, retail_store_number: str | None,
                                       modified_since: datetime | None, after: ParameterKey | None,
                                       limit: int) -> ArrowPage:
    """The page `db.held.replenishment_parameter_page` reads (the values in use per retail store and SKU of its
    assortment), as REPLENISHMENT_PARAMETERS."""
    if is_duckdb(engine) and modified_since is None:
        with engine.connect() as conn:  # one transaction: the stores and their lines read in one snapshot
            rows = parameter_page_rows(functools.partial(_frame, engine, conn=conn), tenant_id, retail_store_number,
                                       after, limit)
        return _page(rows, ParameterKey, limit, _PARAMETERS)
    return parameter_page_in_one_statement(engine, tenant_id, retail_store_number=retail_store_number,
                                           modified_since=modified_since, after=after, limit=limit)


def parameter_page_in_one_statement(engine: sa.Engine, tenant_id: str, *, retail_store_number: str | None,
                                    modified_since: datetime | None, after: ParameterKey | None,
                                    limit: int) -> ArrowPage:
    """replenishment_parameter_arrow_page's page as db.held's one statement resolves and reads it: PostgreSQL's
    way, and DuckDB's with modifiedSince (benchmarks.parameter_pages compares it with DuckDB's other way)."""
    if not is_duckdb(engine):
        # The statement is built and compiled once per shape; each page writes its values in.
        template = _parameter_page_template(retail_store_number is not None, modified_since is not None,
                                            after is not None, limit)
        values = {"tenant_id": tenant_id, "retail_store_number": retail_store_number,
                  "modified_since": modified_since, **_key_values(after)}
        return _arrow_page(engine, template.render(values), ParameterKey, limit, _PARAMETERS, in_parts=True)
    # DuckDB seeks: page_query's head (a scalar subquery of a LIMIT 1 CTE) came back from DuckDB 2.0 as "more than
    # one row" over this statement once its file held many tenants (a CI run; not reproduced alone).
    rows = held_parameters(tenant_id, retail_store_number=retail_store_number, modified_since=modified_since,
                           after=after, windowed=modified_since is None)
    return _sought_page(engine, _narrowed(rows, _PARAMETERS), ParameterKey, after, limit, _PARAMETERS)


@functools.lru_cache(maxsize=64)
def _parameter_page_template(retail: bool, since: bool, after: bool, limit: int) -> InlinedTemplate:
    """The PostgreSQL page query of replenishment parameters, its values bound parameters named after
    replenishment_parameter_arrow_page's arguments (the key's as after_store_number…); unordered (see
    db.held.page_query)."""
    key = [sa.bindparam(f"after_{name}", type_=sa.String()) for name in key_names(ParameterKey)]
    modified_since = sa.bindparam("modified_since", type_=sa.DateTime(timezone=True)) if since else None
    rows = held_parameters(sa.bindparam("tenant_id"),  # type: ignore[arg-type]
                           retail_store_number=sa.bindparam("retail_store_number") if retail else None,
                           modified_since=modified_since,  # type: ignore[arg-type]
                           after=ParameterKey(*key) if after else None,  # type: ignore[arg-type]
                           windowed=not since)
    return InlinedTemplate(page_query(_narrowed(rows, _PARAMETERS), ParameterKey, key if after else None, limit,
                                      ordered=False))


def _arrow_page(engine: sa.Engine, query: sa.Executable | str, key_type: type[KeyT], limit: int,
                dataset: "_Dataset", *, in_parts: bool, conn: sa.Connection | None = None) -> ArrowPage:
    """As db.held's page reader, cutting the fetched rows with Polars. The query is page_query's (its SQL on
    PostgreSQL), ordered, or `in_parts` (unordered: its two reads are put in order here, each as it came); read
    in the caller's transaction when it passes `conn` (DuckDB)."""
    columns = {**dataset.columns, PAGE_PART: pl.Int32} if in_parts else dataset.columns
    fetched = _frame(engine, query, columns, conn)
    if PAGE_PART in columns:
        fetched = parts_in_key_order(fetched, key_names(key_type)[-1])
    return _page(fetched, key_type, limit, dataset)


def _page(fetched: pl.DataFrame, key_type: type[KeyT], limit: int, dataset: "_Dataset") -> ArrowPage:
    """The page of rows in key order after the key: those of the first store, up to the limit, and the key to read
    the next page after when any fetched row is left."""
    length, following = _cut(fetched.select(key_names(key_type)).to_arrow(), key_type, limit)
    return ArrowPage(dataset.shape(fetched.head(length).to_arrow()), following)


def _cut(keys: pa.Table, key_type: type[KeyT], limit: int) -> tuple[int, KeyT | None]:
    """How many of the rows (their key columns, in key order after the key) make the page, and the key to read the
    next page after when any row is left. In Arrow: a page's few Polars calls on these columns cost about 1 ms."""
    names = key_names(key_type)
    length = page_length(limit, _first_store_rows(keys, names[:-1]))
    if keys.num_rows <= length:
        return length, None
    return length, key_type(**{name: keys.column(name)[length - 1].as_py() for name in names})


def _continued_page(engine: sa.Engine, listing: tuple[object, ...], after: KeyT, limit: int, dataset: "_Dataset",
                    rest: Callable[[], str]) -> ArrowPage:
    """The page after the key, taken from the read parked there by the page before (db.continued_reads), else from
    a read of the rest of the list (`rest`: its SQL) opened now; the read is parked again for the page after."""
    reads = parked_reads(engine)
    page = None
    if (taken := reads.take((listing, after))) is not None:
        read, opened = taken
        try:
            page = read.page(limit)
        except Exception:
            read.close()  # a parked read that failed (its connection lost, say): read afresh
    if page is None:
        read = _ContinuedRead(_postgresql_batches(engine, rest(), dataset.columns), type(after), dataset)
        opened = time.monotonic()
        try:
            page = read.page(limit)
        except BaseException:
            read.close()
            raise
    if page.next is None:
        read.close()
    else:
        read.read_ahead(limit)
        reads.park((listing, page.next), read, opened)
    return page


def _shaped(batches: Generator[pa.RecordBatch, None, None], key_columns: list[str],
            dataset: "_Dataset") -> Generator[tuple[pa.Table, pa.Table], None, None]:
    """Each batch's key columns, and its rows in the dataset's schema: shaped as they are read (ahead, off the
    request), a page is then a slice of them."""
    with closing(batches):
        for batch in batches:
            rows = pa.Table.from_batches([batch])
            yield rows.select(key_columns), dataset.shape(rows)


class _ContinuedRead:
    """The rest of a list in key order as it is read, frame by frame, cut into pages as db.held cuts them."""

    def __init__(self, batches: Generator[pa.RecordBatch, None, None], key_type: type[PageKey],
                 dataset: "_Dataset") -> None:
        names = key_names(key_type)
        self._key_type, self._store = key_type, names[:-1]
        self._frames = _shaped(batches, names, dataset)
        # The rows read and not yet paged, in step: their key columns (none before the first frame: their types
        # are the driver's), and as the contract's table.
        self._keys = pa.table({})
        self._table = dataset.schema.empty_table()
        self._read_all = False
        self._ahead: Future[tuple[pa.Table, pa.Table] | None] | None = None  # the next frame, being read

    def page(self, limit: int) -> ArrowPage:
        while not self._read_all and not self._page_is_cut(limit):
            if (frame := self._next_frame()) is None:
                self._read_all = True
            else:
                keys, table = frame
                self._keys = pa.concat_tables([self._keys, keys]) if self._keys.num_columns else keys
                self._table = pa.concat_tables([self._table, table])
        length, following = _cut(self._keys, self._key_type, limit)
        page = ArrowPage(self._table.slice(0, length), following)
        self._keys, self._table = self._keys.slice(length), self._table.slice(length)
        return page

    def _page_is_cut(self, limit: int) -> bool:
        """Whether a row after the page is at hand: one beyond the limit, or one of a later store."""
        if self._keys.num_rows == 0:
            return False
        stores = [self._keys.column(name) for name in self._store]
        return self._keys.num_rows > limit or any(store[0] != store[-1] for store in stores)

    def read_ahead(self, limit: int) -> None:
        """Read the next frame in the background when few pages of rows are left: the database and the driver work
        while the page just cut is sent and the next one asked for."""
        if not self._read_all and self._ahead is None and self._keys.num_rows <= _READ_AHEAD_PAGES * limit:
            self._ahead = _READ_AHEAD.submit(next, self._frames, None)

    def _next_frame(self) -> tuple[pa.Table, pa.Table] | None:
        if (ahead := self._ahead) is None:
            return next(self._frames, None)
        self._ahead = None
        return ahead.result()

    def close(self) -> None:
        if self._ahead is not None:  # the generator is closed once no thread runs it
            futures.wait([self._ahead])
        self._frames.close()


def _first_store_rows(keys: pa.Table, store: list[str]) -> int:
    """How many rows (in key order) the first row's store has: they come first."""
    if not keys.num_rows:
        return 0
    first_store = functools.reduce(pc.and_, (pc.equal(keys.column(name), keys.column(name)[0]) for name in store))
    return pc.sum(first_store).as_py()


def parts_in_key_order(fetched: pl.DataFrame, last_key: str) -> pl.DataFrame:
    """The unordered page query's rows in key order, without their PAGE_PART: the first store's rows (part 0: one
    store, so in the order of the key's last column), then the next store's first row (part 1). PostgreSQL's plans
    bring each read in order, so this is mostly a check (0.2 ms a page against 5 ms for a sort); a union's row order
    is not promised, so the rows are sorted when they are not in order."""
    parts = fetched.get_column(PAGE_PART)
    if not (parts.is_sorted() and fetched.get_column(last_key).head((parts == 0).sum()).is_sorted()):
        fetched = fetched.sort(PAGE_PART, last_key)
    return fetched.drop(PAGE_PART)


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
    with closing(_frames(engine, query, dataset.columns, batch_rows)) as frames:
        for frame in frames:
            # The daily layout turns a chunk of forecasts into many more rows: cut it again, a record batch a part.
            shaped = dataset.shape(frame.to_arrow())
            for start in range(0, shaped.num_rows, batch_rows):
                yield from shaped.slice(start, batch_rows).combine_chunks().to_batches()


# --- reading --------------------------------------------------------------------------------------------

def _frames(engine: sa.Engine, query: sa.Executable | str, columns: dict[str, pl.DataType],
            batch_rows: int, conn: sa.Connection | None = None) -> Iterator[pl.DataFrame]:
    """The query's rows (given as SQL: PostgreSQL only) as frames with these columns and types, streamed; none
    when there are no rows. A connection is held until the last frame is taken or the generator is closed; on
    DuckDB it is the caller's `conn` when given."""
    if not is_duckdb(engine):
        # The driver's batches are cut by size: recut into batch_rows, as the exports' record batches are.
        pending = pl.DataFrame(schema=columns)
        for frame in _postgresql_frames(engine, query, columns):
            pending = pl.concat([pending, frame])
            while pending.height >= batch_rows:
                yield pending.head(batch_rows)
                pending = pending.slice(batch_rows)
        if pending.height:
            yield pending
        return
    with nullcontext(conn) if conn is not None else engine.connect() as conn:
        # The driver's own relation: an Arrow reader over the pending result, without a copy per row.
        sql, parameters = _compiled_on_duckdb(conn.dialect, query)
        raw = driver_connection(conn)
        reader = raw.sql(duckdb_statement(raw, sql), params=parameters).to_arrow_reader(batch_rows)
        try:
            for batch in reader:
                if batch.num_rows:
                    yield _typed(batch, columns)
        finally:
            reader.close()  # the connection refuses its next statement while a result is open


def _postgresql_batches(engine: sa.Engine, query: sa.Executable | str,
                        columns: dict[str, pl.DataType]) -> Generator[pa.RecordBatch, None, None]:
    """The query's rows as record batches (_typed_rows) of the driver's (a few MB each), as they arrive; a
    connection of the ADBC pool held until the last is taken or the generator closed."""
    with adbc_connection(engine) as adbc, adbc.cursor() as cursor:
        # The driver reads COPY's binary output into record batches of about this size, as it arrives.
        cursor.adbc_statement.set_options(**{"adbc.postgresql.batch_size_hint_bytes": str(_BATCH_BYTES)})
        cursor.execute(query if isinstance(query, str) else inlined(query))
        for batch in cursor.fetch_record_batch():
            yield _typed_rows(batch, columns)


def _postgresql_frames(engine: sa.Engine, query: sa.Executable | str,
                       columns: dict[str, pl.DataType]) -> Generator[pl.DataFrame, None, None]:
    """_postgresql_batches' batches as frames of these columns and types."""
    with closing(_postgresql_batches(engine, query, columns)) as batches:
        for batch in batches:
            yield _as_frame(batch, columns)


def _frame(engine: sa.Engine, query: sa.Executable | str, columns: dict[str, pl.DataType],
           conn: sa.Connection | None = None) -> pl.DataFrame:
    """The query's rows as one frame (_frames' arguments; for the few rows of a page)."""
    with closing(_frames(engine, query, columns, BATCH_ROWS, conn)) as read:
        frames = list(read)
    return pl.concat(frames) if frames else pl.DataFrame(schema=columns)


def _typed(batch: pa.RecordBatch, columns: dict[str, pl.DataType]) -> pl.DataFrame:
    """A record batch of the database's as a frame of these columns and types."""
    return _as_frame(_typed_rows(batch, columns), columns)


def _typed_rows(batch: pa.RecordBatch, columns: dict[str, pl.DataType]) -> pa.RecordBatch:
    """A record batch of the database's with its values as the contract has them, as far as Arrow needs no cast:
    PostgreSQL's numeric comes from ADBC as its text (an opaque extension type), given as that text; lists of
    decimals (held quantities) come as the bytes of their stored integers, given as the decimals."""
    arrays = [array.storage if isinstance(array.type, pa.BaseExtensionType) else array for array in batch.columns]
    arrays = [as_decimals(array) if columns[name] == _QUANTITIES else array
              for name, array in zip(batch.schema.names, arrays, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, names=batch.schema.names)


def _as_frame(rows: pa.RecordBatch, columns: dict[str, pl.DataType]) -> pl.DataFrame:
    """Typed rows as a frame of these columns and types (numeric text cast to decimals, among others)."""
    return pl.DataFrame(pl.from_arrow(rows)).cast(columns)  # type: ignore[arg-type]


# --- shaping into the contract's schemas ----------------------------------------------------------------

# From rows of the dataset's columns (read by _typed_rows, or a frame's as Arrow) to the contract's table, in Arrow:
# on the Arrow pages' path Polars' conversions and calls cost more than the page's own shaping (0.11 against 0.03 s
# per 1M forecasts, in process).

def _forecasts(rows: pa.Table) -> pa.Table:
    store, is_ecom = rows.column("store_number"), rows.column("is_ecom")
    none = pa.scalar(None, store.type)
    return _contract_table({"retailStoreNumber": pc.if_else(is_ecom, none, store),
                            "ecomStoreNumber": pc.if_else(is_ecom, store, none), "skuNumber": rows["sku_number"],
                            "horizonStartDate": rows["horizon_start_date"], "horizonEndDate": rows["horizon_end_date"],
                            "quantities": rows["quantities"], "generatedAt": rows["generated_at"],
                            "modifiedTime": rows["modified_time"]}, SALES_FORECASTS)


def _forecast_days(rows: pa.Table) -> pa.Table:
    # A held forecast has one quantity per day of its horizon (checked at upload), so the lists explode together.
    days = pl.DataFrame(pl.from_arrow(_forecasts(rows))).select(
        "retailStoreNumber", "ecomStoreNumber", "skuNumber",
        pl.date_ranges("horizonStartDate", "horizonEndDate").alias("date"), pl.col("quantities").alias("quantity"),
        "generatedAt", "modifiedTime").explode("date", "quantity")
    return days.to_arrow().cast(SALES_FORECAST_DAYS)


def _parameters(rows: pa.Table) -> pa.Table:
    return _contract_table({"retailStoreNumber": rows["store_number"], "skuNumber": rows["sku_number"],
                            "replenishmentType": rows["replenishment_type"], "reorderPoint": rows["reorder_point"],
                            "maximumInventory": rows["maximum_inventory"],
                            "parameterSource": rows["parameter_source"], "locked": rows["locked"],
                            "modifiedTime": rows["modified_time"]}, REPLENISHMENT_PARAMETERS)


def _contract_table(columns: dict[str, pa.ChunkedArray], schema: pa.Schema) -> pa.Table:
    """The columns, named as the schema's fields, as a table of exactly the schema (large strings and lists, say,
    cast to plain ones)."""
    return pa.table([columns[name] for name in schema.names], names=schema.names).cast(schema)


@dataclass(frozen=True)
class _Dataset:
    """How the database's rows of a dataset become the contract's: the columns read, the shaping, the schema."""

    columns: dict[str, pl.DataType]
    shape: Callable[[pa.Table], pa.Table]  # rows of these columns, as Arrow, to a table of the schema
    schema: pa.Schema


_FORECASTS = _Dataset(_FORECAST_COLUMNS, _forecasts, SALES_FORECASTS)
_FORECAST_DAYS = _Dataset(_FORECAST_COLUMNS, _forecast_days, SALES_FORECAST_DAYS)
_PARAMETERS = _Dataset(_PARAMETER_COLUMNS, _parameters, REPLENISHMENT_PARAMETERS)


def _compiled_on_duckdb(dialect: sa.Dialect, query: sa.Executable) -> tuple[str, list[object]]:
    """The query's SQL and its values in order, the SQL compiled once per shape of query (SQLAlchemy's cache key,
    which leaves out the values) as SQLAlchemy's own compiled cache does for statements it executes: a page's
    query is built anew for each read, and compiling it was a fifth of a DuckDB page read's CPU."""
    key = query._generate_cache_key()
    if key is None:  # a construct SQLAlchemy does not cache
        compiled = query.compile(dialect=dialect)
        values = compiled.construct_params()
    else:
        compiled = _compiled(key.key, dialect, query, key)
        values = compiled.construct_params(extracted_parameters=key.bindparams)
    return compiled.string, [values[name] for name in compiled.positiontup or ()]


@cached(LRUCache(256), key=lambda shape, dialect, query, key: shape, lock=threading.Lock())
def _compiled(shape: tuple[object, ...], dialect: sa.Dialect, query: sa.Executable, key: CacheKey) -> sa.Compiled:
    """The query compiled for every query of its shape (DuckDB's dialect only: pages and exports on PostgreSQL
    are read through ADBC)."""
    return query.compile(dialect=dialect, cache_key=key)
