"""Demand planning over HTTP: every upload outcome, processing outcomes, held-data reads, tenant isolation."""

import gzip
from pathlib import Path

import pytest
import sqlalchemy as sa

from db.schema import batches
from tests.batches import body, envelope, forecast_item, new_batch_id, replenishment_item, wait_finished
from tests.conftest import bearer, client_of, get_token

pytestmark = pytest.mark.without_shop


@pytest.fixture
def planner(http, world):
    """(base path, auth headers) of the world's demand planning client."""
    token = get_token(http, world, client_of(world, "demand_planning"))
    return f"/v1/tenants/{world['id']}/demand_planning", bearer(token)


def _staged_files(settings, tenant_id: str) -> list[Path]:
    folder = settings.resolved_staging_dir / tenant_id
    return sorted(folder.glob("*.parquet")) if folder.exists() else []


def _batch_rows(engine, tenant_id: str) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(batches)
                            .where(batches.c.tenant_id == tenant_id)).scalar_one()


def _put(http, planner, kind: str, document: dict, batch_id: str | None = None, gzipped: bool = True):
    base, auth = planner
    raw, headers = body(document, gzipped)
    return http.put(f"{base}/{kind}/{batch_id or new_batch_id()}", content=raw, headers={**auth, **headers})


def test_valid_forecast_batch_is_accepted_staged_and_processed(http, planner, world, settings, engine) -> None:
    items = [forecast_item(f"1000{n:02d}") for n in range(1, 11)] + [forecast_item("100001", retail=None,
                                                                                   ecom="2001")]
    batch_id = new_batch_id()
    response = _put(http, planner, "sales_forecast_batches", envelope(items, batchIndex=1, batchTotal=2), batch_id)
    assert response.status_code == 202, response.text
    status = response.json()
    assert response.headers["Location"] == f"{planner[0]}/sales_forecast_batches/{batch_id}"
    assert status["batchId"] == batch_id and status["batchKind"] == "SALES_FORECAST"
    assert status["progress"] in {"PENDING", "PROCESSING", "COMPLETED"}
    assert (status["batchIndex"], status["batchTotal"], status["itemCount"]) == (1, 2, 11)
    assert status["receivedTime"].endswith("Z") and status["generatedAt"] == "2026-11-21T02:00:00Z"
    assert len(_staged_files(settings, world["id"])) == 1

    final = wait_finished(http, response.headers["Location"], planner[1])
    assert final["progress"] == "COMPLETED"
    assert final["counts"] == {"items": 11, "applied": 11, "superseded": 0, "locked": 0, "rejected": 0}
    assert final["startedTime"] and final["completedTime"] and final["rejectedItems"] == []

    held = http.get(f"{planner[0]}/sales_forecasts", headers=planner[1]).json()
    assert [(i["retailStoreNumber"], i["ecomStoreNumber"]) for i in held["items"]][0] == ("1001", None)
    assert held["items"][0]["quantities"] == ["1.5"] * 30


def test_same_id_same_body_is_200_and_stores_nothing_twice(http, planner, world, settings, engine) -> None:
    document = envelope([forecast_item("100001")])
    batch_id = new_batch_id()
    first = _put(http, planner, "sales_forecast_batches", document, batch_id, gzipped=True)
    assert first.status_code == 202
    wait_finished(http, first.headers["Location"], planner[1])
    again = _put(http, planner, "sales_forecast_batches", document, batch_id, gzipped=False)  # same content
    assert again.status_code == 200, again.text
    assert again.json()["progress"] == "COMPLETED" and again.json()["batchId"] == batch_id
    assert _batch_rows(engine, world["id"]) == 1 and len(_staged_files(settings, world["id"])) == 1


def test_same_id_different_body_is_409(http, planner, world, engine) -> None:
    batch_id = new_batch_id()
    assert _put(http, planner, "sales_forecast_batches", envelope([forecast_item("100001")]),
                batch_id).status_code == 202
    response = _put(http, planner, "sales_forecast_batches", envelope([forecast_item("100002")]), batch_id)
    assert response.status_code == 409 and response.json()["error"] == "BATCH_ID_REUSED"
    other_kind = _put(http, planner, "replenishment_parameter_batches", envelope([replenishment_item("100001")]),
                      batch_id)
    assert other_kind.status_code == 409
    assert _batch_rows(engine, world["id"]) == 1


def test_validation_errors_list_every_field_and_store_nothing(http, planner, world, settings, engine) -> None:
    items = [forecast_item("100001"), forecast_item("100002", quantity="-1"), forecast_item("100001")]
    items[0]["horizonEndDate"] = "2020-01-01"
    document = envelope(items)
    document["itemCount"] = 7
    response = _put(http, planner, "sales_forecast_batches", document)
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["error"] == "VALIDATION_ERROR" and "nothing was stored" in error["message"]
    found = {(e["path"], e["code"]) for e in error["details"]["errors"]}
    assert ("itemCount", "ITEM_COUNT_MISMATCH") in found
    assert ("items[0].horizonEndDate", "HORIZON_LENGTH_MISMATCH") in found
    assert ("items[1].quantities[0]", "INVALID_DECIMAL") in found
    assert any(path.startswith("items[2]") and code == "DUPLICATE_KEY_IN_BATCH" for path, code in found)
    item_error = next(e for e in error["details"]["errors"] if e["path"] == "items[1].quantities[0]")
    assert item_error["skuNumber"] == "100002" and item_error["retailStoreNumber"] == "1001"
    assert error["details"]["errorsTruncated"] is False
    assert _batch_rows(engine, world["id"]) == 0 and _staged_files(settings, world["id"]) == []


@pytest.mark.parametrize(("headers", "status"), [
    ({"Content-Type": "text/plain"}, 415),
    ({"Content-Type": "application/json", "Content-Encoding": "br"}, 415),
    ({"Content-Type": "application/json", "Content-Encoding": "gzip"}, 400),  # not gzip at all
])
def test_media_type_and_encoding(http, planner, headers, status) -> None:
    base, auth = planner
    response = http.put(f"{base}/sales_forecast_batches/{new_batch_id()}", content=b"{}", headers={**auth, **headers})
    assert response.status_code == status, response.text
    if status == 415:
        assert response.json()["error"] == "UNSUPPORTED_MEDIA_TYPE"


def test_limits_are_413_with_details(http, planner) -> None:
    base, auth = planner
    too_many = envelope([forecast_item(str(n), days=1) for n in range(20_001)])
    response = _put(http, planner, "sales_forecast_batches", too_many)
    assert response.status_code == 413
    assert response.json()["details"] == {"limit": "maxItemsPerBatch", "max": 20_000, "received": 20_001}

    bomb = gzip.compress(b" " * 5_000_000)  # 5 MB of nothing, ratio far over 100:1
    response = http.put(f"{base}/sales_forecast_batches/{new_batch_id()}", content=bomb,
                        headers={**auth, "Content-Type": "application/json", "Content-Encoding": "gzip"})
    assert response.status_code == 413 and response.json()["details"]["limit"] == "maxCompressionRatio"

    response = http.put(f"{base}/sales_forecast_batches/{new_batch_id()}", content=b" " * 10_000_001,
                        headers={**auth, "Content-Type": "application/json"})
    assert response.status_code == 413 and response.json()["details"]["limit"] == "maxRequestBytes"


def test_batch_id_must_be_a_uuid(http, planner) -> None:
    base, auth = planner
    raw, headers = body(envelope([forecast_item("100001")]))
    response = http.put(f"{base}/sales_forecast_batches/not-a-uuid", content=raw, headers={**auth, **headers})
    assert response.status_code == 400 and response.json()["details"]["errors"][0]["path"] == "batchId"


def test_unknown_fields_are_warnings(http, planner) -> None:
    items = [{**forecast_item("100001"), "colour": "red"}, {**forecast_item("100002"), "colour": "blue"}]
    response = _put(http, planner, "sales_forecast_batches", envelope(items, source="planner-x"))
    assert response.status_code == 202, response.text
    warnings = {w["field"]: w for w in response.json()["warnings"]}
    assert warnings["items[].colour"]["count"] == 2 and warnings["items[].colour"]["code"] == "UNKNOWN_FIELD"
    assert warnings["source"]["count"] == 1


def test_processing_rejections_are_reported_per_item(http, planner) -> None:
    items = [forecast_item("100001"), forecast_item("100002", retail="9999"), forecast_item("100003", retail="1004"),
             forecast_item("100004", retail=None, ecom="2002"), forecast_item("100005", retail=None, ecom="2999"),
             forecast_item("NOPE")]
    response = _put(http, planner, "sales_forecast_batches", envelope(items))
    final = wait_finished(http, response.headers["Location"], planner[1])
    assert final["progress"] == "COMPLETED_WITH_REJECTED_ITEMS"
    assert final["counts"] == {"items": 6, "applied": 1, "superseded": 0, "locked": 0, "rejected": 5}
    assert [(r["index"], r["code"]) for r in final["rejectedItems"]] == [
        (1, "UNKNOWN_RETAIL_STORE"), (2, "RETAIL_STORE_NOT_RELEASED"), (3, "ECOM_STORE_NOT_RELEASED"),
        (4, "UNKNOWN_ECOM_STORE"), (5, "UNKNOWN_SKU")]
    assert final["rejectedItems"][2]["ecomStoreNumber"] == "2002" and final["rejectedItemsTruncated"] is False


def test_older_run_is_superseded(http, planner) -> None:
    newer = _put(http, planner, "sales_forecast_batches", envelope([forecast_item("100001", quantity="2")],
                                                                   generated_at="2026-11-21T03:00:00+01:00"))
    wait_finished(http, newer.headers["Location"], planner[1])
    older = _put(http, planner, "sales_forecast_batches", envelope([forecast_item("100001", quantity="9")],
                                                                   generated_at="2026-11-20T03:00:00Z"))
    final = wait_finished(http, older.headers["Location"], planner[1])
    assert final["counts"]["superseded"] == 1 and final["progress"] == "COMPLETED"
    held = http.get(f"{planner[0]}/sales_forecasts?retailStoreNumber=1001", headers=planner[1]).json()["items"]
    assert held[0]["quantities"][0] == "2" and held[0]["generatedAt"] == "2026-11-21T02:00:00Z"


def test_replenishment_batch_outcomes(http, planner) -> None:
    # Demo data: 1001/100002 comes from the local assortment (AUTO); 1001/100001 is locked; 100010 is MANUAL in
    # the base assortment; 100051 is only in the local assortment, which store 1002 does not have.
    items = [replenishment_item("100002", reorder="3", maximum="12.5"), replenishment_item("NOPE"),
             replenishment_item("100002", store="9999"), replenishment_item("100001"),
             replenishment_item("100010", store="1003"), replenishment_item("100051", store="1002"),
             replenishment_item("100003", store="1004")]
    response = _put(http, planner, "replenishment_parameter_batches", envelope(items))
    assert response.status_code == 202, response.text
    final = wait_finished(http, response.headers["Location"], planner[1])
    assert final["batchKind"] == "REPLENISHMENT_PARAMETER"
    assert final["counts"] == {"items": 7, "applied": 1, "superseded": 0, "locked": 1, "rejected": 5}
    assert [(r["index"], r["code"]) for r in final["rejectedItems"]] == [
        (1, "UNKNOWN_SKU"), (2, "UNKNOWN_RETAIL_STORE"), (4, "REPLENISHMENT_TYPE_MANUAL"),
        (5, "SKU_NOT_IN_ASSORTMENT"), (6, "RETAIL_STORE_NOT_RELEASED")]
    held = http.get(f"{planner[0]}/replenishment_parameters?retailStoreNumber=1001&limit=5000",
                    headers=planner[1]).json()["items"]
    line = next(i for i in held if i["skuNumber"] == "100002")
    assert (line["reorderPoint"], line["maximumInventory"], line["parameterSource"]) == (
        "3", "12.5", "RETAIL_STORE_SPECIFIC")


def test_reorder_point_must_be_below_maximum(http, planner) -> None:
    response = _put(http, planner, "replenishment_parameter_batches",
                    envelope([replenishment_item("100001", reorder="5", maximum="5")]))
    assert response.status_code == 400
    assert response.json()["details"]["errors"][0]["code"] == "REORDER_POINT_NOT_BELOW_MAXIMUM"


def test_batch_status_is_tenant_scoped(http, planner, other_world) -> None:
    response = _put(http, planner, "sales_forecast_batches", envelope([forecast_item("100001")]))
    batch_id = response.json()["batchId"]
    other_token = get_token(http, other_world, client_of(other_world, "demand_planning"))
    other = f"/v1/tenants/{other_world['id']}/demand_planning"
    assert http.get(f"{other}/sales_forecast_batches/{batch_id}", headers=bearer(other_token)).status_code == 404
    assert http.get(f"{planner[0]}/replenishment_parameter_batches/{batch_id}",
                    headers=planner[1]).status_code == 404
    wait_finished(http, response.headers["Location"], planner[1])
    assert http.get(f"{other}/sales_forecasts", headers=bearer(other_token)).json()["items"] == []


def test_held_forecast_paging(http, planner) -> None:
    items = [forecast_item(f"1000{n:02d}", retail=store) for store in ("1001", "1002") for n in range(1, 6)]
    items += [forecast_item(f"1000{n:02d}", retail=None, ecom="2001") for n in range(1, 4)]
    wait_finished(http, _put(http, planner, "sales_forecast_batches", envelope(items)).headers["Location"],
                  planner[1])
    seen, cursor, pages = [], None, 0
    while True:
        query = f"?limit=2{'&cursor=' + cursor if cursor else ''}"
        page = http.get(f"{planner[0]}/sales_forecasts{query}", headers=planner[1]).json()
        stores = {(i["retailStoreNumber"], i["ecomStoreNumber"]) for i in page["items"]}
        assert len(stores) == 1  # a page never spans two stores
        seen += [(i["retailStoreNumber"] or "", i["ecomStoreNumber"] or "", i["skuNumber"]) for i in page["items"]]
        pages += 1
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert len(seen) == 13 and len(set(seen)) == 13
    assert [s[0] for s in seen[:10]] == ["1001"] * 5 + ["1002"] * 5 and seen[-1][1] == "2001"
    assert pages == 8  # 3 + 3 pages of retail stores (2, 2, 1 each), 2 pages of the eCom store


@pytest.mark.parametrize("query", ["retailStoreNumber=1001&ecomStoreNumber=2001", "limit=0", "limit=5001",
                                   "limit=abc", "cursor=%%%"])
def test_held_forecast_query_errors(http, planner, query) -> None:
    response = http.get(f"{planner[0]}/sales_forecasts?{query}", headers=planner[1])
    assert response.status_code == 400 and response.json()["error"] == "VALIDATION_ERROR"


@pytest.mark.parametrize("query", ["limit=5001", "modifiedSince=yesterday", "modifiedSince=2026-11-21T00:00:00"])
def test_replenishment_query_errors(http, planner, query) -> None:
    response = http.get(f"{planner[0]}/replenishment_parameters?{query}", headers=planner[1])
    assert response.status_code == 400


def test_modified_since_accepts_an_unencoded_plus(http, planner) -> None:
    response = http.get(f"{planner[0]}/replenishment_parameters?modifiedSince=2000-01-01T00:00:00+00:00",
                        headers=planner[1])
    assert response.status_code == 200 and response.json()["items"]


def test_store_lists(http, planner) -> None:
    retail = http.get(f"{planner[0]}/retail_stores", headers=planner[1]).json()["items"]
    ecom = http.get(f"{planner[0]}/ecom_stores", headers=planner[1]).json()["items"]
    assert [s["number"] for s in retail] == sorted(s["number"] for s in retail) and len(ecom) >= 2
    assert {"number", "name", "status"} <= set(retail[0])
    limits = http.get(f"{planner[0]}/limits", headers=planner[1]).json()
    assert (limits["maxItemsPerBatch"], limits["recommendedItemsPerBatch"], limits["maxHorizonDays"]) == (
        20_000, 5_000, 62)


def _batch_list(http, planner, kind: str, query: str = "") -> list[dict]:
    """Every batch of the list, following nextCursor."""
    statuses, cursor = [], None
    while True:
        page = http.get(f"{planner[0]}/{kind}?{query}{'&cursor=' + cursor if cursor else ''}",
                        headers=planner[1]).json()
        statuses += page["items"]
        if (cursor := page["nextCursor"]) is None:
            return statuses


def test_batch_lists_page_through_a_tenants_batches_in_received_order(http, planner, other_world) -> None:
    forecast_ids = []
    for n in range(5):
        response = _put(http, planner, "sales_forecast_batches",
                        envelope([forecast_item("100001"), forecast_item("999999")],
                                 generated_at=f"2026-11-2{n}T02:00:00Z"))
        forecast_ids.append(response.json()["batchId"])
    parameters = _put(http, planner, "replenishment_parameter_batches", envelope([replenishment_item("100001")]))
    final = wait_finished(http, f"{planner[0]}/sales_forecast_batches/{forecast_ids[-1]}", planner[1])

    listed = _batch_list(http, planner, "sales_forecast_batches", "limit=2")
    assert [status["batchId"] for status in listed] == forecast_ids  # received order, only this kind
    assert listed[-1] == final  # each item is the batch's status, as GET …/{batchId} shows it
    assert listed[-1]["rejectedItems"][0]["code"] == "UNKNOWN_SKU"
    assert [s["batchId"] for s in _batch_list(http, planner, "replenishment_parameter_batches")] \
        == [parameters.json()["batchId"]]

    since = listed[3]["receivedTime"]
    assert [s["batchId"] for s in _batch_list(http, planner, "sales_forecast_batches",
                                              f"receivedSince={since.replace('+', '%2B')}")] == forecast_ids[3:]
    other_token = get_token(http, other_world, client_of(other_world, "demand_planning"))
    other = f"/v1/tenants/{other_world['id']}/demand_planning/sales_forecast_batches"
    assert http.get(other, headers=bearer(other_token)).json() == {"items": [], "nextCursor": None}


@pytest.mark.parametrize(("query", "path"), [("limit=1001", "limit"), ("limit=0", "limit"),
                                             ("receivedSince=yesterday", "receivedSince"),
                                             ("receivedSince=2026-11-21T00:00:00", "receivedSince"),
                                             ("cursor=eyJ4IjoxfQ", "cursor")])
def test_batch_list_query_errors(http, planner, query, path) -> None:
    response = http.get(f"{planner[0]}/sales_forecast_batches?{query}", headers=planner[1])
    assert response.status_code == 400
    assert response.json()["details"]["errors"][0]["path"] == path
