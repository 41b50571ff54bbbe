"""The worker under failure, on both backends.

Transient failures are retried with backoff and end FAILED after the maximum; terminal ones end FAILED at once
and do not hold up the tenant; a batch row the driver cannot decode is failed while other tenants go on; a
crashed in-process worker is restarted; /healthcheck shows a stalled pipeline; the idle poll reads its index.
"""

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pyarrow as pa
import pytest
import sqlalchemy as sa

from db.backoffice import load_document
from db.batches import in_line, oldest_unfinished, outcomes, tenants_ready
from db.clients import DEMAND_PLANNING_PERMISSION
from db.engine import is_duckdb
from db.held_quantities import as_decimals
from db.ids import new_id, utc_now
from db.schema import batches, sales_forecasts
from db.tenants import create_tenant
from db.workers import beat
from ingest.accept import accept_batch
from pipeline.worker import Pipeline, run_supervised, tenant_locks_for
from rules.retry import RetryPolicy
from serving.admin import issue_client
from serving.app import create_app
from serving.demo_data import demo_document
from settings import Settings
from tests.batches import body, envelope, forecast_item, new_batch_id, wait_finished
from tests.conftest import LiveServer, bearer, free_port, get_token, wait_for, without_upload_workers

PIA = str(Path(sys.executable).parent / "pia")


def _tenant(engine: sa.Engine) -> str:
    """A tenant with the demo's stores and SKUs (no API clients: hashing their secrets is slow by design)."""
    tenant_id = create_tenant(engine, f"worker {new_id()}", is_test=False)
    load_document(engine, tenant_id, demo_document("worker"))
    return tenant_id


def _upload(settings: Settings, engine: sa.Engine, tenant_id: str, run: int = 1,
            received: datetime | None = None) -> str:
    """A one-item forecast batch of planning run `run` (its quantity is the run number), accepted as by the API."""
    generated = datetime(2026, 11, 21, tzinfo=UTC) + timedelta(minutes=run)
    raw, headers = body(envelope([forecast_item("100001", quantity=str(run))], generated_at=generated.isoformat()))
    return accept_batch(engine, settings.resolved_staging_dir, tenant_id, new_batch_id(), "SALES_FORECAST",
                        body=raw, content_type=headers["Content-Type"], content_encoding=headers["Content-Encoding"],
                        now=received or datetime.now(UTC)).batch.batch_id


def _state(engine: sa.Engine, tenant_id: str, batch_id: str) -> sa.Row:
    """Progress, attempts, retry time and message: columns every row can decode, even a poisoned one."""
    with engine.connect() as conn:
        return conn.execute(sa.select(batches.c.progress, batches.c.attempts, batches.c.retry_at,
                                      batches.c.error_message, batches.c.applied_count)
                            .where(batches.c.tenant_id == tenant_id, batches.c.batch_id == batch_id)).one()


def _held_quantity(engine: sa.Engine, tenant_id: str) -> Decimal:
    """The first day's quantity of the tenant's one held forecast."""
    with engine.connect() as conn:
        quantities = conn.execute(sa.select(sales_forecasts.c.quantities)
                                  .where(sales_forecasts.c.tenant_id == tenant_id)).scalar_one()
    return as_decimals(pa.array([quantities])).to_pylist()[0][0]



class Clock:
    """The pipeline's clock, which the test moves forward: backoff is waited out without sleeping."""

    def __init__(self) -> None:
        self.ahead = timedelta()

    def __call__(self) -> datetime:
        return utc_now() + self.ahead

    def move_past(self, instant: datetime) -> None:
        self.ahead = instant - utc_now() + timedelta(seconds=1)


@contextmanager
def _held_forecasts_written_elsewhere(engine: sa.Engine, tenant_id: str) -> Iterator[None]:
    """Another transaction writes the tenant's held forecasts and stays open: a real transient failure for the
    worker. PostgreSQL makes it wait for the row lock until its lock_timeout; DuckDB, which has no lock waits,
    refuses the conflicting write at once."""
    conn = engine.connect()
    try:
        conn.execute(sales_forecasts.update().where(sales_forecasts.c.tenant_id == tenant_id)
                     .values(modified_time=utc_now()))
        yield
    finally:
        conn.rollback()
        conn.close()


def test_transient_failure_is_retried_with_backoff_then_failed(own_store) -> None:
    settings, engine = own_store
    held_up, other = _tenant(engine), _tenant(engine)
    clock = Clock()
    pipeline = Pipeline(engine, settings.resolved_staging_dir, tenant_locks_for(engine),
                        retry=RetryPolicy(max_attempts=3, base_seconds=60, max_seconds=3600),
                        lock_timeout_seconds=0.2, clock=clock)
    _upload(settings, engine, held_up, run=1)
    assert pipeline.process_pending() == 1 and _held_quantity(engine, held_up) == 1
    blocked, unaffected = _upload(settings, engine, held_up, run=2), _upload(settings, engine, other, run=2)

    with _held_forecasts_written_elsewhere(engine, held_up):
        for attempt in (1, 2):
            before = clock()
            pipeline.process_pending()
            state = _state(engine, held_up, blocked)
            assert (state.progress, state.attempts, state.error_message) == ("PROCESSING", attempt, None)
            step = timedelta(seconds=60 * 2 ** (attempt - 1))  # exponential; jitter keeps it within [step/2, step]
            assert before + step / 2 <= state.retry_at <= clock() + step
            # Until then the tenant waits (the next round leaves it alone) ...
            assert pipeline.process_pending() == 0 and _state(engine, held_up, blocked).attempts == attempt
            # ... while the other tenant was not held up.
            assert _state(engine, other, unaffected).progress == "COMPLETED"
            clock.move_past(state.retry_at)
        pipeline.process_pending()

    state = _state(engine, held_up, blocked)
    assert (state.progress, state.attempts, state.retry_at, state.applied_count) == ("FAILED", 3, None, None)
    cause = "TransactionException" if is_duckdb(engine) else "LockNotAvailable"
    assert state.error_message == (f"Gave up after 3 attempts: the database failed each time (last: {cause}); "
                                   "nothing was applied.")
    assert _held_quantity(engine, held_up) == 1
    # The tenant's later batches go on.
    later = _upload(settings, engine, held_up, run=3)
    assert pipeline.process_pending() == 1
    assert _state(engine, held_up, later).progress == "COMPLETED" and _held_quantity(engine, held_up) == 3


@pytest.mark.parametrize(("damage", "message"), [
    ("garbled", "The staged batch file cannot be read."),
    ("missing", "The staged batch file is missing; nothing was applied."),
])
def test_terminal_failure_fails_at_once_and_the_tenant_goes_on(own_store, damage, message) -> None:
    settings, engine = own_store
    tenant = _tenant(engine)
    broken, good = _upload(settings, engine, tenant, run=1), _upload(settings, engine, tenant, run=2)
    with engine.connect() as conn:
        staged = settings.resolved_staging_dir / conn.execute(
            sa.select(batches.c.staged_path).where(batches.c.batch_id == broken)).scalar_one()
    if damage == "garbled":
        staged.write_bytes(b"not parquet")
    else:
        staged.unlink()
    pipeline = Pipeline(engine, settings.resolved_staging_dir, tenant_locks_for(engine),
                        retry=RetryPolicy(max_attempts=5, base_seconds=60))
    assert pipeline.process_pending() == 2
    state = _state(engine, tenant, broken)
    assert (state.progress, state.attempts, state.retry_at, state.error_message) == ("FAILED", 1, None, message)
    assert _state(engine, tenant, good).progress == "COMPLETED" and _held_quantity(engine, tenant) == 2


def test_batch_interrupted_at_every_attempt_is_failed_at_the_maximum(own_store) -> None:
    """What workers killed mid-batch leave (tests/test_pipeline_workers.py kills one for real): the batch
    PROCESSING with its attempts counted. At the maximum it is failed instead of tried once more."""
    settings, engine = own_store
    tenant = _tenant(engine)
    batch_id = _upload(settings, engine, tenant)
    with engine.begin() as conn:
        conn.execute(batches.update().where(batches.c.batch_id == batch_id).values(progress="PROCESSING", attempts=3))
    pipeline = Pipeline(engine, settings.resolved_staging_dir, tenant_locks_for(engine),
                        retry=RetryPolicy(max_attempts=3))
    assert pipeline.process_pending() == 1
    state = _state(engine, tenant, batch_id)
    assert (state.progress, state.attempts, state.applied_count) == ("FAILED", 3, None)
    assert state.error_message.startswith("Gave up after 3 attempts: each was interrupted before it finished")


def _poison(engine: sa.Engine, batch_id: str) -> None:
    """A generatedAt whose UTC value is in year 0, as the attack run managed to record: PostgreSQL stores it and
    psycopg cannot decode it (reading the row fails); DuckDB hands it back as text (applying it fails)."""
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE batches SET generated_at = CAST('0001-01-01T00:00:00+01:00' AS TIMESTAMPTZ) "
                             "WHERE batch_id = :batch_id"), {"batch_id": batch_id})


def _worker_process(settings: Settings, **env: str) -> subprocess.Popen:
    env = {**os.environ, "PIA_DATABASE_URL": settings.database_url, "PIA_DATA_DIR": str(settings.data_dir),
           "PIA_WORKER_POLL_SECONDS": "0.1", **env}
    return subprocess.Popen([PIA, "worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _stop_worker(worker: subprocess.Popen) -> str:
    worker.send_signal(signal.SIGTERM)
    _, stderr = worker.communicate(timeout=30)
    assert worker.returncode == 0, stderr
    return stderr


def _backend_waiting_on(engine: sa.Engine, table: str) -> int | None:
    """The process id of a PostgreSQL backend of this database waiting for a lock on the table."""
    with engine.connect() as conn:
        return conn.execute(sa.text(
            "SELECT l.pid FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
            "WHERE d.datname = current_database() AND l.relation = CAST(:table AS regclass) AND NOT l.granted"),
            {"table": table}).scalar()


def _backend_alive(engine: sa.Engine, pid: int) -> bool:
    with engine.connect() as conn:  # a transaction of its own: pg_stat_activity is read once per transaction
        return conn.execute(sa.text("SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = :pid)"),
                            {"pid": pid}).scalar_one()


@pytest.mark.parametrize("backend", ["postgresql"])  # the embedded DuckDB has no connection to lose
def test_worker_whose_connection_is_terminated_mid_batch_retries_it(own_store) -> None:
    settings, engine = own_store
    tenant = _tenant(engine)
    batch_id = _upload(settings, engine, tenant)
    blocker = engine.connect()
    blocker.execute(sa.text("LOCK TABLE sales_forecasts IN ACCESS EXCLUSIVE MODE"))  # holds the worker in its apply
    worker = _worker_process(settings, PIA_WORKER_RETRY_BASE_SECONDS="0.2")
    try:
        wait_for(lambda: _backend_waiting_on(engine, "sales_forecasts") is not None, 60,
                 "the worker to wait on the held lock")
        pid = _backend_waiting_on(engine, "sales_forecasts")
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.pg_terminate_backend(pid))).scalar_one()
        wait_for(lambda: not _backend_alive(engine, pid), 60, "the worker's backend to end")
        blocker.rollback()
        wait_for(lambda: _state(engine, tenant, batch_id).progress == "COMPLETED", 60, "the batch to complete")
        assert worker.poll() is None
    finally:
        blocker.close()
        stderr = _stop_worker(worker)
    assert _state(engine, tenant, batch_id).attempts == 2
    assert "attempt 1 of 5 failed (AdminShutdown)" in stderr


@contextmanager
def _worker_running(settings: Settings, engine: sa.Engine) -> Iterator[Callable[[], bool]]:
    """The worker as deployed: `pia worker` processes on PostgreSQL, the supervised in-process thread on DuckDB
    (one process owns its file). Yields whether it is still running."""
    if is_duckdb(engine):
        pipeline = Pipeline.from_settings(settings, engine)
        stop, wake = threading.Event(), threading.Event()
        thread = threading.Thread(target=run_supervised, args=(pipeline, stop, wake, 0.1), daemon=True)
        thread.start()
        try:
            yield thread.is_alive
        finally:
            stop.set()
            wake.set()
            thread.join(timeout=30)
        return
    worker = _worker_process(settings)
    try:
        yield lambda: worker.poll() is None
    finally:
        _stop_worker(worker)


def test_poisoned_batch_is_failed_and_every_other_batch_processed(own_store) -> None:
    settings, engine = own_store
    poisoned_tenant, other = _tenant(engine), _tenant(engine)
    poisoned = _upload(settings, engine, poisoned_tenant, run=1)
    after_it, elsewhere = _upload(settings, engine, poisoned_tenant, run=2), _upload(settings, engine, other, run=1)
    _poison(engine, poisoned)
    with _worker_running(settings, engine) as running:
        wait_for(lambda: {row.progress for row in outcomes(engine, [(poisoned_tenant, poisoned),
                                                                (poisoned_tenant, after_it), (other, elsewhere)])}
              <= {"COMPLETED", "FAILED"}, 60, "both tenants' batches to finish")
        assert running()  # it did not exit, on start or after
    state = _state(engine, poisoned_tenant, poisoned)
    assert state.progress == "FAILED" and state.applied_count is None
    assert state.error_message == ("Processing failed with an internal error; nothing was applied." if is_duckdb(engine)
                                   else "The batch record cannot be read; nothing was applied.")
    assert _state(engine, poisoned_tenant, after_it).progress == "COMPLETED"
    assert _state(engine, other, elsewhere).progress == "COMPLETED"


def test_crashed_inprocess_worker_is_restarted(own_store, monkeypatch, caplog) -> None:
    """The crash is injected once into the loop's round: no input reaches that far any more, since every
    error of a tenant or batch is caught below it, but a bug there must still not end processing."""
    settings, engine = own_store
    settings = settings.with_changes(worker={"retry_base_seconds": 0.2})
    crashed = threading.Event()
    loop_round = Pipeline._round  # the pass over the tenants that the loop makes each round

    def crash_once(self: Pipeline, *args, **kwargs) -> tuple[int, bool]:
        if not crashed.is_set():
            crashed.set()
            raise RuntimeError("injected crash of the worker loop")
        return loop_round(self, *args, **kwargs)

    monkeypatch.setattr(Pipeline, "_round", crash_once)
    caplog.set_level(logging.ERROR, logger="pipeline.worker")
    tenant = _tenant(engine)
    client_id, secret = issue_client(engine, tenant, "planner", "demand_planning", None, (DEMAND_PLANNING_PERMISSION,))
    port = free_port()
    live = LiveServer(create_app(settings, engine, issuer=f"http://127.0.0.1:{port}", run_pipeline=True), port)
    live.start()
    try:
        wait_for(crashed.is_set, 60, "the injected crash")
        with httpx.Client(base_url=live.url, timeout=30) as http:
            token = get_token(http, {"id": tenant}, {"clientId": client_id, "clientSecret": secret,
                                                      "scope": "demand_planning", "resource": None})
            raw, headers = body(envelope([forecast_item("100001")]))
            response = http.put(f"/v1/tenants/{tenant}/demand_planning/sales_forecast_batches/{new_batch_id()}",
                                content=raw, headers={**bearer(token), **headers})
            assert response.status_code == 202, response.text
            assert wait_finished(http, response.headers["Location"], bearer(token))["progress"] == "COMPLETED"
    finally:
        live.stop()
    crash_logs = [r for r in caplog.records if r.getMessage().startswith("pipeline worker crashed (1 in a row)")]
    assert len(crash_logs) == 1 and "injected crash" in str(crash_logs[0].exc_info[1])


def test_healthcheck_shows_a_stalled_pipeline_and_stays_200(own_store) -> None:
    settings, engine = own_store
    tenant = _tenant(engine)
    ten_minutes_ago = utc_now() - timedelta(minutes=10)
    _upload(settings, engine, tenant, received=ten_minutes_ago)
    beat(engine, "a worker that died", ten_minutes_ago)
    live = LiveServer(create_app(without_upload_workers(settings), engine, issuer="http://x", run_pipeline=False),
                      free_port())
    live.start()
    try:
        response = httpx.get(f"{live.url}/healthcheck", timeout=10)
        assert response.status_code == 200 and response.json()["status"] == "ok"
        pipeline = response.json()["checks"]["pipeline"]
        assert pipeline["status"] == "stalled"
        assert pipeline["lastHeartbeat"] == ten_minutes_ago.isoformat().replace("+00:00", "Z")
        assert 600 <= pipeline["heartbeatAgeSeconds"] < 3600
        assert 600 <= pipeline["oldestPendingAgeSeconds"] < 3600

        beat(engine, "a live worker", utc_now())  # work waits, but a worker is alive: not stalled
        pipeline = httpx.get(f"{live.url}/healthcheck", timeout=10).json()["checks"]["pipeline"]
        assert pipeline["status"] == "ok" and pipeline["heartbeatAgeSeconds"] < 600
        assert pipeline["oldestPendingAgeSeconds"] >= 600
    finally:
        live.stop()


@pytest.mark.parametrize("backend", ["postgresql"])  # DuckDB has no partial indexes: it scans one column
def test_idle_poll_reads_only_the_unfinished_batch_index(own_store) -> None:
    settings, engine = own_store
    now = utc_now()
    finished = [{"tenant_id": f"tenant-{n % 50}", "batch_id": new_id(), "kind": "SALES_FORECAST",
                 "body_sha256": "0" * 64, "staged_path": "gone.parquet", "generated_at": now, "item_count": 1,
                 "progress": "COMPLETED", "received_time": now - timedelta(seconds=n), "completed_time": now,
                 "rejected_items_truncated": False, "warnings": "[]", "attempts": 1} for n in range(20_000)]
    waiting = [{**finished[0], "tenant_id": tenant, "batch_id": new_id(), "progress": progress,
                "completed_time": None, "retry_at": retry_at}
               for tenant, progress, retry_at in [("ready", "PENDING", None), ("ready", "PENDING", None),
                                                  ("backing-off", "PROCESSING", now + timedelta(minutes=5))]]
    with engine.begin() as conn:
        conn.execute(batches.insert(), [{"retry_at": None, **row} for row in finished] + waiting)
        conn.execute(sa.text("ANALYZE batches"))

    statements: list[tuple[str, dict]] = []

    def capture(conn, cursor, statement, parameters, context, executemany) -> None:
        statements.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", capture)
    try:
        assert tenants_ready(engine, now) == ["ready"]
        assert [row.batch_id for row in in_line(engine, "ready", 5)] == [row["batch_id"] for row in waiting[:2]]
        assert oldest_unfinished(engine).any_unfinished
    finally:
        sa.event.remove(engine, "before_cursor_execute", capture)
    polls = [(statement, parameters) for statement, parameters in statements if "FROM batches" in statement]
    assert len(polls) == 3
    with engine.connect() as conn:
        for statement, parameters in polls:
            plan = "\n".join(conn.exec_driver_sql(f"EXPLAIN {statement}", parameters).scalars())
            assert "ix_batches_unfinished" in plan and "Seq Scan" not in plan, plan
