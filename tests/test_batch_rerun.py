"""Rerunning a FAILED demand planning batch through the admin API, on both backends: what `pia pipeline rerun` does
(the same function), answered in the API's error shapes; the console's "rerun" is this operation."""

from typing import Any

import pytest

from contracts.admin import RerunRefusedError
from contracts.demand_planning_models import BatchStatus
from contracts.models import NotFoundError
from db.batches import get_batch
from db.ids import new_id
from serving.admin import issue_client
from tests.batches import failed_batch
from tests.conftest import bearer, get_token, wait_for


@pytest.fixture
def admin(engine, http, shared_world) -> dict[str, Any]:
    client_id, secret = issue_client(engine, shared_world["id"], "rerun admin", "admin", None, ())
    client = {"clientId": client_id, "clientSecret": secret, "scope": "admin", "resource": None, "permissions": []}
    return {"headers": bearer(get_token(http, shared_world, client)),
            "base": f"/admin/v1/tenants/{shared_world['id']}/batches"}


def test_a_failed_batch_is_processed_again_and_completes(settings, engine, server, http, shared_world, admin) -> None:
    batch_id = failed_batch(settings, engine, shared_world["id"], "2026-11-20T02:00:00Z")

    answer = http.post(f"{admin['base']}/{batch_id}/rerun", headers=admin["headers"])

    assert answer.status_code == 202, answer.text
    status = BatchStatus.model_validate(answer.json())
    assert status.batchId == batch_id and status.progress != "FAILED" and status.errorMessage is None
    row = wait_for(lambda: (row := get_batch(engine, shared_world["id"], batch_id)).progress == "COMPLETED" and row,
                   30, "the rerun batch to complete")
    assert row.applied_count + row.superseded_count == 1 and row.attempts == 1


def test_a_batch_that_is_not_failed_is_refused_and_left_alone(settings, engine, server, http, shared_world,
                                                              admin) -> None:
    batch_id = failed_batch(settings, engine, shared_world["id"], "2026-11-20T03:00:00Z")
    assert http.post(f"{admin['base']}/{batch_id}/rerun", headers=admin["headers"]).status_code == 202
    wait_for(lambda: get_batch(engine, shared_world["id"], batch_id).progress == "COMPLETED", 30, "completion")

    again = http.post(f"{admin['base']}/{batch_id}/rerun", headers=admin["headers"])

    assert again.status_code == 409
    assert RerunRefusedError.model_validate(again.json()).error == "BATCH_NOT_FAILED"
    assert f"batch {batch_id} is COMPLETED, not FAILED" in again.json()["message"]
    assert get_batch(engine, shared_world["id"], batch_id).progress == "COMPLETED"


def test_a_batch_whose_staged_file_is_gone_cannot_be_rerun(settings, engine, server, http, shared_world,
                                                           admin) -> None:
    batch_id = failed_batch(settings, engine, shared_world["id"], "2026-11-20T04:00:00Z")
    (settings.resolved_staging_dir / get_batch(engine, shared_world["id"], batch_id).staged_path).unlink()

    answer = http.post(f"{admin['base']}/{batch_id}/rerun", headers=admin["headers"])

    assert answer.status_code == 409
    assert answer.json()["error"] == "STAGED_FILE_GONE" and "upload the data again" in answer.json()["message"]
    assert get_batch(engine, shared_world["id"], batch_id).progress == "FAILED"


def test_an_unknown_batch_or_another_tenants_is_not_found(settings, engine, server, http, shared_world,
                                                          shared_other_world, admin) -> None:
    others = failed_batch(settings, engine, shared_other_world["id"], "2026-11-20T05:00:00Z")
    for batch_id in (new_id(), others):
        answer = http.post(f"{admin['base']}/{batch_id}/rerun", headers=admin["headers"])
        assert answer.status_code == 404, answer.text
        assert NotFoundError.model_validate(answer.json())
    assert get_batch(engine, shared_other_world["id"], others).progress == "FAILED"
