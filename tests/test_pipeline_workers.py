"""`pia worker` processes against PostgreSQL: per-tenant order with two workers, and a worker killed mid-batch."""

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from db.batches import get_batch
from db.engine import create_engine
from db.held_quantities import stored_value
from db.ids import new_id
from db.migrate import upgrade
from db.schema import batches, sales_forecasts
from ingest.accept import accept_batch
from serving.demo import seed_demo_tenant
from settings import Settings, WorkerSettings
from tests.batches import body, envelope, forecast_item, new_batch_id
from tests.conftest import ENV, wait_for

PIA = str(Path(sys.executable).parent / "pia")
STORES = [("1001", None), ("1002", None), ("1003", None), (None, "2001")]


@pytest.fixture
def isolated(postgres_url: str, tmp_path: Path) -> Iterator[Settings]:
    """A database of its own, so no other worker (such as the test server's) touches these batches."""
    name = f"pia_workers_{new_id().replace('-', '')[-12:]}"
    admin = sa.create_engine(ENV.test_postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    settings = Settings(data_dir=tmp_path, database_url=sa.make_url(postgres_url).set(database=name)
                        .render_as_string(hide_password=False), worker=WorkerSettings(poll_seconds=0.1))
    upgrade(create_engine(settings))
    yield settings
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def _start_worker(settings: Settings) -> subprocess.Popen:
    env = {**os.environ, "PIA_DATABASE_URL": settings.database_url, "PIA_DATA_DIR": str(settings.data_dir),
           "PIA_WORKER_POLL_SECONDS": "0.1"}
    return subprocess.Popen([PIA, "worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _upload(engine: sa.Engine, settings: Settings, tenant_id: str, run: int, quantity: str) -> str:
    items = [forecast_item(f"1000{sku:02d}", retail=retail, ecom=ecom, quantity=quantity)
             for retail, ecom in STORES for sku in range(1, 51)]
    generated = datetime(2026, 11, 21, tzinfo=UTC) + timedelta(minutes=run)
    raw, headers = body(envelope(items, generated_at=generated.isoformat()))
    accepted = accept_batch(engine, settings.resolved_staging_dir, tenant_id, new_batch_id(), "SALES_FORECAST",
                            body=raw, content_type=headers["Content-Type"],
                            content_encoding=headers["Content-Encoding"], now=datetime.now(UTC))
    return accepted.batch.batch_id



def _waiting_for_lock_on(engine: sa.Engine, table: str) -> bool:
    """Whether a backend of this database waits for a lock on the table (the test holds it)."""
    with engine.connect() as conn:
        return conn.execute(sa.text(
            "SELECT EXISTS (SELECT FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
            "WHERE d.datname = current_database() AND l.relation = CAST(:table AS regclass) AND NOT l.granted)"),
            {"table": table}).scalar_one()


def _unfinished(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(batches)
                            .where(batches.c.progress.in_(["PENDING", "PROCESSING"]))).scalar_one()


def _stop(*workers: subprocess.Popen) -> None:
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        worker.wait(timeout=30)


def test_two_workers_keep_each_tenants_order(isolated: Settings) -> None:
    engine = create_engine(isolated)
    tenants = [seed_demo_tenant(engine, f"order {n}", is_test=False)["id"] for n in range(2)]
    uploaded = {tenant: [_upload(engine, isolated, tenant, run, str(run)) for run in range(1, 9)]
                for tenant in tenants}
    workers = [_start_worker(isolated), _start_worker(isolated)]
    try:
        wait_for(lambda: _unfinished(engine) == 0, 60, "every batch to finish")
    finally:
        _stop(*workers)
    for tenant, batch_ids in uploaded.items():
        rows = [get_batch(engine, tenant, batch_id) for batch_id in batch_ids]
        assert [row.progress for row in rows] == ["COMPLETED"] * 8
        # One group at a time, in receivedTime order: each batch starts after the one before it completed, unless
        # the two were applied together (waiting batches go in one transaction, started and completed as one).
        for before, after in zip(rows, rows[1:], strict=False):
            assert before.received_time <= after.received_time
            together = (after.started_time, after.completed_time) == (before.started_time, before.completed_time)
            assert together or after.started_time >= before.completed_time
        # Processed out of order, a later run would have made an earlier one superseded.
        assert all(row.superseded_count == 0 for row in rows)
        with engine.connect() as conn:
            quantities = conn.execute(sa.select(sales_forecasts.c.quantities).distinct()
                                      .where(sales_forecasts.c.tenant_id == tenant)).scalars().all()
        assert set(quantities) == {stored_value(["8"] * 30)}  # the last run everywhere


def test_worker_killed_mid_batch_leaves_it_to_be_processed_again(isolated: Settings) -> None:
    engine = create_engine(isolated)
    tenant = seed_demo_tenant(engine, "crash", is_test=False)["id"]
    batch_id = _upload(engine, isolated, tenant, 1, "4")
    blocker = engine.connect()
    # Hold the held-forecast table, so the worker stops inside its apply transaction.
    blocker.execute(sa.text("LOCK TABLE sales_forecasts IN ACCESS EXCLUSIVE MODE"))
    worker = _start_worker(isolated)
    try:
        wait_for(lambda: get_batch(engine, tenant, batch_id).progress == "PROCESSING", 60, "the batch to be PROCESSING")
        # Waiting on the lock the test holds means it has reached the apply.
        wait_for(lambda: _waiting_for_lock_on(engine, "sales_forecasts"), 60, "the worker to wait on the held lock")
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
    finally:
        blocker.rollback()
        blocker.close()
    row = get_batch(engine, tenant, batch_id)
    assert row.progress == "PROCESSING" and row.applied_count is None
    with engine.connect() as conn:
        held = conn.execute(sa.select(sa.func.count()).select_from(sales_forecasts)
                            .where(sales_forecasts.c.tenant_id == tenant)).scalar_one()
    assert held == 0  # nothing of the interrupted attempt was applied

    restarted = _start_worker(isolated)
    try:
        wait_for(lambda: get_batch(engine, tenant, batch_id).progress == "COMPLETED", 60, "the batch to complete")
    finally:
        _stop(restarted)
    row = get_batch(engine, tenant, batch_id)
    assert row.attempts == 2 and row.applied_count == 200 and row.superseded_count == 0
    with engine.connect() as conn:
        held = conn.execute(sa.select(sa.func.count()).select_from(sales_forecasts)
                            .where(sales_forecasts.c.tenant_id == tenant)).scalar_one()
    assert held == 200
