"""Replenishment parameter pages on DuckDB: the store window resolved in Polars (db.parameter_window, what
`GET …/replenishment_parameters` reads without modifiedSince) against the one statement of db.held (what PostgreSQL
and modifiedSince read), the baseline, on the same file in the same run.

    uv run python -m benchmarks.parameter_pages [--stores 200] [--skus 2000]

A tenant of `--stores` retail stores shares one base assortment of `--skus` SKUs; each store has one of five local
assortments (a tenth of the SKUs, their own values) and store-specific lines for a twentieth. Pages are read from
cursors spread over the stores, for each limit; the figure is the median CPU per page (the process's, all DuckDB's
threads included) over the rounds, after a warm-up round, both ways taking turns.
"""

import argparse
import os
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import sqlalchemy as sa

from benchmarks.measure import load
from db.bulk import driver_connection
from db.engine import create_engine
from db.held import ParameterKey
from db.held_export import parameter_page_in_one_statement, replenishment_parameter_arrow_page
from db.ids import new_id
from db.migrate import upgrade
from db.tenants import create_tenant
from settings import Settings

LIMITS = (1, 100, 1000)
CURSORS = 20
MODIFIED = datetime(2026, 11, 20, 3, 30, tzinfo=UTC)


def seed(engine: sa.Engine, stores: int, sku_count: int) -> str:
    tenant_id = create_tenant(engine, f"parameter pages {new_id()}", is_test=True)
    sku_ids = [new_id() for _ in range(sku_count)]
    base, locals_ = new_id(), [new_id() for _ in range(5)]
    store_ids = [new_id() for _ in range(stores)]

    def lines(owner_column: str, owners: list[str], skus: list[list[str]], **extra: list[object]) -> pa.Table:
        rows = [(owner, sku) for owner, owned in zip(owners, skus, strict=True) for sku in owned]
        return pa.table({"tenant_id": [tenant_id] * len(rows), owner_column: [owner for owner, _ in rows],
                         "sku_id": [sku for _, sku in rows], "replenishment_type": ["AUTO"] * len(rows),
                         "reorder_point": [random.randint(1, 50) for _ in rows],
                         "maximum_inventory": [random.randint(50, 200) for _ in rows],
                         "modified_time": [MODIFIED] * len(rows),
                         **{name: values * len(rows) for name, values in extra.items()}})

    tables = {
        "skus": pa.table({"id": sku_ids, "tenant_id": [tenant_id] * sku_count,
                          "number": [f"{100000 + i}" for i in range(sku_count)],
                          "name": ["sku"] * sku_count, "published": [False] * sku_count}),
        "retail_stores": pa.table({"id": store_ids, "tenant_id": [tenant_id] * stores,
                                   "company_id": [new_id()] * stores, "number": [f"{1000 + i}" for i in range(stores)],
                                   "name": ["store"] * stores, "released": [True] * stores,
                                   "base_assortment_id": [base] * stores,
                                   "local_assortment_id": [locals_[i % 5] for i in range(stores)]}),
        "assortment_lines": lines("assortment_id", [base, *locals_],
                                  [sku_ids, *(random.sample(sku_ids, sku_count // 10) for _ in locals_)]),
        "store_assortment_lines": lines("retail_store_id", store_ids,
                                        [random.sample(sku_ids, sku_count // 20) for _ in store_ids], locked=[False]),
    }
    with engine.begin() as conn:
        raw = driver_connection(conn)
        for name, table in tables.items():
            raw.register("incoming", table)
            raw.execute(f"INSERT INTO {name} BY NAME SELECT * FROM incoming")
            raw.unregister("incoming")
    return tenant_id


def one_statement(engine: sa.Engine, tenant_id: str, after: ParameterKey | None, limit: int) -> object:
    return parameter_page_in_one_statement(engine, tenant_id, retail_store_number=None, modified_since=None,
                                           after=after, limit=limit)


def window(engine: sa.Engine, tenant_id: str, after: ParameterKey | None, limit: int) -> object:
    return replenishment_parameter_arrow_page(engine, tenant_id, retail_store_number=None, modified_since=None,
                                              after=after, limit=limit)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", type=int, default=200)
    parser.add_argument("--skus", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    arguments = parser.parse_args()
    random.seed(7)
    with tempfile.TemporaryDirectory() as data_dir:
        engine = create_engine(Settings(data_dir=Path(data_dir)))
        upgrade(engine)
        tenant_id = seed(engine, arguments.stores, arguments.skus)
        cursors = [None] + [ParameterKey(f"{1000 + random.randrange(arguments.stores)}",
                                         f"{100000 + random.randrange(arguments.skus)}") for _ in range(CURSORS - 1)]
        print(f"{arguments.stores} stores, {arguments.skus} SKUs in the base assortment; load {load():.2f}")
        for limit in LIMITS:
            cpu: dict[str, list[float]] = {"one statement": [], "window": []}
            for round_number in range(arguments.rounds + 1):
                for name, read in (("one statement", one_statement), ("window", window)):
                    started = time.process_time()
                    pages = [read(engine, tenant_id, after, limit) for after in cursors]
                    if round_number:  # the first round warms up
                        cpu[name].append((time.process_time() - started) / len(pages))
            assert window(engine, tenant_id, cursors[1], limit) == one_statement(engine, tenant_id, cursors[1], limit)
            base, ours = (statistics.median(cpu[name]) * 1e3 for name in ("one statement", "window"))
            print(f"limit {limit:>5}: one statement {base:6.1f} ms CPU a page, window {ours:6.1f} ms "
                  f"({base / ours:.1f}× less)")
        print(f"load {load():.2f} at the end; {os.cpu_count()} cores")
        engine.dispose()


if __name__ == "__main__":
    main()
