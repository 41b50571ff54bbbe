"""Benchmark: /healthcheck latency while four maximum-size uploads are checked, beside its unloaded figure.

    uv run python -m benchmarks.upload_load

Runs `pia serve` (embedded DuckDB; no in-process pipeline worker, so the uploads alone load the process) twice:
with the upload work in worker processes (PIA_UPLOAD_PROCESSES=2, the default) and, as the baseline measured in
the same run, in threads of the API process (PIA_UPLOAD_PROCESSES=0, how uploads were handled before). In each,
one client asks /healthcheck again and again over HTTP: first alone, then while UPLOADS concurrent uploads of a
maximum-size forecast batch (20,000 items x 62 days of 4-decimal quantities: 22 MB of JSON, 9.3 MB gzipped)
are received, decompressed, parsed, checked, staged and recorded, ROUNDS times with new batch ids. Prints the
p50, p99 and maximum latency of both, and their ratio.
"""

import gzip
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import orjson

from contracts.limits import MAX_HORIZON_DAYS, MAX_ITEMS_PER_BATCH
from db.clients import DEMAND_PLANNING_PERMISSION
from db.engine import create_engine
from db.migrate import upgrade
from db.tenants import create_tenant
from serving.admin import issue_client
from settings import Settings

UPLOADS, ROUNDS, UNLOADED_SAMPLES = 4, 3, 300
MODES = {"worker processes": "2", "threads (baseline)": "0"}  # PIA_UPLOAD_PROCESSES
PIA = str(Path(sys.executable).parent / "pia")


def maximum_batch() -> bytes:
    """The largest batch a client may send: every item at the horizon's limit, quantities with 8 + 4 digits."""
    rng = random.Random(11)
    start = datetime.now(UTC).date()
    end = (start + timedelta(days=MAX_HORIZON_DAYS - 1)).isoformat()
    items = [{"retailStoreNumber": f"{1000 + index % 300}", "skuNumber": f"{70000000 + index}",
              "horizonStartDate": start.isoformat(), "horizonEndDate": end,
              "quantities": [f"{rng.randrange(10**8)}.{rng.randrange(10**4):04d}" for _ in range(MAX_HORIZON_DAYS)]}
             for index in range(MAX_ITEMS_PER_BATCH)]
    raw = orjson.dumps({"generatedAt": datetime.now(UTC).isoformat(), "itemCount": len(items), "items": items})
    print(f"batch: {len(items)} items x {MAX_HORIZON_DAYS} days, {len(raw) / 1e6:.1f} MB JSON", end="", flush=True)
    sent = gzip.compress(raw, compresslevel=6)
    print(f", {len(sent) / 1e6:.1f} MB gzipped")
    return sent


def _seed(data_dir: Path) -> tuple[str, str, str]:
    engine = create_engine(Settings(data_dir=data_dir))
    upgrade(engine)
    tenant_id = create_tenant(engine, "upload load", is_test=True)
    client_id, secret = issue_client(engine, tenant_id, "planner", "demand_planning", None,
                                     (DEMAND_PLANNING_PERMISSION,))
    engine.dispose()  # the server process owns the DuckDB file
    return tenant_id, client_id, secret


def _health_latencies(http: httpx.Client, *, samples: int = 0, during: list[Future] | None = None) -> list[float]:
    """`samples` latencies, or as many as fit while the `during` work runs."""
    latencies: list[float] = []
    while len(latencies) < samples if during is None else not all(work.done() for work in during):
        started = time.perf_counter()
        assert http.get("/healthcheck").status_code == 200
        latencies.append((time.perf_counter() - started) * 1000)
    return latencies


def _measure(mode: str, processes: str, sent: bytes) -> tuple[list[float], list[float], list[float]]:
    """Unloaded latencies, loaded latencies and the seconds each round of uploads took."""
    with tempfile.TemporaryDirectory(prefix="pia-upload-load-") as folder:
        tenant_id, client_id, secret = _seed(Path(folder))
        port = 18000 + os.getpid() % 1000
        env = {**os.environ, "PIA_DATA_DIR": folder, "PIA_INPROCESS_WORKER": "0", "PIA_UPLOAD_PROCESSES": processes}
        server = subprocess.Popen([PIA, "serve", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(base_url=base, timeout=120) as http:
                _wait_healthy(http)
                token = http.post("/oauth2/token", auth=(client_id, secret), data={
                    "grant_type": "client_credentials", "scope": "demand_planning",
                    "tenant_id": tenant_id}).json()["access_token"]
                headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                           "Content-Encoding": "gzip"}
                path = f"/v1/tenants/{tenant_id}/demand_planning/sales_forecast_batches"

                def upload() -> None:
                    with httpx.Client(base_url=base, timeout=300) as uploader:
                        response = uploader.put(f"{path}/{uuid.uuid4()}", content=sent, headers=headers)
                        assert response.status_code == 202, response.text

                upload()  # warm-up: worker processes started, modules imported
                unloaded = _health_latencies(http, samples=UNLOADED_SAMPLES)
                loaded, rounds = [], []
                with ThreadPoolExecutor(UPLOADS) as pool:
                    for _ in range(ROUNDS):
                        started = time.perf_counter()
                        running = [pool.submit(upload) for _ in range(UPLOADS)]
                        loaded += _health_latencies(http, during=running)
                        for finished in running:
                            finished.result()
                        rounds.append(time.perf_counter() - started)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
        print(f"  measured {mode}", flush=True)
        return unloaded, loaded, rounds


def _wait_healthy(http: httpx.Client) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if http.get("/healthcheck").status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError("pia serve did not start")


def _figures(latencies: list[float]) -> tuple[float, float, float]:
    percentiles = statistics.quantiles(latencies, n=100, method="inclusive")
    return percentiles[49], percentiles[98], max(latencies)


def main() -> None:
    sent = maximum_batch()
    results = {mode: _measure(mode, processes, sent) for mode, processes in MODES.items()}
    print(f"/healthcheck latency in ms, alone and while {UPLOADS} uploads of that batch run ({ROUNDS} rounds)")
    print(f"  {'upload work in':20s} {'':8s} {'p50':>8s} {'p99':>8s} {'max':>8s} {'n':>5s}")
    for mode, (unloaded, loaded, rounds) in results.items():
        (p50, p99, worst), (loaded_p50, loaded_p99, loaded_worst) = _figures(unloaded), _figures(loaded)
        print(f"  {mode:20s} {'alone':8s} {p50:8.1f} {p99:8.1f} {worst:8.1f} {len(unloaded):5d}")
        print(f"  {'':20s} {'loaded':8s} {loaded_p50:8.1f} {loaded_p99:8.1f} {loaded_worst:8.1f} {len(loaded):5d}")
        print(f"  {'':20s} {'ratio':8s} {loaded_p50 / p50:7.1f}x {loaded_p99 / p99:7.1f}x "
              f"{loaded_worst / worst:7.1f}x   ({UPLOADS} uploads took {statistics.median(rounds):.1f} s, median)")


if __name__ == "__main__":
    main()
