"""accept_batch when two uploads of one batch id race, or the database fails: nothing is half-stored."""

from datetime import UTC, datetime

import pytest
import sqlalchemy as sa

from contracts.errors import BatchIdReused
from db.batches import get_batch
from db.tenants import create_tenant
from ingest import accept as accept_module
from ingest.accept import accept_batch
from tests.batches import body, envelope, forecast_item, new_batch_id


def _accept(engine, staging_dir, tenant, batch_id, sku):
    raw, headers = body(envelope([forecast_item(sku)]))
    return accept_batch(engine, staging_dir, tenant, batch_id, "SALES_FORECAST", body=raw,
                        content_type=headers["Content-Type"], content_encoding=headers["Content-Encoding"],
                        now=datetime.now(UTC))


@pytest.mark.parametrize("same_body", [True, False])
def test_the_loser_of_a_race_keeps_nothing_of_its_own(engine, settings, monkeypatch, same_body) -> None:
    tenant = create_tenant(engine, "race", is_test=True)
    staging = settings.resolved_staging_dir
    batch_id = new_batch_id()
    _accept(engine, staging, tenant, batch_id, "100001")
    # The loser looked before the winner recorded its row: its first lookup misses, as in a real race.
    lookups = []

    def racing_get_batch(*args):
        lookups.append(args)
        return None if len(lookups) == 1 else get_batch(*args)

    monkeypatch.setattr(accept_module, "get_batch", racing_get_batch)
    if same_body:
        assert _accept(engine, staging, tenant, batch_id, "100001").created is False
    else:
        with pytest.raises(BatchIdReused):
            _accept(engine, staging, tenant, batch_id, "100002")
    assert len(lookups) == 2  # the race path was taken: a miss, then the winner's row
    staged = [f"{tenant}/{path.name}" for path in (staging / tenant).iterdir()]
    assert staged == [get_batch(engine, tenant, batch_id).staged_path]


def test_an_upload_the_database_fails_to_record_leaves_no_file(engine, settings, monkeypatch) -> None:
    tenant = create_tenant(engine, "record fails", is_test=True)

    def database_gone(*args, **kwargs):
        raise sa.exc.OperationalError("INSERT INTO batches", {}, ConnectionError("server closed the connection"))

    monkeypatch.setattr(accept_module, "record_batch", database_gone)  # a real outage cannot be timed here
    batch_id = new_batch_id()
    with pytest.raises(sa.exc.OperationalError):
        _accept(engine, settings.resolved_staging_dir, tenant, batch_id, "100001")
    assert get_batch(engine, tenant, batch_id) is None
    assert not list((settings.resolved_staging_dir / tenant).iterdir())  # staged, then removed
