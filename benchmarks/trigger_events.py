"""`trigger_events` at 100,000 SKUs (issue 9 point 4): the outbox writes of POST /products/trigger_events (20,000
products) and POST /inventory/trigger_events (100,000 SKUs), beside a bare bulk insert of the same number of outbox
rows (db.bulk.insert_rows of rows built beforehand) measured in the same run.

    uv run python -m benchmarks.trigger_events --backend duckdb
    uv run python -m benchmarks.trigger_events --backend postgresql   # the server of PIA_TEST_POSTGRES_URL

The catalogue is benchmarks/catalogue_read.py's. Each call runs what the route runs (one transaction around
events.outbox.assortment_events), in this process, so the figures leave HTTP out. No target is asserted: the
issue's target is under a second per call. Beside the wall time, the CPU time of this process and, when the
PostgreSQL server runs on this machine, of its backend serving the call: on a shared machine the CPU figures are
the steadier ones.
"""

import argparse
import os
import statistics
import time
from pathlib import Path

import sqlalchemy as sa

from benchmarks.catalogue_read import seed
from benchmarks.databases import backend_database
from contracts.events import INVENTORY_UPDATED, PRODUCT_UPDATED
from db.bulk import insert_rows
from db.catalogue import visible_product_ids, visible_skus
from db.engine import create_engine
from db.ids import new_id, utc_now
from db.outbox import assortment_events
from db.schema import event_outbox, skus
from db.secrets import new_secret_key
from settings import Settings

ROUNDS = 3


def _server_cpu_seconds(conn: sa.Connection) -> float | None:
    """CPU time so far of the PostgreSQL backend serving conn, when it runs here (None on DuckDB or elsewhere)."""
    if conn.dialect.name != "postgresql":
        return None
    stat = Path(f"/proc/{conn.scalar(sa.text('SELECT pg_backend_pid()'))}/stat")
    if not stat.exists():
        return None
    fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime, in clock ticks


def _timed(engine: sa.Engine, write) -> tuple[float, float, float | None, int]:
    """(wall seconds, this process's CPU seconds, the server backend's CPU seconds or None, rows written)."""
    with engine.connect() as conn:
        server_before = _server_cpu_seconds(conn)
        conn.commit()
        started, cpu_started = time.perf_counter(), time.process_time()
        with conn.begin():
            count = write(conn)
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        server_after = _server_cpu_seconds(conn)
    server = None if server_before is None or server_after is None else server_after - server_before
    return wall, cpu, server, count


def run(backend: str, database_url: str, folder) -> None:
    settings = Settings(data_dir=folder, database_url=database_url, secret_key=new_secret_key())
    seeded = seed(settings)
    engine = create_engine(settings)
    tenant, store = seeded.tenant_id, seeded.ecom_store_id
    now = utc_now()
    bare_rows = [{"event_id": new_id(), "tenant_id": tenant, "ecom_store_id": store, "subject": INVENTORY_UPDATED,
                  "entity_id": sku_id, "datetime": now, "metadata": None} for sku_id in seeded.sku_ids]
    calls = {
        "bare insert_rows of 100,000 outbox rows (baseline)": lambda conn: (insert_rows(conn, event_outbox,
                                                                                        bare_rows), len(bare_rows))[1],
        "POST /products/trigger_events (20,000 products)": lambda conn: assortment_events(
            conn, tenant, store, PRODUCT_UPDATED, visible_product_ids(tenant, store, published_only=False)),
        "POST /inventory/trigger_events (100,000 SKUs)": lambda conn: assortment_events(
            conn, tenant, store, INVENTORY_UPDATED,
            visible_skus(tenant, store).with_only_columns(skus.c.id).order_by(skus.c.id)),
    }
    figures = {}
    for name, write in calls.items():
        rounds = []
        for _ in range(ROUNDS):
            if name.startswith("bare"):  # the same rows each round: a fresh table state, fresh ids
                with engine.begin() as conn:
                    conn.execute(event_outbox.delete().where(event_outbox.c.tenant_id == tenant))
                bare_rows = [{**row, "event_id": new_id()} for row in bare_rows]
            rounds.append(_timed(engine, write))
        servers = [server for _, _, server, _ in rounds if server is not None]
        figures[name] = (statistics.median(wall for wall, _, _, _ in rounds),
                         statistics.median(cpu for _, cpu, _, _ in rounds),
                         statistics.median(servers) if servers else None, rounds[0][3])
    engine.dispose()
    baseline = figures["bare insert_rows of 100,000 outbox rows (baseline)"][0]
    print(f"[{backend}] median of {ROUNDS} calls, each one transaction (load average {os.getloadavg()[0]:.1f}):")
    for name, (seconds, cpu, server, rows) in figures.items():
        server_cpu = f", server CPU {server:5.2f} s" if server is not None else ""
        print(f"[{backend}]   {name:52} {seconds:6.2f} s  {rows / seconds:9,.0f} rows/s  "
              f"{seconds / baseline:5.2f}× the bare insert  (CPU {cpu:5.2f} s here{server_cpu})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["duckdb", "postgresql"], default="duckdb")
    args = parser.parse_args()
    with backend_database(args.backend) as (database_url, folder):
        run(args.backend, database_url, folder)


if __name__ == "__main__":
    main()
