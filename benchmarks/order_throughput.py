"""Order creation over HTTP (issue 8 point 9): `POST /orders` of 5 lines at concurrency 8, beside
`GET /healthcheck` measured in the same run.

    uv run python -m benchmarks.order_throughput --backend duckdb
    uv run python -m benchmarks.order_throughput --backend postgresql   # the server of PIA_TEST_POSTGRES_URL

The tenant is the demo's (its web shop: 300 products, prices, stock in two warehouses). Each connection is its own
API client of the eCom store, with its rate limit lifted, so neither one client's limit nor the clients' sum bounds
the figure. Every order is new (a fresh externalOrderId and number) and must answer 202. The server is `pia` in a
process of its own; its order processor opens the orders (RECEIVED → OPEN, stock reserved) while they arrive, and
the run ends by timing how long the last of them waits to be opened (polling the customer's order history over HTTP,
which works on both backends). Beside requests/s, it prints the CPU each order cost the server process (and the
PostgreSQL backends) from the first order to the last one opened, creating and opening included: a figure other work
on the machine disturbs less than requests/s. Targets on this 2-core machine: 150 orders/s on PostgreSQL, 100 on
DuckDB. The floor, measured after pia in the same run: the same orders from the same client to a bare Quart route
(Hypercorn, a process of its own) that parses each order and answers 202 with it, storing nothing: pia's rate is
printed as a share of it, and its CPU per order as a multiple of the floor's.

On PostgreSQL the seeded tables are analyzed before the load, as those of a store in service are: without
statistics (autovacuum gives them only after its naptime, mid-run) the planner resolves an order's SKUs by scanning
the products, at three times the cost.
"""

import contextlib
import itertools
import os
import random
import signal
import time
from collections import Counter
from pathlib import Path

import httpx
import orjson
import sqlalchemy as sa

from benchmarks.databases import run_timed_on_a_backend
from benchmarks.http_load import Figures, NextRequest, gets, measure
from benchmarks.request_overhead import UNREACHABLE_RATE_LIMIT, _cpu_seconds, _start
from db.clients import update_client
from db.engine import create_engine, is_duckdb
from db.migrate import upgrade
from db.schema import ecom_stores
from db.secrets import new_secret_key
from serving.admin import issue_client
from serving.demo import seed_demo_tenant
from settings import Settings

CONCURRENCY, LINES = 8, 5


def _seed(settings: Settings) -> tuple[dict, str, str, list[tuple[str, str]]]:
    """The demo tenant, the eCom store with the web shop, its default customer (that of every order here), and one
    rate-unlimited client per connection."""
    engine = create_engine(settings)
    upgrade(engine)
    world = seed_demo_tenant(engine, "order benchmark", is_test=False)
    store_id = next(client["resource"] for client in world["clients"] if client["scope"] == "ecom")
    clients = []
    for n in range(CONCURRENCY):
        client_id, secret = issue_client(engine, world["id"], f"web shop {n}", "ecom", store_id, ())
        update_client(engine, world["id"], client_id, rate_limit_per_minute=UNREACHABLE_RATE_LIMIT)
        clients.append((client_id, secret))
    with engine.begin() as conn:
        customer_id = conn.scalar(sa.select(ecom_stores.c.default_customer_id).where(ecom_stores.c.id == store_id))
        if not is_duckdb(engine):
            conn.execute(sa.text("ANALYZE"))
    engine.dispose()  # the DuckDB file belongs to the server process from here on
    return world, store_id, customer_id, clients


def _sellable_skus(base: str, prefix: str, token: str) -> list[dict]:
    """Priced SKUs of the first 60 published products, as order lines want them."""
    headers = {"Authorization": f"Bearer {token}"}
    ids = httpx.get(f"{base}{prefix}/products", headers=headers).json()["items"][:60]
    found = []
    for product_id in ids:
        for sku in httpx.get(f"{base}{prefix}/products/{product_id}", headers=headers).json()["skus"]:
            if sku["price"] is not None:
                found.append({"skuNumber": sku["number"], "netUnitPrice": sku["price"], "vatRate": sku["vatRate"]})
    return found


def _orders(prefix: str, skus: list[dict]):
    """A new order of LINES random SKUs per request."""
    address = {"name": "Kari Nordmann", "street": "Storgata 1", "postCode": "0155", "city": "Oslo",
               "countryIsoCode": "NO"}

    numbers = itertools.count(1)  # the connections' generators repeat between rounds; the keys must not

    def next_order(rng: random.Random) -> tuple[str, str, bytes]:
        key = str(next(numbers))
        lines = [{**sku, "quantity": rng.randint(1, 3)} for sku in rng.sample(skus, LINES)]
        return "POST", f"{prefix}/orders", orjson.dumps({
            "externalOrderId": f"bench-{key}", "externalOrderNumber": f"B-{key}", "deliveryAddress": address,
            "lineItems": lines, "freight": {"freightAmount": "49", "shippingMethodName": "Posten"}})

    return next_order


def _statuses(base: str, prefix: str, token: str, customer_id: str) -> Counter:
    """How many of the customer's orders are in each status, by its order history."""
    history = httpx.get(f"{base}{prefix}/customers/{customer_id}/orders", headers={"Authorization": f"Bearer {token}"},
                        timeout=60).json()["items"]
    return Counter(order["status"] for order in history)


def _postgres_cpu_seconds(database_url: str) -> dict[int, float]:
    """CPU seconds so far of each PostgreSQL backend serving the database (they run on this machine)."""
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as conn:
            pids = list(conn.scalars(sa.text("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                                             "AND pid <> pg_backend_pid()")))
    finally:
        engine.dispose()
    seconds = {}
    for pid in pids:
        with contextlib.suppress(FileNotFoundError):  # a backend that ended meanwhile
            seconds[pid] = _cpu_seconds(pid)
    return seconds


def run(backend: str, database_url: str, data_dir: Path, seconds: float) -> None:
    secret_key = os.environ.get("PIA_SECRET_KEY") or new_secret_key()  # PostgreSQL requires one
    settings = Settings(data_dir=data_dir, database_url=database_url, secret_key=secret_key)
    world, store_id, customer_id, clients = _seed(settings)
    env = {**os.environ, "PIA_DATA_DIR": str(data_dir), "PIA_DATABASE_URL": database_url,
           "PIA_SECRET_KEY": secret_key}
    port = 19900 + os.getpid() % 90
    server = _start("pia", port, env)
    base, prefix = f"http://127.0.0.1:{port}", f"/v1/tenants/{world['id']}/ecom_stores/{store_id}"
    try:
        tokens = [httpx.post(f"{base}/oauth2/token", auth=client, data={
            "grant_type": "client_credentials", "tenant_id": world["id"]}).json()["access_token"]
            for client in clients]
        next_order = _orders(prefix, _sellable_skus(base, prefix, tokens[0]))
        measure(port, gets(["/healthcheck"]), tokens, 1.0, CONCURRENCY)  # warm-up
        measure(port, next_order, tokens, 1.0, CONCURRENCY, expected_status=202)
        baseline = measure(port, gets(["/healthcheck"]), tokens, seconds, CONCURRENCY)
        while _statuses(base, prefix, tokens[0], customer_id)["RECEIVED"]:  # the warm-up's orders
            time.sleep(0.1)
        before = _statuses(base, prefix, tokens[0], customer_id).total()
        server_cpu = _cpu_seconds(server.pid)
        postgres_cpu = _postgres_cpu_seconds(database_url) if database_url else {}
        created = measure(port, next_order, tokens, seconds, CONCURRENCY, expected_status=202)
        load_ended = time.perf_counter()
        left = waiting = _statuses(base, prefix, tokens[0], customer_id)["RECEIVED"]
        while waiting:
            time.sleep(0.1)
            waiting = _statuses(base, prefix, tokens[0], customer_id)["RECEIVED"]
        drained = time.perf_counter() - load_ended
        server_cpu = _cpu_seconds(server.pid) - server_cpu
        if database_url:
            postgres_cpu = sum(spent - postgres_cpu.get(pid, 0.0)
                               for pid, spent in _postgres_cpu_seconds(database_url).items())
        total = _statuses(base, prefix, tokens[0], customer_id).total() - before
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    floor, floor_cpu = _floor(port, next_order, tokens, seconds, env)
    print(f"[{backend}] concurrency {CONCURRENCY}, {seconds:g} s per target, {LINES}-line orders, "
          f"{len(clients)} clients:")
    for name, value in (("GET /healthcheck (baseline)", baseline), ("POST /orders", created)):
        print(f"[{backend}]   {name:28} {value.rate:8,.0f} requests/s  p50 {value.p50_ms:7.1f} ms  "
              f"p99 {value.p99_ms:7.1f} ms  cost vs healthcheck {baseline.rate / value.rate:5.2f}×")
    target = 150 if backend == "postgresql" else 100
    print(f"[{backend}] {created.rate:.0f} orders/s (target ≥ {target}); {total:,} orders, {left:,} still RECEIVED "
          f"when the load ended, all OPEN {drained:.1f} s after it")
    postgres = f" + PostgreSQL {postgres_cpu / total * 1000:.1f} ms" if database_url else ""
    print(f"[{backend}] CPU per order, created and opened: server {server_cpu / total * 1000:.1f} ms{postgres}")
    print(f"[{backend}] floor, a bare Quart route parsing the order and answering 202 with it (storing nothing): "
          f"{floor.rate:,.0f} requests/s, {floor_cpu * 1000:.2f} ms of server CPU per request")
    print(f"[{backend}] goal ≥ {target} orders/s: {'met' if created.rate >= target else 'missed'}; pia "
          f"{created.rate:,.0f}/s = {created.rate / floor.rate:.1%} of the floor's {floor.rate:,.0f}/s; server CPU per "
          f"order {server_cpu / total / floor_cpu:.1f}× the floor's")


def _floor(port: int, next_order: NextRequest, tokens: list[str], seconds: float,
           env: dict[str, str]) -> tuple[Figures, float]:
    """The same orders from the same client, in the same run, to the bare route of benchmarks.request_overhead
    (Hypercorn, one process): requests/s, and the server's CPU seconds per request."""
    bare = _start("bare", port, env)
    try:
        measure(port, next_order, tokens, 1.0, CONCURRENCY, expected_status=202)  # warm-up
        cpu = _cpu_seconds(bare.pid)
        figures = measure(port, next_order, tokens, seconds, CONCURRENCY, expected_status=202)
        cpu = _cpu_seconds(bare.pid) - cpu
    finally:
        bare.send_signal(signal.SIGTERM)
        bare.wait(timeout=60)
    return figures, cpu / (figures.rate * seconds)


if __name__ == "__main__":
    run_timed_on_a_backend(__doc__, run, default_seconds=10.0)
