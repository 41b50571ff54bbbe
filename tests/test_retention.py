"""Retention on both backends: old staged files, finished batch rows, audit rows, dead workers' heartbeats and
expired console sessions go; young ones and everything of unfinished batches stay; the worker purges periodically;
a rerun whose staged file is gone says so."""

import os
import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

import db.retention
from db.backoffice import load_document
from db.batches import get_batch
from db.console_sessions import start_session
from db.ids import new_id, utc_now
from db.retention import Removed, RetentionPolicy, remove_expired
from db.schema import audit_events, batches, console_sessions, event_outbox, pipeline_workers
from db.tenants import create_tenant
from db.workers import beat
from ingest.accept import accept_batch
from pipeline.worker import Pipeline, run_supervised, tenant_locks_for
from serving.cli import main
from serving.demo_data import demo_document
from settings import Settings
from tests.batches import body, envelope, forecast_item, new_batch_id
from tests.conftest import wait_for

POLICY = RetentionPolicy(staged_files=timedelta(days=30), finished_batches=timedelta(days=90),
                         audit_events=timedelta(days=90), delivered_events=timedelta(days=7))


def _tenant(engine: sa.Engine) -> str:
    tenant_id = create_tenant(engine, f"retention {new_id()}", is_test=False)
    load_document(engine, tenant_id, demo_document("retention"))
    return tenant_id


def _batch(settings: Settings, engine: sa.Engine, tenant_id: str, days_ago: int, *, finished: bool) -> tuple[str, Path]:
    """A batch uploaded days_ago (and processed then, if finished): its id and staged file, dated as then."""
    then = utc_now() - timedelta(days=days_ago)
    raw, headers = body(envelope([forecast_item("100001", start=then.date())], generated_at=then.isoformat()))
    batch = accept_batch(engine, settings.resolved_staging_dir, tenant_id, new_batch_id(), "SALES_FORECAST", body=raw,
                         content_type=headers["Content-Type"], content_encoding=headers["Content-Encoding"],
                         now=then).batch
    if finished:
        Pipeline(engine, settings.resolved_staging_dir, tenant_locks_for(engine), clock=lambda: then).process_pending()
        assert get_batch(engine, tenant_id, batch.batch_id).progress == "COMPLETED"
    return batch.batch_id, _dated(settings.resolved_staging_dir / batch.staged_path, then)


def _dated(path: Path, when: datetime) -> Path:
    os.utime(path, (when.timestamp(), when.timestamp()))
    return path


def _file(path: Path, when: datetime) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"staged")
    return _dated(path, when)


def _audit(engine: sa.Engine, tenant_id: str, days_ago: int) -> str:
    row_id = new_id()
    with engine.begin() as conn:
        conn.execute(audit_events.insert().values(
            id=row_id, tenant_id=tenant_id, client_id=new_id(), token_id=new_id(), request_id=new_id(), method="GET",
            path="/v1/x", status=200, duration_ms=1.0, time=utc_now() - timedelta(days=days_ago)))
    return row_id


def _event(engine: sa.Engine, tenant_id: str, delivered_days_ago: int | None, dead: bool = False) -> str:
    """An outbox row written 30 days ago, delivered `delivered_days_ago` (None: not yet), or dead-lettered."""
    event_id, then = new_id(), utc_now() - timedelta(days=30)
    delivered = None if delivered_days_ago is None else utc_now() - timedelta(days=delivered_days_ago)
    with engine.begin() as conn:
        conn.execute(event_outbox.insert().values(
            event_id=event_id, tenant_id=tenant_id, ecom_store_id=new_id(), subject="ProductUpdated",
            entity_id=new_id(), datetime=then, delivered_time=delivered, dead_letter_time=then if dead else None))
    return event_id


def _ids(engine: sa.Engine, column: sa.Column) -> set[str]:
    with engine.connect() as conn:
        return set(conn.scalars(sa.select(column)))


def test_retention_removes_what_is_old_and_keeps_the_rest(own_store, monkeypatch) -> None:
    settings, engine = own_store
    monkeypatch.setattr(db.retention, "DELETE_CHUNK", 2)  # several chunks, as a large backlog takes
    tenant = _tenant(engine)
    staging = settings.resolved_staging_dir
    ancient, ancient_file = _batch(settings, engine, tenant, 100, finished=True)
    older, older_file = _batch(settings, engine, tenant, 40, finished=True)
    young, young_file = _batch(settings, engine, tenant, 1, finished=True)
    stuck, stuck_file = _batch(settings, engine, tenant, 100, finished=False)  # unfinished: all of it stays
    # Files no batch row names: an upload interrupted after staging, and one being staged now.
    orphan_old = _file(staging / tenant / "interrupted-upload.parquet", utc_now() - timedelta(days=31))
    orphan_young = _file(staging / tenant / ".upload-in-progress.tmp", utc_now())
    old_audit = {_audit(engine, tenant, days) for days in (91, 100, 200, 365, 400)}
    young_audit = {_audit(engine, tenant, days) for days in (0, 89)}
    beat(engine, "dead worker", utc_now() - timedelta(days=2))
    beat(engine, "live worker", utc_now())
    delivered_long_ago = {_event(engine, tenant, days) for days in (8, 20, 30)}
    kept_events = {_event(engine, tenant, 6), _event(engine, tenant, None), _event(engine, tenant, None, dead=True)}
    _, expired_session = start_session(engine, tenant, new_id(), timedelta(hours=8), utc_now() - timedelta(hours=9))
    _, live = start_session(engine, tenant, new_id(), timedelta(hours=8), utc_now() - timedelta(hours=7))

    removed = remove_expired(engine, staging, POLICY, utc_now())

    assert removed == Removed(staged_files=3, finished_batches=1, audit_events=5, worker_rows=1, delivered_events=3,
                              console_sessions=1)
    assert _ids(engine, console_sessions.c.session_hash) == {live.session_hash} != {expired_session.session_hash}
    assert _ids(engine, event_outbox.c.event_id) & (delivered_long_ago | kept_events) == kept_events
    assert not ancient_file.exists() and not older_file.exists() and not orphan_old.exists()
    assert young_file.exists() and stuck_file.exists() and orphan_young.exists()
    assert _ids(engine, batches.c.batch_id) == {older, young, stuck}  # rows outlive their files
    assert _ids(engine, audit_events.c.id) == young_audit and not old_audit & _ids(engine, audit_events.c.id)
    assert _ids(engine, pipeline_workers.c.worker_id) == {"live worker"}
    assert remove_expired(engine, staging, POLICY, utc_now()) == Removed(0, 0, 0, 0, 0, 0)



def test_worker_purges_periodically_not_every_poll(own_store) -> None:
    settings, engine = own_store
    tenant = _tenant(engine)
    staging = settings.resolved_staging_dir
    expired = _file(staging / tenant / "expired.parquet", utc_now() - timedelta(days=31))
    old_audit = _audit(engine, tenant, 91)
    # Retention every 3600 s, the default; a heartbeat every 0.05 s, so the loop is seen going round.
    pipeline = Pipeline.from_settings(settings.with_changes(pipeline_stale_seconds=0.3), engine)
    stop, wake = threading.Event(), threading.Event()
    worker = threading.Thread(target=run_supervised, args=(pipeline, stop, wake, 0.05), daemon=True)
    worker.start()
    try:
        wait_for(lambda: not expired.exists() and old_audit not in _ids(engine, audit_events.c.id), 60,
                 "the expired file and audit rows to be purged")
        # Expired again while the worker polls on: it stays until the next purge, an interval away.
        expired_later = _file(staging / tenant / "expired-later.parquet", utc_now() - timedelta(days=31))
        for _ in range(5):
            last = _heartbeat(engine, pipeline.worker_id)
            wait_for(lambda last=last: _heartbeat(engine, pipeline.worker_id) > last, 60, "another heartbeat")
        assert expired_later.exists()
    finally:
        stop.set()
        wake.set()
        worker.join(timeout=30)
    assert pipeline.worker_id not in _ids(engine, pipeline_workers.c.worker_id)  # a clean stop retires its row


def _heartbeat(engine: sa.Engine, worker_id: str) -> datetime:
    with engine.connect() as conn:
        return conn.execute(sa.select(pipeline_workers.c.heartbeat_time)
                            .where(pipeline_workers.c.worker_id == worker_id)).scalar_one()


def test_rerun_of_a_batch_whose_staged_file_is_gone_says_so(own_store) -> None:
    settings, engine = own_store
    tenant = _tenant(engine)
    batch_id, staged = _batch(settings, engine, tenant, 0, finished=False)
    staged.write_bytes(b"not parquet")
    Pipeline(engine, settings.resolved_staging_dir, tenant_locks_for(engine)).process_pending()
    assert get_batch(engine, tenant, batch_id).progress == "FAILED"
    staged.unlink()  # as retention does after PIA_STAGED_RETENTION_DAYS

    result = CliRunner().invoke(main, ["pipeline", "rerun", batch_id], env={
        "PIA_DATA_DIR": str(settings.data_dir), "PIA_DATABASE_URL": settings.database_url})

    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == (
        f"batch {batch_id} cannot be rerun: its staged file {tenant}/{staged.name} is gone (staged files are "
        "removed 30 days after upload, PIA_STAGED_RETENTION_DAYS); upload the data again as a new batch")
    row = get_batch(engine, tenant, batch_id)
    assert row.progress == "FAILED" and row.error_message == "The staged batch file cannot be read."


def test_batch_rows_must_outlive_staged_files() -> None:
    with pytest.raises(ValueError, match="PIA_BATCH_RETENTION_DAYS must be at least PIA_STAGED_RETENTION_DAYS"):
        Settings(staged_retention_days=30, batch_retention_days=7)
