"""Benchmark of the pipeline's apply: `uv run python -m benchmarks.pipeline_apply [--batches N]`.

Each step of issue 19 point 3 against what it replaced, in the same run (CPU per 1,000 items of this process
and, on PostgreSQL, of its backends; the load average beside each):
- staging 5,000 rows on PostgreSQL: CSV through psycopg's COPY into a temporary table vs ADBC's binary COPY
  into an unlogged one (db.bulk.staged vs db.bulk.ingested);
- writing them: one `INSERT … ON CONFLICT` vs one UPDATE of held keys and one INSERT of new ones
  (pipeline.bulk.write), for new keys and for held keys;
- the worker's loop over N waiting batches of a tenant: one by one vs applied together (pipeline.worker);
- settling which of 100,000 judged items apply (pipeline.apply._settled): the latest earlier run per key by one
  running maximum over coded segments vs by a window per key, with every key once and with every key twice.
Then, as before:

Seeds one tenant (201 released retail stores, 5,000 SKUs in a base assortment) on a temporary DuckDB file
and on a PostgreSQL database it creates and drops, then applies 5,000-item batches, one store each, in a
transaction each as the worker does: forecasts with a 30-day horizon (inserted, replaced by a later run,
then offered again by an earlier run) and replenishment parameters (creating the store lines, then
updating them). It prints milliseconds per batch (median, and the mean that the total time follows: it
includes DuckDB's checkpoints) and items per second, and the baseline measured in the same run: the
row-wise way, quantities rendered per element in Python and one SQLAlchemy executemany upsert.
"""

import argparse
import random
import resource
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert

from benchmarks.measure import database_backends_cpu, database_cpu_since, load
from contracts.batch_kinds import REPLENISHMENT_PARAMETER, SALES_FORECAST
from db.backoffice import load_document
from db.batches import StagedBatch, record_batch
from db.bulk import ingested, staged
from db.engine import create_engine
from db.held_quantities import stored, stored_value
from db.ids import new_id
from db.migrate import upgrade
from db.schema import sales_forecasts
from db.staging import stage_items, staged_name
from db.tenants import create_tenant
from pipeline import bulk
from pipeline.apply import _KEY, BatchItems, _frame, _settled, apply_batch
from pipeline.worker import Pipeline, tenant_locks_for
from settings import Settings

POSTGRES_SERVER = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
# One store per batch, and one more for the baseline's batch, whose keys are then new as well.
MAX_BATCHES, SKUS, ITEMS, DAYS = 200, 5_000, 5_000, 30
STORES = MAX_BATCHES + 1
QUANTITY = pa.decimal128(18, 4)


def seed_document() -> dict[str, Any]:
    skus = [f"{700000 + i}" for i in range(SKUS)]
    lines = [{"skuNumber": sku, "replenishmentType": "AUTO", "reorderPoint": "4", "maximumInventory": "12"}
             for sku in skus]
    return {
        "companies": [{"number": "10", "name": "Bench AS", "currencyIsoCode": "NOK"}],
        "skus": [{"number": sku, "name": f"SKU {sku}"} for sku in skus],
        "assortments": [{"code": "BASE", "kind": "BASE", "name": "Base", "lines": lines}],
        "retailStores": [{"number": f"{1000 + i}", "name": f"Store {i}", "companyNumber": "10", "released": True,
                          "baseAssortmentCode": "BASE"} for i in range(STORES)],
        "ecomStores": [],
    }


def forecast_batch(store: int, start: date, rng: random.Random) -> pa.Table:
    """All SKUs of one store; quantities with up to 4 decimals."""
    quantities = [[Decimal(rng.randrange(0, 1_000_000)).scaleb(-4) for _ in range(DAYS)] for _ in range(ITEMS)]
    return pa.table({
        "item_index": pa.array(range(ITEMS), pa.int32()),
        "retail_store_number": pa.array([f"{1000 + store}"] * ITEMS, pa.string()),
        "ecom_store_number": pa.nulls(ITEMS, pa.string()),
        "sku_number": pa.array([f"{700000 + i}" for i in range(ITEMS)], pa.string()),
        "horizon_start_date": pa.array([start] * ITEMS, pa.date32()),
        "horizon_end_date": pa.array([start + timedelta(days=DAYS - 1)] * ITEMS, pa.date32()),
        "quantities": pa.array(quantities, pa.list_(QUANTITY)),
    })


def parameter_batch(store: int, rng: random.Random) -> pa.Table:
    reorder_points = [Decimal(rng.randrange(0, 100_000)).scaleb(-2) for _ in range(ITEMS)]
    return pa.table({
        "item_index": pa.array(range(ITEMS), pa.int32()),
        "retail_store_number": pa.array([f"{1000 + store}"] * ITEMS, pa.string()),
        "sku_number": pa.array([f"{700000 + i}" for i in range(ITEMS)], pa.string()),
        "reorder_point": pa.array(reorder_points, QUANTITY),
        "maximum_inventory": pa.array([point + 10 for point in reorder_points], QUANTITY),
    })


def timed(run: Callable[[], Any]) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def report(label: str, milliseconds: list[float]) -> float:
    median, mean = statistics.median(milliseconds), statistics.mean(milliseconds)
    print(f"  {label:<46} median {median:8.1f} ms/batch  {ITEMS / median * 1000:>10,.0f} items/s"
          f"  (n={len(milliseconds)}, mean {mean:.1f} ms, max {max(milliseconds):.1f} ms)")
    return median


def apply_in_transaction(engine: sa.Engine, tenant_id: str, kind: str, generated_at: datetime,
                         items: pa.Table) -> None:
    with engine.begin() as conn:
        apply_batch(conn, tenant_id, kind, new_id(), generated_at, items, datetime.now(UTC))


def row_wise_forecasts(engine: sa.Engine, tenant_id: str, generated_at: datetime, items: pa.Table) -> None:
    """The baseline: per-element conversion in Python, one executemany upsert; no checks, no purge."""
    now = datetime.now(UTC)
    rows = [{"tenant_id": tenant_id, "is_ecom": False, "store_number": item["retail_store_number"],
             "sku_number": item["sku_number"], "horizon_start_date": item["horizon_start_date"],
             "horizon_end_date": item["horizon_end_date"],
             "quantities": stored_value(item["quantities"]),
             "generated_at": generated_at, "modified_time": now, "batch_id": "baseline"}
            for item in items.to_pylist()]
    statement = pg_insert(sales_forecasts)
    statement = statement.on_conflict_do_update(
        index_elements=["tenant_id", "is_ecom", "store_number", "sku_number"],
        set_={name: statement.excluded[name] for name in ("horizon_start_date", "horizon_end_date", "quantities",
                                                          "generated_at", "modified_time", "batch_id")})
    with engine.begin() as conn:
        conn.execute(statement, rows)


@contextmanager
def cpu_report(engine: sa.Engine, label: str, items: int) -> Iterator[None]:
    """Prints the block's wall time and CPU per 1,000 items of this process and of the database's backends."""
    database, process, wall = database_backends_cpu(engine), time.process_time(), time.perf_counter()
    yield
    wall, process = time.perf_counter() - wall, time.process_time() - process
    database_cpu = database_cpu_since(engine, database)
    print(f"  {label:<52} {wall / items * 1e6:7.1f} ms wall per 1,000 items; CPU per 1,000: process "
          f"{process / items * 1e6:5.1f} ms, database {database_cpu / items * 1e6:5.1f} ms  (load {load():.1f})")


def held_rows(tenant_id: str, store: int, generated_at: datetime) -> pl.DataFrame:
    """5,000 rows as the pipeline holds them, with `held` for pipeline.bulk.write."""
    now = datetime.now(UTC)
    quantities = stored_value(f"{day % 17}.{day % 4}" for day in range(DAYS))
    return pl.DataFrame({
        "tenant_id": [tenant_id] * ITEMS, "is_ecom": [False] * ITEMS, "store_number": [f"{1000 + store}"] * ITEMS,
        "sku_number": [f"{700000 + i}" for i in range(ITEMS)],
        "horizon_start_date": [now.date()] * ITEMS, "horizon_end_date": [now.date() + timedelta(days=DAYS - 1)] * ITEMS,
        "quantities": [quantities] * ITEMS, "generated_at": [generated_at] * ITEMS, "modified_time": [now] * ITEMS,
        "batch_id": ["bench"] * ITEMS, "held": [False] * ITEMS})


def staging_and_writes(engine: sa.Engine, batches: int) -> None:
    tenant_id = create_tenant(engine, "bench writes", is_test=True)
    first, later = datetime.now(UTC) - timedelta(hours=1), datetime.now(UTC)
    if engine.dialect.name == "postgresql":
        tables = [held_rows(tenant_id, store, first).drop("held").to_arrow() for store in range(batches)]
        for label, stage in (("staging: CSV COPY into a temporary table", staged),
                             ("staging: ADBC binary COPY into an unlogged table", ingested)):
            with cpu_report(engine, label, batches * ITEMS):
                for table in tables:
                    with engine.begin() as conn, stage(conn, table):
                        pass
    key = ("tenant_id", "is_ecom", "store_number", "sku_number")
    updates = [name for name in held_rows(tenant_id, 0, first).columns if name not in (*key, "held")]

    def upsert(conn: sa.Connection, rows: pl.DataFrame) -> None:
        names = ", ".join(rows.columns[:-1])
        with ingested(conn, rows.drop("held").to_arrow()) as source:
            conn.execute(sa.text(
                f"INSERT INTO sales_forecasts ({names}) SELECT {names} FROM {source} ON CONFLICT ({', '.join(key)}) "
                f"DO UPDATE SET {', '.join(f'{name} = excluded.{name}' for name in updates)} "
                "WHERE sales_forecasts.generated_at <= excluded.generated_at"))

    def update_and_insert(conn: sa.Connection, rows: pl.DataFrame) -> None:
        bulk.write(conn, sales_forecasts, rows, key, updates)

    for label, write in (("INSERT … ON CONFLICT", upsert), ("UPDATE held + INSERT new", update_and_insert)):
        stores = range(batches) if write is upsert else range(batches, 2 * batches)
        with cpu_report(engine, f"write, new keys: {label}", batches * ITEMS):
            for store in stores:
                with engine.begin() as conn:
                    write(conn, held_rows(tenant_id, store, first))
        with cpu_report(engine, f"write, held keys (a later run): {label}", batches * ITEMS):
            for store in stores:
                with engine.begin() as conn:
                    write(conn, held_rows(tenant_id, store, later).with_columns(held=pl.lit(True)))


def worker_loop(engine: sa.Engine, batches: int) -> None:
    """The worker over `batches` waiting forecast batches of a tenant (new keys): one by one, then together."""
    today = datetime.now(UTC).date()
    tables = [forecast_batch(store, today, random.Random(store)) for store in range(batches)]
    with tempfile.TemporaryDirectory() as staging_dir:
        for label, coalesce_items in (("worker, one by one", 0), ("worker, waiting batches together", 100_000)):
            tenant_id = create_tenant(engine, f"bench loop {coalesce_items}", is_test=True)
            load_document(engine, tenant_id, seed_document())
            generated_at = datetime.now(UTC)
            for number, table in enumerate(tables):
                batch_id = new_id()
                name = staged_name(tenant_id, batch_id, "0" * 64)
                stage_items(Path(staging_dir), name, table)
                record_batch(engine, tenant_id, batch_id, SALES_FORECAST,
                             StagedBatch("0" * 64, name, generated_at, number + 1, batches, ITEMS, []),
                             datetime.now(UTC))
            pipeline = Pipeline(engine, Path(staging_dir), tenant_locks_for(engine), coalesce_items=coalesce_items)
            with cpu_report(engine, label, batches * ITEMS):
                assert pipeline.process_tenant(tenant_id) == batches


def bench(engine: sa.Engine, batches: int) -> None:
    rng = random.Random(7)
    tenant_id = create_tenant(engine, "bench", is_test=True)
    print(f"  seeding took {timed(lambda: load_document(engine, tenant_id, seed_document())) / 1000:.1f} s")
    today = datetime.now(UTC).date()
    forecasts = [forecast_batch(store, today, rng) for store in range(batches)]
    parameters = [parameter_batch(store, rng) for store in range(batches)]
    first, second = datetime.now(UTC) - timedelta(hours=1), datetime.now(UTC)

    def run(kind: str, tables: list[pa.Table], generated_at: datetime) -> list[float]:
        return [timed(lambda t=table: apply_in_transaction(engine, tenant_id, kind, generated_at, t))
                for table in tables]

    fast = report("forecasts, new keys", run(SALES_FORECAST, forecasts, first))
    baseline = report("baseline: row-wise forecast upsert, new keys",
                      [timed(lambda: row_wise_forecasts(engine, tenant_id, first,
                                                        forecast_batch(batches, today, rng)))])
    print(f"  apply_batch is {baseline / fast:.1f}x faster than the row-wise baseline")
    report("forecasts, replacing (later run)", run(SALES_FORECAST, forecasts, second))
    report("forecasts, superseded (earlier run)", run(SALES_FORECAST, forecasts, first))
    report("replenishment, creating store lines", run(REPLENISHMENT_PARAMETER, parameters, first))
    report("replenishment, updating store lines", run(REPLENISHMENT_PARAMETER, parameters, second))


def storing(batch: pa.Table) -> None:
    """Quantities to their stored bytes: vectorised (as apply_batch does) against a Python loop."""
    frame = pl.from_arrow(batch)
    vectorised = timed(lambda: stored(frame.get_column("quantities")))
    looped = timed(lambda: [stored_value(row) for row in batch.column("quantities").to_pylist()])
    print(f"quantities to stored bytes, {ITEMS} x {DAYS}: vectorised {vectorised:.1f} ms, Python loop {looped:.1f} ms "
          f"({looped / vectorised:.0f}x)")


def all_threads_cpu() -> float:
    """CPU seconds of this process, all its threads (Polars') included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def settled_by_windows(judged: pl.DataFrame) -> pl.DataFrame:
    """What _settled did before: the running maximum per key by a window, which Polars runs group by group."""
    judged = judged.sort("member", "item_index")
    passed = judged.filter(pl.col("verdict").is_null())
    bar = pl.max_horizontal("held_generated_at", pl.col("generated_at").cum_max().shift(1).over(_KEY))
    passed = passed.with_columns(applied=bar.is_null() | (pl.col("generated_at") >= bar))
    last_applied = pl.when("applied").then(pl.col("member")).max().over(_KEY)
    return passed.with_columns(final=pl.col("applied") & (pl.col("member") == last_applied))


def settling() -> None:
    """Settling 100,000 judged items of 20 batches: every key once (each batch a store of its own), and every key
    twice (two runs of 10 stores). CPU of all threads, best of 3; both ways must settle the same items."""
    rng, today = random.Random(2), date.today()
    runs = [datetime.now(UTC) - timedelta(hours=hours) for hours in (2, 1)]
    for label, stores in (("every key once", range(20)), ("every key twice", [*range(10), *range(10)])):
        batches = [BatchItems(new_id(), runs[n // 10], forecast_batch(store, today, rng))
                   for n, store in enumerate(stores)]
        judged = _frame(batches).with_columns(verdict=pl.lit(None, pl.String), held=pl.lit(False),
                                              held_generated_at=pl.lit(None, pl.Datetime("us", "UTC")))
        spent, settled = {}, {}
        for name, settle in (("now", _settled), ("before", settled_by_windows)):
            spent[name] = float("inf")
            for _ in range(3):
                started = all_threads_cpu()
                result = settle(judged)
                spent[name] = min(spent[name], all_threads_cpu() - started)
            settled[name] = result.filter("final").select("member", "item_index").sort("member", "item_index")
        assert settled["now"].equals(settled["before"]), "the two ways settled different items"
        print(f"settling 100,000 items, {label}: by coded segments {spent['now'] * 1000:.0f} ms of CPU, by a window "
              f"per key {spent['before'] * 1000:.0f} ms ({spent['before'] / spent['now']:.1f}x)")


@contextmanager
def duckdb_engine() -> Iterator[sa.Engine]:
    with tempfile.TemporaryDirectory() as data_dir:
        engine = create_engine(Settings(data_dir=Path(data_dir)))
        try:
            yield engine
        finally:
            engine.dispose()


@contextmanager
def postgres_engine() -> Iterator[sa.Engine]:
    admin = sa.create_engine(POSTGRES_SERVER, isolation_level="AUTOCOMMIT")
    name = f"pia_bench_{new_id().replace('-', '')[-12:]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine = create_engine(Settings(database_url=sa.make_url(POSTGRES_SERVER).set(database=name)
                                    .render_as_string(hide_password=False)))
    try:
        yield engine
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=10,
                        help=f"batches per measurement, at most {MAX_BATCHES} (1,000,000 items)")
    batches = min(parser.parse_args().batches, MAX_BATCHES)
    storing(forecast_batch(0, date.today(), random.Random(1)))
    settling()
    for label, engine_of in (("DuckDB (temporary file)", duckdb_engine), ("PostgreSQL", postgres_engine)):
        print(f"{label}: {batches} batches of {ITEMS:,} items per measurement")
        with engine_of() as engine:
            upgrade(engine)
            staging_and_writes(engine, batches)
            worker_loop(engine, batches)
            bench(engine, batches)


if __name__ == "__main__":
    main()
