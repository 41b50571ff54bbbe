"""Catalogue reads at scale (issue 7 point 9): a tenant with 20,000 products / 100,000 SKUs in one eCom store's
assortment, read over HTTP at concurrency 8, beside `GET /healthcheck` measured in the same run.

    uv run python -m benchmarks.catalogue_read --backend duckdb
    uv run python -m benchmarks.catalogue_read --backend postgresql   # the server of PIA_TEST_POSTGRES_URL

The catalogue is written in bulk (Arrow → DuckDB, COPY → PostgreSQL, through db/bulk.py). The server is
`pia` in a process of its own (as benchmarks/request_overhead.py starts it); the client is one process of asyncio
h11 connections, each sending its next request when the last answer is complete. Product and inventory reads
pick a random product or SKU per request. Targets: a product read costs at most 3× a healthcheck (by
requests/s at the same concurrency); the whole id list answers in under 0.5 s (p50, one request at a time).
Also measured: `POST /inventory/trigger_events` (100,000 outbox rows in one transaction; issue 9: < 1 s).
"""

import os
import signal
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import httpx
import pyarrow as pa
import sqlalchemy as sa

from benchmarks.databases import run_timed_on_a_backend
from benchmarks.http_load import gets, measure
from benchmarks.request_overhead import UNREACHABLE_RATE_LIMIT, _start
from db.bulk import staged
from db.clients import update_client
from db.engine import create_engine
from db.ids import new_id, utc_now
from db.migrate import upgrade
from db.schema import (
    assortment_lines,
    assortments,
    companies,
    ecom_store_warehouses,
    ecom_stores,
    event_outbox,
    price_lists,
    prices,
    product_attribute_values,
    product_images,
    products,
    reference_entries,
    retail_stores,
    skus,
    stock_levels,
    vat_rates,
    warehouses,
)
from db.secrets import new_secret_key
from db.tenants import create_tenant
from serving.admin import issue_client
from settings import Settings

PRODUCTS, SKUS_PER_PRODUCT = 20_000, 5
CONCURRENCY = 8


@dataclass(frozen=True)
class Seeded:
    tenant_id: str
    ecom_store_id: str
    client_id: str
    secret: str
    product_ids: list[str]
    sku_ids: list[str]


def _bulk_insert(conn: sa.Connection, table: sa.Table, columns: dict[str, list]) -> None:
    rows = pa.table(columns)
    names = ", ".join(rows.column_names)
    with staged(conn, rows) as source:
        conn.execute(sa.text(f"INSERT INTO {table.name} ({names}) SELECT {names} FROM {source}"))


def seed(settings: Settings) -> Seeded:
    """A tenant, its company, an eCom store with one base assortment, two warehouses and a retail store, and the
    catalogue: every product released with 5 published SKUs, 2 images and an attribute value; base prices; stock
    at both warehouses for every SKU and at the store for every fifth."""
    engine = create_engine(settings)
    upgrade(engine)
    tenant_id = create_tenant(engine, "catalogue benchmark", is_test=True)
    now, decimal = utc_now(), pa.decimal128(18, 4)
    ids = {name: new_id() for name in ("company", "store", "assortment", "prices", "vat", "w1", "w2", "shop",
                                       "attribute")}
    product_ids = [new_id() for _ in range(PRODUCTS)]
    sku_ids = [new_id() for _ in range(PRODUCTS * SKUS_PER_PRODUCT)]
    sku_products = [product_ids[i // SKUS_PER_PRODUCT] for i in range(len(sku_ids))]
    with engine.begin() as conn:
        conn.execute(companies.insert().values(id=ids["company"], tenant_id=tenant_id, number="1", name="Benchmark",
                                               currency_iso_code="NOK", base_price_list_id=ids["prices"]))
        conn.execute(price_lists.insert().values(id=ids["prices"], tenant_id=tenant_id, code="BASE", name="Base"))
        conn.execute(vat_rates.insert().values(id=ids["vat"], tenant_id=tenant_id, code="HIGH", rate=Decimal(25)))
        conn.execute(assortments.insert().values(id=ids["assortment"], tenant_id=tenant_id, code="BASE",
                                                 kind="BASE", name="Base"))
        conn.execute(ecom_stores.insert().values(id=ids["store"], tenant_id=tenant_id, company_id=ids["company"],
                                                 number="1", name="Web", released=True,
                                                 base_assortment_id=ids["assortment"]))
        conn.execute(reference_entries.insert().values(id=ids["attribute"], tenant_id=tenant_id,
                                                       list_name="dynamic_attributes", code="MATERIAL",
                                                       name="Material", value_type="TEXT", modified_time=now))
        for number, key in (("W1", "w1"), ("W2", "w2")):
            conn.execute(warehouses.insert().values(id=ids[key], tenant_id=tenant_id, company_id=ids["company"],
                                                    number=number, name=f"Warehouse {number}"))
        conn.execute(ecom_store_warehouses.insert(), [
            {"tenant_id": tenant_id, "ecom_store_id": ids["store"], "warehouse_id": ids[key], "priority": priority}
            for priority, key in enumerate(("w1", "w2"))])
        conn.execute(retail_stores.insert().values(id=ids["shop"], tenant_id=tenant_id, company_id=ids["company"],
                                                   number="1001", name="Shop", released=True))

        def tenant_column(count: int) -> list[str]:
            return [tenant_id] * count

        _bulk_insert(conn, products, {
            "id": product_ids, "tenant_id": tenant_column(PRODUCTS),
            "number": [f"P{i:06}" for i in range(PRODUCTS)], "name": [f"Product {i}" for i in range(PRODUCTS)],
            "description": ["A product of the benchmark catalogue."] * PRODUCTS, "released": [True] * PRODUCTS,
            "modified_time": pa.array([now] * PRODUCTS, pa.timestamp("us", "UTC"))})
        count = len(sku_ids)
        _bulk_insert(conn, skus, {
            "id": sku_ids, "tenant_id": tenant_column(count), "number": [f"S{i:07}" for i in range(count)],
            "name": [f"SKU {i}" for i in range(count)], "product_id": sku_products,
            "gtin": [f"{i:014}" for i in range(count)], "vat_rate_id": [ids["vat"]] * count,
            "published": [True] * count})
        _bulk_insert(conn, assortment_lines, {
            "tenant_id": tenant_column(count), "assortment_id": [ids["assortment"]] * count, "sku_id": sku_ids,
            "replenishment_type": ["AUTO"] * count,
            "modified_time": pa.array([now] * count, pa.timestamp("us", "UTC"))})
        _bulk_insert(conn, prices, {
            "tenant_id": tenant_column(count), "price_list_id": [ids["prices"]] * count, "sku_id": sku_ids,
            "price": pa.array([Decimal(100 + i % 900) for i in range(count)], decimal)})
        stocked = [(location, sku) for location in (ids["w1"], ids["w2"]) for sku in sku_ids] \
            + [(ids["shop"], sku) for sku in sku_ids[::5]]
        _bulk_insert(conn, stock_levels, {
            "tenant_id": tenant_column(len(stocked)), "location_id": [location for location, _ in stocked],
            "sku_id": [sku for _, sku in stocked],
            "on_hand": pa.array([Decimal(i % 40) for i in range(len(stocked))], decimal),
            "reserved": pa.array([Decimal(i % 3) for i in range(len(stocked))], decimal),
            "modified_time": pa.array([now] * len(stocked), pa.timestamp("us", "UTC"))})
        _bulk_insert(conn, product_images, {
            "tenant_id": tenant_column(2 * PRODUCTS), "product_id": product_ids * 2,
            "sort_order": [1] * PRODUCTS + [2] * PRODUCTS,
            "url": [f"https://img.example/{i}.jpg" for i in range(2 * PRODUCTS)],
            "alt_text": pa.array([None] * (2 * PRODUCTS), pa.string())})
        _bulk_insert(conn, product_attribute_values, {
            "tenant_id": tenant_column(PRODUCTS), "product_id": product_ids,
            "dynamic_attribute_id": [ids["attribute"]] * PRODUCTS, "value": ["Wool"] * PRODUCTS})
    if engine.dialect.name == "postgresql":  # fresh statistics, as autovacuum would gather soon after a load
        with engine.begin() as conn:
            conn.execute(sa.text("ANALYZE"))
    client_id, secret = issue_client(engine, tenant_id, "benchmark", "ecom", ids["store"], ())
    update_client(engine, tenant_id, client_id, rate_limit_per_minute=UNREACHABLE_RATE_LIMIT)
    engine.dispose()  # the DuckDB file belongs to the server process from here on
    return Seeded(tenant_id, ids["store"], client_id, secret, product_ids, sku_ids)


def run(backend: str, database_url: str, data_dir: Path, seconds: float) -> None:
    secret_key = os.environ.get("PIA_SECRET_KEY") or new_secret_key()  # PostgreSQL requires one
    settings = Settings(data_dir=data_dir, database_url=database_url, secret_key=secret_key)
    started = time.perf_counter()
    seeded = seed(settings)
    print(f"[{backend}] seeded {PRODUCTS:,} products / {len(seeded.sku_ids):,} SKUs in "
          f"{time.perf_counter() - started:.1f} s", flush=True)
    env = {**os.environ, "PIA_DATA_DIR": str(data_dir), "PIA_DATABASE_URL": database_url,
           "PIA_SECRET_KEY": secret_key}
    port = 19500 + os.getpid() % 400
    server = _start("pia", port, env)
    try:
        base = f"http://127.0.0.1:{port}"
        token = httpx.post(f"{base}/oauth2/token", auth=(seeded.client_id, seeded.secret), data={
            "grant_type": "client_credentials", "tenant_id": seeded.tenant_id}).json()["access_token"]
        prefix = f"/v1/tenants/{seeded.tenant_id}/ecom_stores/{seeded.ecom_store_id}"
        whole = httpx.get(f"{base}{prefix}/products", headers={"Authorization": f"Bearer {token}"}, timeout=60)
        assert len(whole.json()["items"]) == PRODUCTS, whole.text[:200]
        targets = {
            "GET /healthcheck (baseline)": ["/healthcheck"],
            "GET /products/{id}": [f"{prefix}/products/{product_id}" for product_id in seeded.product_ids],
            "GET /skus/{id}/inventory": [f"{prefix}/skus/{sku_id}/inventory" for sku_id in seeded.sku_ids],
            "GET /products (all 20,000 ids)": [f"{prefix}/products"],
        }
        for paths in targets.values():  # warm-up: connections, caches, first-call imports
            measure(port, gets(paths), [token], 1.0, CONCURRENCY)
        figures = {name: measure(port, gets(paths), [token], seconds, CONCURRENCY) for name, paths in targets.items()}
        alone = measure(port, gets(targets["GET /products (all 20,000 ids)"]), [token], seconds, 1)
        trigger_started = time.perf_counter()
        triggered = httpx.post(f"{base}{prefix}/inventory/trigger_events",
                               headers={"Authorization": f"Bearer {token}"}, timeout=120)
        trigger_seconds = time.perf_counter() - trigger_started
        assert triggered.json()["eventsTriggered"] == len(seeded.sku_ids), triggered.text
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    _check_outbox(settings, seeded)
    baseline = figures["GET /healthcheck (baseline)"]
    print(f"[{backend}] concurrency {CONCURRENCY}, {seconds:g} s per target:")
    for name, value in figures.items():
        print(f"[{backend}]   {name:32} {value.rate:8,.0f} requests/s  p50 {value.p50_ms:7.1f} ms  "
              f"p99 {value.p99_ms:7.1f} ms  cost vs healthcheck {baseline.rate / value.rate:5.2f}×")
    product = figures["GET /products/{id}"]
    print(f"[{backend}] product read costs {baseline.rate / product.rate:.2f}× a healthcheck (target ≤ 3); "
          f"p50 {product.p50_ms / baseline.p50_ms:.2f}× its p50")
    print(f"[{backend}] whole id list, one request at a time: p50 {alone.p50_ms:.0f} ms, p99 {alone.p99_ms:.0f} ms "
          f"(target < 500 ms)")
    print(f"[{backend}] POST /inventory/trigger_events: {len(seeded.sku_ids):,} outbox rows in "
          f"{trigger_seconds:.2f} s over HTTP (target < 1 s)")


def _check_outbox(settings: Settings, seeded: Seeded) -> None:
    engine = create_engine(settings)
    with engine.connect() as conn:
        written = conn.scalar(sa.select(sa.func.count()).select_from(event_outbox)
                              .where(event_outbox.c.tenant_id == seeded.tenant_id))
    engine.dispose()
    assert written == len(seeded.sku_ids), written


if __name__ == "__main__":
    run_timed_on_a_backend(__doc__, run, default_seconds=5.0)
