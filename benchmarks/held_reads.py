"""Reading 1,000,000 held forecasts over HTTP (issue 10 point 3): JSON pages vs Arrow pages vs the Arrow export,
in the same run against the same server.

    uv run python -m benchmarks.held_reads --backend postgresql   # the server of PIA_TEST_POSTGRES_URL
    uv run python -m benchmarks.held_reads --backend duckdb

The forecasts (200 stores × 5,000 SKUs, 28 days each) are written in bulk (Arrow → DuckDB, COPY → PostgreSQL,
through db/bulk.py), not through the API. The server is `pia` in a process of its own (as
benchmarks/request_overhead.py starts it); one client reads everything, page after page with `limit=5000`,
decoding each answer as a client would (JSON into dicts, Arrow into a table), or the export batch by batch as it
streams in.
The client is the standard library's `http.client` on one kept-alive connection: it reads a body of known length
in one call, where httpx (pia-client's transport) parses it 64 KB at a time through h11 and spent 1.2–1.7 s of CPU
per 1M Arrow rows (2.5 MB a page) against 0.2 s, on the same two cores as the server and the database. Arrow pages
are also read through httpx once more, as pia-client would, and printed, not judged.
Each reader reads everything once to warm up, then `--rounds` times (3); printed for the median round: rows/s, CPU
seconds of the server, of PostgreSQL and of the client per million rows, and the ratio to JSON pages
(target of issue 10: Arrow at least 10× faster than JSON). The floor, measured in the same run once the server has
stopped: the same rows fetched as one Arrow table straight from the database (PostgreSQL: ADBC's
`fetch_arrow_table`; DuckDB: its own Arrow result), best of 3; Arrow pages are reported as a share of it (goal of
issue 19: at least 70 %). Beside it, the same pages read and rendered in this process, without HTTP: what the read
path alone reaches.
"""

import argparse
import http.client
import os
import signal
import time
from collections.abc import Callable
from contextlib import closing
from datetime import timedelta
from functools import partial
from pathlib import Path
from urllib.parse import urlencode

import httpx
import orjson
import pyarrow as pa
import sqlalchemy as sa

from benchmarks.databases import backend_database
from benchmarks.measure import database_backends_cpu, database_cpu_since, load, process_cpu
from benchmarks.request_overhead import UNREACHABLE_RATE_LIMIT, _start
from contracts.held_datasets import ARROW_STREAM, NEXT_CURSOR_HEADER
from db.adbc import adbc_connection
from db.bulk import driver_connection, ingested
from db.clients import DEMAND_PLANNING_PERMISSION, update_client
from db.engine import create_engine
from db.held_export import sales_forecast_arrow_page
from db.held_quantities import stored_value
from db.ids import new_id, utc_now
from db.migrate import upgrade
from db.schema import sales_forecasts
from db.secrets import new_secret_key
from db.tenants import create_tenant
from serving.admin import issue_client
from serving.rendering.held_pages import page_arrow
from settings import Settings

STORES, SKUS_PER_STORE, DAYS = 200, 5_000, 28
PAGE = 5_000
PAGES_GOAL = 0.70  # Arrow pages' rows/s as a share of the floor's
JSON_PAGES, ARROW_PAGES = f"JSON pages (limit {PAGE})", f"Arrow pages (limit {PAGE})"


def seed(settings: Settings, stores: int) -> tuple[str, str, str]:
    """A tenant holding stores × 5,000 forecasts, and a demand planning client with the permission."""
    engine = create_engine(settings)
    upgrade(engine)
    tenant_id = create_tenant(engine, "held reads benchmark", is_test=True)
    count, now = stores * SKUS_PER_STORE, utc_now()
    quantities = [stored_value(f"{(row + day) % 97}.25" for day in range(DAYS)) for row in range(997)]
    start = now.date() - timedelta(days=1)
    rows = pa.table({
        "tenant_id": [tenant_id] * count, "is_ecom": [False] * count,
        "store_number": [f"{1000 + row // SKUS_PER_STORE}" for row in range(count)],
        "sku_number": [f"{100000 + row % SKUS_PER_STORE}" for row in range(count)],
        "horizon_start_date": pa.array([start] * count, pa.date32()),
        "horizon_end_date": pa.array([start + timedelta(days=DAYS - 1)] * count, pa.date32()),
        "quantities": pa.array([quantities[row % len(quantities)] for row in range(count)], pa.binary()),
        "generated_at": pa.array([now] * count, pa.timestamp("us", "UTC")),
        "modified_time": pa.array([now] * count, pa.timestamp("us", "UTC")),
        "batch_id": [new_id()] * count})
    names = ", ".join(rows.column_names)
    with engine.begin() as conn, ingested(conn, rows) as source:
        conn.execute(sa.text(f"INSERT INTO {sales_forecasts.name} ({names}) SELECT {names} FROM {source}"))
    if engine.dialect.name == "postgresql":  # fresh statistics, as autovacuum would gather soon after a load
        with engine.begin() as conn:
            conn.execute(sa.text("ANALYZE"))
    client_id, secret = issue_client(engine, tenant_id, "benchmark", "demand_planning", None,
                                     (DEMAND_PLANNING_PERMISSION,))
    update_client(engine, tenant_id, client_id, rate_limit_per_minute=UNREACHABLE_RATE_LIMIT)
    engine.dispose()  # the DuckDB file belongs to the server process from here on
    return tenant_id, client_id, secret


class LeanClient:
    """GET over one kept-alive `http.client` connection, each body read whole: what a bulk reader spends on HTTP,
    and little else, so that the machine's two cores go to the server and the database being measured."""

    def __init__(self, port: int, token: str) -> None:
        self._connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        self._authorization = f"Bearer {token}"

    def get(self, path: str, params: dict[str, str | int] | None = None,
            accept: str = "application/json") -> tuple[bytes, http.client.HTTPResponse]:
        response = self.open(path, params, accept)
        return response.read(), response

    def open(self, path: str, params: dict[str, str | int] | None = None,
             accept: str = "application/json") -> http.client.HTTPResponse:
        """The answer, its body not yet read (to be read to its end before the next request)."""
        target = f"{path}?{urlencode(params)}" if params else path
        self._connection.request("GET", target, headers={"Authorization": self._authorization, "Accept": accept})
        response = self._connection.getresponse()
        if response.status != 200:
            raise RuntimeError(f"GET {target}: {response.status} {response.read()[:300]!r}")
        return response

    def close(self) -> None:
        self._connection.close()


def json_pages(http: LeanClient, url: str) -> int:
    rows, cursor = 0, None
    while True:
        body = orjson.loads(http.get(url, {"limit": PAGE, **({"cursor": cursor} if cursor else {})})[0])
        rows += len(body["items"])
        if (cursor := body["nextCursor"]) is None:
            return rows


def arrow_pages(http: LeanClient, url: str) -> int:
    rows, cursor = 0, None
    while True:
        body, response = http.get(url, {"limit": PAGE, **({"cursor": cursor} if cursor else {})}, ARROW_STREAM)
        rows += pa.ipc.open_stream(body).read_all().num_rows
        if (cursor := response.getheader(NEXT_CURSOR_HEADER)) is None:
            return rows


def arrow_export(http: LeanClient, url: str) -> int:
    """The export decoded as it streams in, batch by batch (read whole first, its 500 MB body cost the client
    0.5 s of CPU per 1M rows against 0.1 s for pages, most of it the memory of one large bytes object)."""
    response = http.open(f"{url}/export", accept=ARROW_STREAM)
    rows = sum(batch.num_rows for batch in pa.ipc.open_stream(response))
    if response.read():  # the chunked body's last chunk, after the stream's end: the connection is used again
        raise RuntimeError("bytes after the end of the export's Arrow stream")
    return rows


def arrow_pages_through_httpx(http: httpx.Client, url: str) -> int:
    """Arrow pages as pia-client reads them (httpx), for comparison."""
    rows, cursor = 0, None
    while True:
        response = http.get(url, params={"limit": PAGE, **({"cursor": cursor} if cursor else {})},
                            headers={"Accept": ARROW_STREAM})
        response.raise_for_status()
        rows += pa.ipc.open_stream(response.content).read_all().num_rows
        if (cursor := response.headers.get(NEXT_CURSOR_HEADER)) is None:
            return rows


def floor_rows_per_second(settings: Settings, tenant_id: str) -> float:
    """The same rows, as the Arrow pages read them (every column, in key order), fetched as one Arrow table
    straight from the database: best of 3."""
    engine = create_engine(settings)
    query = (f"SELECT * FROM {sales_forecasts.name} WHERE tenant_id = '{tenant_id}' "
             "ORDER BY is_ecom, store_number, sku_number")
    best = float("inf")
    try:
        for _ in range(3):
            started = time.perf_counter()
            if engine.dialect.name == "postgresql":
                with adbc_connection(engine) as adbc, adbc.cursor() as cursor:
                    cursor.execute(query)
                    rows = cursor.fetch_arrow_table().num_rows
            else:
                with engine.connect() as conn:
                    rows = driver_connection(conn).sql(query).to_arrow_table().num_rows
            best = min(best, time.perf_counter() - started)
    finally:
        engine.dispose()
    return rows / best


def arrow_pages_in_process(settings: Settings, tenant_id: str) -> tuple[float, float]:
    """Arrow pages as the server reads and renders them (db.held_export, the IPC body), here without HTTP: rows/s
    and CPU seconds of this process per 1M rows, the median of 3 after a warm-up. What HTTP adds is the rest."""
    engine = create_engine(settings)
    today = utc_now().date()

    def every_page() -> int:
        rows, after = 0, None
        while True:
            page = sales_forecast_arrow_page(engine, tenant_id, retail_store_number=None, ecom_store_number=None,
                                             after=after, limit=PAGE, today=today)
            rows += pa.ipc.open_stream(page_arrow(page.table)).read_all().num_rows
            if (after := page.next) is None:
                return rows

    measured = []
    try:
        every_page()
        for _ in range(3):
            wall, cpu = time.perf_counter(), time.process_time()
            rows = every_page()
            measured.append((rows / (time.perf_counter() - wall), (time.process_time() - cpu) * 1e6 / rows))
    finally:
        engine.dispose()
    return sorted(measured)[1]


def run(backend: str, database_url: str, data_dir: Path, stores: int, json: bool = True, rounds: int = 3) -> None:
    secret_key = os.environ.get("PIA_SECRET_KEY") or new_secret_key()  # PostgreSQL requires one
    settings = Settings(data_dir=data_dir, database_url=database_url, secret_key=secret_key)
    started = time.perf_counter()
    tenant_id, client_id, secret = seed(settings, stores)
    expected = stores * SKUS_PER_STORE
    print(f"[{backend}] seeded {expected:,} held forecasts ({DAYS} days each) in "
          f"{time.perf_counter() - started:.1f} s; load average {load():.1f} on {os.cpu_count()} CPUs",
          flush=True)
    env = {**os.environ, "PIA_DATA_DIR": str(data_dir), "PIA_DATABASE_URL": database_url,
           "PIA_SECRET_KEY": secret_key}
    port = 19500 + os.getpid() % 400
    server = _start("pia", port, env)
    readers: dict[str, Callable[[LeanClient, str], int]] = {
        JSON_PAGES: json_pages, ARROW_PAGES: arrow_pages, "Arrow export (one stream)": arrow_export}
    if not json:
        del readers[JSON_PAGES]
    figures: dict[str, tuple[float, float, float, float]] = {}
    engine = create_engine(settings)  # to find the database's backends (PostgreSQL), whose CPU is counted
    try:
        base = f"http://127.0.0.1:{port}"
        token = httpx.post(f"{base}/oauth2/token", auth=(client_id, secret), data={
            "grant_type": "client_credentials", "tenant_id": tenant_id}).json()["access_token"]
        url = f"/v1/tenants/{tenant_id}/demand_planning/sales_forecasts"
        lean = LeanClient(port, token)
        with closing(lean), httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"},
                                         timeout=600) as through_httpx:
            reads = [(name, partial(read, lean, url)) for name, read in readers.items()]
            reads.append((f"{ARROW_PAGES}, httpx", partial(arrow_pages_through_httpx, through_httpx, url)))
            for name, read in reads:
                read()  # a first round warms the server up (its pools, Polars' and the allocator's memory)
                measured = []
                for _ in range(rounds):
                    database_cpu = database_backends_cpu(engine)
                    server_cpu, client_cpu, wall = process_cpu(server.pid), time.process_time(), time.perf_counter()
                    rows = read()
                    measured.append((time.perf_counter() - wall, process_cpu(server.pid) - server_cpu,
                                     database_cpu_since(engine, database_cpu), time.process_time() - client_cpu))
                    assert rows == expected, (name, rows)
                figures[name] = sorted(measured)[len(measured) // 2]  # the median round by wall time
                wall, server_seconds, database_seconds, client_seconds = figures[name]
                # DuckDB runs inside the server: its CPU is the server's.
                database = f"PostgreSQL {database_seconds * 1e6 / rows:4.1f} s, " if backend == "postgresql" else ""
                print(f"[{backend}]   {name:34} {rows / wall:10,.0f} rows/s  {wall:6.1f} s  CPU per 1M rows: "
                      f"server {server_seconds * 1e6 / rows:4.1f} s, {database}"
                      f"client {client_seconds * 1e6 / rows:4.1f} s (median of {rounds}; all: "
                      f"{', '.join(f'{rows / wall:,.0f}' for wall, *_ in measured)} rows/s)", flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
        engine.dispose()
    baseline = figures.get(JSON_PAGES)
    for name in [name for name in readers if name != JSON_PAGES] if baseline else []:
        wall, server_cpu, *_ = figures[name]
        print(f"[{backend}] {name}: {baseline[0] / wall:.1f}× faster than JSON pages by wall time "
              f"({baseline[1] / server_cpu:.1f}× less server CPU); target ≥ 10×")
    in_process, in_process_cpu = arrow_pages_in_process(settings, tenant_id)
    floor = floor_rows_per_second(settings, tenant_id)
    pages = expected / figures[ARROW_PAGES][0]
    export = expected / figures["Arrow export (one stream)"][0]
    print(f"[{backend}] floor: {floor:,.0f} rows/s (one Arrow table straight from the database, best of 3); "
          f"load average after the run {load():.1f}")
    print(f"[{backend}] Arrow pages read and rendered in one process, without HTTP: {in_process:,.0f} rows/s "
          f"({in_process / floor:.0%} of the floor), {in_process_cpu:.2f} s of CPU per 1M rows (median of 3)")
    print(f"| held forecasts as Arrow pages, {backend}, {expected:,} rows | pages ≥ {PAGES_GOAL:.0%} of floor | "
          f"floor {floor:,.0f} rows/s | pages {pages:,.0f} rows/s (export {export:,.0f}) | "
          f"**pages {pages / floor:.0%} of floor** (export {export / floor:.0%}) |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["duckdb", "postgresql"], default="postgresql")
    parser.add_argument("--stores", type=int, default=STORES, help="stores of 5,000 forecasts each (200: 1M)")
    parser.add_argument("--no-json", action="store_true",
                        help="leave JSON pages out (the slowest reader): Arrow pages and the export against the floor")
    parser.add_argument("--rounds", type=int, default=3,
                        help="measured rounds of each reader after one to warm up; the median is reported")
    args = parser.parse_args()
    with backend_database(args.backend) as (database_url, folder):
        run(args.backend, database_url, folder, args.stores, json=not args.no_json, rounds=args.rounds)


if __name__ == "__main__":
    main()
