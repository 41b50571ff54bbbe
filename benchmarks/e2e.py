"""End-to-end benchmark: 200 forecast batches of 5,000 items (1,000,000 items) uploaded over HTTP to a running
server, timed from the first upload to the last batch COMPLETED. Payloads are prepared before the clock starts.

    uv run python -m benchmarks.e2e --backend duckdb
    uv run python -m benchmarks.e2e --backend postgresql   # needs the PostgreSQL server of PIA_TEST_POSTGRES_URL

DuckDB: `pia serve` with its in-process worker. PostgreSQL: `pia serve` plus one `pia worker` process (the
production shape; one tenant's batches are processed one at a time whatever the number of workers).
"""

import argparse
import gzip
import os
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import orjson
import sqlalchemy as sa

from benchmarks.databases import backend_database
from db.backoffice import load_document
from db.clients import DEMAND_PLANNING_PERMISSION
from db.engine import create_engine
from db.migrate import upgrade
from db.secrets import new_secret_key
from db.tenants import create_tenant
from serving.admin import issue_client
from settings import Settings

BATCHES, ITEMS_PER_BATCH, DAYS = 200, 5_000, 30
STORES, SKUS = 100, 10_000  # 1,000,000 distinct store and SKU keys: every item lands on a key of its own
PIA = str(Path(sys.executable).parent / "pia")


def _seed(engine: sa.Engine) -> tuple[str, str, str]:
    tenant_id = create_tenant(engine, "benchmark", is_test=True)
    load_document(engine, tenant_id, {
        "companies": [{"number": "1", "name": "Bench", "currencyIsoCode": "NOK"}],
        "skus": [{"number": f"{900000 + n}", "name": f"SKU {n}"} for n in range(SKUS)],
        "retailStores": [{"number": f"{5000 + n}", "name": f"Store {n}", "companyNumber": "1", "released": True}
                         for n in range(STORES)],
    })
    client_id, secret = issue_client(engine, tenant_id, "benchmark", "demand_planning", None,
                                     (DEMAND_PLANNING_PERMISSION,))
    return tenant_id, client_id, secret


def _payloads() -> list[bytes]:
    start = datetime.now(UTC).date()
    end = (start + timedelta(days=DAYS - 1)).isoformat()
    generated = datetime.now(UTC).replace(microsecond=0).isoformat()
    payloads = []
    for batch in range(BATCHES):
        keys = range(batch * ITEMS_PER_BATCH, (batch + 1) * ITEMS_PER_BATCH)
        items = [{"retailStoreNumber": f"{5000 + key // SKUS}", "skuNumber": f"{900000 + key % SKUS}",
                  "horizonStartDate": start.isoformat(), "horizonEndDate": end,
                  "quantities": [f"{(key + day) % 17}.{day % 4}" for day in range(DAYS)]} for key in keys]
        document = {"generatedAt": generated, "batchIndex": batch + 1, "batchTotal": BATCHES,
                    "itemCount": len(items), "items": items}
        payloads.append(gzip.compress(orjson.dumps(document), compresslevel=6))
    return payloads


def _wait_healthy(url: str) -> None:
    for _ in range(300):
        try:
            if httpx.get(f"{url}/healthcheck", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("server did not start")


def run(backend: str, database_url: str, data_dir: Path) -> None:
    settings = Settings(data_dir=data_dir, database_url=database_url)
    engine = create_engine(settings)
    upgrade(engine)
    tenant_id, client_id, secret = _seed(engine)
    engine.dispose()  # the DuckDB file belongs to the server process from here on
    print(f"[{backend}] preparing {BATCHES} payloads of {ITEMS_PER_BATCH} items x {DAYS} days ...", flush=True)
    payloads = _payloads()
    print(f"[{backend}] {sum(map(len, payloads)) / 1e6:.1f} MB gzipped in all", flush=True)

    port = 18000 + os.getpid() % 1000
    env = {"PIA_SECRET_KEY": new_secret_key(), **os.environ, "PIA_DATA_DIR": str(data_dir),
           "PIA_DATABASE_URL": database_url, "PIA_WORKER_POLL_SECONDS": "0.05"}
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    processes = [subprocess.Popen([PIA, "serve", "--port", str(port)], env=env, **quiet)]
    if backend == "postgresql":
        processes.append(subprocess.Popen([PIA, "worker"], env=env, **quiet))
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url)
        token = httpx.post(f"{url}/oauth2/token", auth=(client_id, secret), data={
            "grant_type": "client_credentials", "scope": "demand_planning", "tenant_id": tenant_id},
        ).json()["access_token"]
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                   "Content-Encoding": "gzip"}
        base = f"{url}/v1/tenants/{tenant_id}/demand_planning/sales_forecast_batches"
        ids = [str(uuid.uuid4()) for _ in payloads]
        with httpx.Client(timeout=120) as client:
            def upload(index: int) -> int:
                return client.put(f"{base}/{ids[index]}", content=payloads[index], headers=headers).status_code

            started = time.perf_counter()
            with ThreadPoolExecutor(max_workers=4) as pool:
                statuses = list(pool.map(upload, range(BATCHES)))
            uploaded = time.perf_counter() - started
            assert statuses == [202] * BATCHES, sorted(set(statuses))
            while True:
                last = client.get(f"{base}/{ids[-1]}", headers=headers).json()
                if last["progress"] not in ("PENDING", "PROCESSING"):
                    break
                time.sleep(0.05)
            elapsed = time.perf_counter() - started
            progress = {client.get(f"{base}/{i}", headers=headers).json()["progress"] for i in ids}
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(timeout=60)
    items = BATCHES * ITEMS_PER_BATCH
    print(f"[{backend}] uploads done after {uploaded:.1f} s; last batch {last['progress']} after {elapsed:.1f} s; "
          f"{items / elapsed:,.0f} items/s; final states {sorted(progress)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["duckdb", "postgresql"], default="duckdb")
    args = parser.parse_args()
    with backend_database(args.backend) as (database_url, folder):
        run(args.backend, database_url, folder)


if __name__ == "__main__":
    main()
