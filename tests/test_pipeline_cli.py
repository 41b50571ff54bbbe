"""`pia pipeline status|process|rerun` on a data dir of their own, with their exit codes."""

import json
from datetime import UTC, datetime

import pytest
from click.testing import CliRunner

from db.batches import get_batch
from db.engine import create_engine
from db.migrate import upgrade
from db.schema import sales_forecasts
from ingest.accept import accept_batch
from serving.cli import main
from serving.demo import seed_demo_tenant
from settings import Settings
from tests.batches import body, envelope, forecast_item, new_batch_id


@pytest.fixture
def setup(tmp_path):
    settings = Settings(data_dir=tmp_path)
    engine = create_engine(settings)
    upgrade(engine)
    tenant = seed_demo_tenant(engine, "cli", is_test=True)["id"]

    def upload(sku: str) -> str:
        raw, headers = body(envelope([forecast_item(sku)]))
        return accept_batch(engine, settings.resolved_staging_dir, tenant, new_batch_id(), "SALES_FORECAST",
                            body=raw, content_type=headers["Content-Type"],
                            content_encoding=headers["Content-Encoding"], now=datetime.now(UTC)).batch.batch_id

    def pia(*args: str):
        return CliRunner().invoke(main, list(args), env={"PIA_DATA_DIR": str(tmp_path), "PIA_DATABASE_URL": ""})

    return settings, engine, tenant, upload, pia


def test_status_process_and_rerun(setup) -> None:
    settings, engine, tenant, upload, pia = setup
    good, broken = upload("100001"), upload("100002")
    assert json.loads(pia("pipeline", "status").stdout)["PENDING"] == 2

    staged = settings.resolved_staging_dir / get_batch(engine, tenant, broken).staged_path
    original = staged.read_bytes()
    staged.write_bytes(b"not parquet")  # a damaged staged file: a deterministic failure
    result = pia("pipeline", "process")
    assert result.exit_code == 1, result.output
    assert f"FAILED {tenant}/{broken}" in result.stderr
    counts = json.loads(pia("pipeline", "status").stdout)
    assert (counts["COMPLETED"], counts["FAILED"], counts["PENDING"]) == (1, 1, 0)
    failed = get_batch(engine, tenant, broken)
    assert failed.error_message and failed.applied_count is None

    assert pia("pipeline", "process").exit_code == 0  # nothing left to do

    staged.write_bytes(original)
    result = pia("pipeline", "rerun", broken)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["progress"] == "COMPLETED"
    assert get_batch(engine, tenant, broken).applied_count == 1
    assert get_batch(engine, tenant, good).progress == "COMPLETED"


@pytest.mark.parametrize("which", ["completed", "unknown"])
def test_rerun_refuses_what_is_not_failed(setup, which) -> None:
    _, _, _, upload, pia = setup
    batch_id = upload("100001")
    assert pia("pipeline", "process").exit_code == 0
    result = pia("pipeline", "rerun", batch_id if which == "completed" else new_batch_id())
    assert result.exit_code == 2
    assert ("not FAILED" if which == "completed" else "no batch") in result.stderr


def test_process_reports_a_batch_left_for_a_retry(setup) -> None:
    _, engine, tenant, upload, pia = setup
    upload("100001")
    assert pia("pipeline", "process").exit_code == 0
    again = upload("100001")  # writes the same held forecast
    writer = engine.connect()  # another writer holds that row: on DuckDB a write conflict, a transient failure
    writer.execute(sales_forecasts.update().where(sales_forecasts.c.tenant_id == tenant)
                   .values(modified_time=datetime.now(UTC)))
    try:
        result = pia("pipeline", "process")
    finally:
        writer.rollback()
        writer.close()
    assert result.exit_code == 1, result.output
    assert "processed 1 batch(es), 0 failed, 1 to be retried" in result.stderr
    assert f"RETRY {tenant}/{again}" in result.stderr
    row = get_batch(engine, tenant, again)
    assert (row.progress, row.attempts, row.error_message) == ("PROCESSING", 1, None) and row.retry_at is not None
