"""Benchmark of demo seeding: `uv run python -m benchmarks.demo_seed [--rounds N]`.

The tests' `world` fixture seeds a tenant through `seed_demo_tenant`, and `pia demo` seeds two at its first
start, so the demo catalogue (300 products, 1,800 SKUs, 4,000 stock rows, their events) must load fast. On a
temporary DuckDB file and on a scratch PostgreSQL database it prints, as medians over the rounds:
- the baseline measured in the same run: loading the grocery document alone (what `world` loaded before the
  catalogue came);
- loading the whole demo document, with the bulk inserts and with SQLAlchemy's executemany instead;
- loading it again (nothing changes, nothing is written);
- `seed_demo_tenant` whole (tenant, document, argon2-hashed clients): the `world` fixture's cost.
Then the wall time of `pia demo` from launch to serving on a fresh data dir (two tenants seeded).
"""

import argparse
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import sqlalchemy as sa

import db.bulk
from benchmarks.databases import scratch_postgres_url
from db.backoffice import load_document
from db.engine import create_engine
from db.ids import new_id
from db.migrate import upgrade
from db.secrets import new_secret_key
from db.tenants import create_tenant
from serving.demo import seed_demo_tenant
from serving.demo_data import DEMO_PRODUCTS, demo_document
from settings import Settings


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def measure(engine: sa.Engine, rounds: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {}

    def sample(name: str, seconds: float) -> None:
        samples.setdefault(name, []).append(seconds)

    def full_load(bulk: bool) -> float:
        tenant_id = create_tenant(engine, f"bench {new_id()}", is_test=False)
        document = demo_document("bench", DEMO_PRODUCTS, tenant_id)
        threshold = db.bulk._BULK_FROM_ROWS
        db.bulk._BULK_FROM_ROWS = threshold if bulk else sys.maxsize
        try:
            seconds = timed(lambda: load_document(engine, tenant_id, document))
        finally:
            db.bulk._BULK_FROM_ROWS = threshold
        sample("again (no change)", timed(lambda: load_document(engine, tenant_id, document)))
        return seconds

    seed_demo_tenant(engine, "warm-up", is_test=False)
    def grocery_load() -> float:
        tenant_id = create_tenant(engine, f"bench {new_id()}", is_test=False)
        return timed(lambda: load_document(engine, tenant_id, demo_document("bench")))

    for _ in range(rounds):
        sample("grocery document (baseline)", grocery_load())
        sample("demo document, bulk inserts", full_load(bulk=True))
        sample("demo document, executemany", full_load(bulk=False))
        sample("seed_demo_tenant (world fixture)",
               timed(lambda: seed_demo_tenant(engine, f"bench {new_id()}", is_test=False)))
    return {name: statistics.median(values) for name, values in samples.items()}


def report(backend: str, medians: dict[str, float]) -> None:
    baseline = medians["grocery document (baseline)"]
    print(f"{backend}:")
    for name, seconds in medians.items():
        print(f"  {name:<36} {seconds * 1000:8.0f} ms  {seconds / baseline:5.1f}× baseline")


def pia_demo_start() -> float:
    """Seconds from launching `pia demo` on a fresh data dir until it serves."""
    from tests.conftest import free_port  # the tests' helper; benchmarks run from the repository

    with tempfile.TemporaryDirectory() as data_dir:
        started = time.perf_counter()
        process = subprocess.Popen([str(Path(sys.executable).parent / "pia"), "demo", "--port", str(free_port()),
                                    "--data-dir", data_dir], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True)
        try:
            for line in process.stdout:
                if "Running on" in line:
                    return time.perf_counter() - started
            raise RuntimeError("pia demo stopped before serving")
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as data_dir:
        engine = create_engine(Settings(data_dir=Path(data_dir)))
        upgrade(engine)
        report("DuckDB", measure(engine, rounds))
        engine.dispose()
    with scratch_postgres_url("pia_bench_demo") as url:
        engine = create_engine(Settings(data_dir=Path(tempfile.gettempdir()), database_url=url,
                                        secret_key=new_secret_key()))
        upgrade(engine)
        report("PostgreSQL", measure(engine, rounds))
        engine.dispose()
    print(f"pia demo, fresh data dir, launch to serving: {pia_demo_start():.1f} s (target < 15 s)")


if __name__ == "__main__":
    main()
