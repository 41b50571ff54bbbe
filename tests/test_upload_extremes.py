"""Inputs that used to break the worker: extreme values through real HTTP, on both backends (Hypothesis).

No upload may answer 5xx, every accepted batch must complete (what the worker cannot store is refused at the
door, with its path), and after the run another tenant's batch still completes: no batch stops the pipeline.
"""

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts.limits import MAX_HORIZON_DAYS
from tests.batches import body, envelope, forecast_item, new_batch_id, replenishment_item, wait_finished
from tests.conftest import bearer, client_of, get_token
from tests.strategies import DECIMALS, KEYS, examples

TODAY = datetime.now(UTC).date()
ABSENT = object()
KINDS = {"SALES_FORECAST": "sales_forecast_batches", "REPLENISHMENT_PARAMETER": "replenishment_parameter_batches"}

# The demo's released retail stores and eCom store, SKUs in their assortments, so that batches are applied.
RETAIL, ECOM, SKUS = ["1001", "1003"], ["2001"], [f"1000{n:02d}" for n in range(1, 10)]

# Values at the edge that must be taken, and stored and processed as any other ...
EDGE_TIMESTAMPS = st.sampled_from([
    "0001-01-01T00:00:00Z", "0001-01-01T01:00:00+01:00", "0001-01-01T23:59:59-23:59", "9999-12-31T23:59:59.999999Z",
    "9999-12-31T22:59:59-01:00", "9999-12-31T00:00:00+23:59", "2026-11-21T02:00:00.1234567891Z"])
EDGE_BATCH_NUMBERS = st.sampled_from([(1, 1), (1, 2**31 - 1), (2**31 - 1, 2**31 - 1)])
EDGE_QUANTITIES = st.sampled_from(["0", "00000000000000.0000", "99999999999999.9999", "0.0001", "007.5"])
EDGE_HORIZONS = st.sampled_from([(TODAY, 1), (TODAY - timedelta(days=7), MAX_HORIZON_DAYS),
                                 (date(9999, 12, 31), 1), (date(9999, 12, 30), 2)])
# ... and values just past it, which must be refused with their path.
BROKEN_TIMESTAMPS = st.sampled_from([
    "0001-01-01T00:00:00+01:00", "0001-01-01T00:59:59.999999+01:00", "9999-12-31T23:59:59-01:00",
    "9999-12-31T23:00:00-00:01", "0001-01-01T00:00:00+23:59", "2026-11-21T02:00:00+24:00", "2026-11-21T24:00:00Z"])
EXTREME_INTEGERS = st.sampled_from([0, -1, 2**31, 2**53, 2**63 - 1, 2**63, 2**64 - 1, -(2**63)])
BROKEN_HORIZONS = st.sampled_from([(TODAY - timedelta(days=8), 1), (date(1, 1, 1), 1), (TODAY, MAX_HORIZON_DAYS + 1),
                                   (date(9999, 12, 31), 2)])
FIELD_NAMES = st.one_of(st.sampled_from(["colour", "a\x00b", "x" * 300, "", "\u3000", "items"]), st.text(max_size=10))
# What an upload breaks: nothing (a valid batch at the edges), or one thing (a batch the checker must refuse).
BROKEN = st.sampled_from([None, None, None, "generatedAt", "batchIndex", "itemCount", "key", "quantity", "horizon"])


def _horizon_end(start: date, days: int) -> str:
    try:
        return (start + timedelta(days=days - 1)).isoformat()
    except OverflowError:  # past the last calendar day
        return "9999-12-31"


class Upload:
    def __init__(self, draw: st.DrawFn) -> None:
        self.draw, self.broken = draw, draw(BROKEN)

    def value(self, name: str, edge: st.SearchStrategy[Any], broken: st.SearchStrategy[Any]) -> Any:
        """A value at the edge, or one past it where this upload breaks `name` (at least the first time)."""
        if self.broken == name and self.draw(st.booleans()):
            return self.draw(broken)
        return self.draw(edge)

    def forecast(self) -> list[dict[str, Any]]:
        items = []
        for store, sku in self.draw(st.lists(st.tuples(st.sampled_from(RETAIL + ECOM), st.sampled_from(SKUS)),
                                             min_size=1, max_size=3, unique=True)):
            start, days = self.value("horizon", EDGE_HORIZONS, BROKEN_HORIZONS)
            items.append({
                "ecomStoreNumber" if store in ECOM else "retailStoreNumber": self.value("key", st.just(store), KEYS),
                "skuNumber": self.value("key", st.just(sku), KEYS), "horizonStartDate": start.isoformat(),
                "horizonEndDate": _horizon_end(start, days),
                "quantities": self.value("quantity", st.lists(EDGE_QUANTITIES, min_size=days, max_size=days),
                                         st.lists(DECIMALS, min_size=days, max_size=days))})
        return items

    def replenishment(self) -> list[dict[str, Any]]:
        pairs = self.draw(st.lists(st.tuples(st.sampled_from(RETAIL), st.sampled_from(SKUS)), min_size=1,
                                   max_size=3, unique=True))
        return [{"retailStoreNumber": self.value("key", st.just(store), KEYS),
                 "skuNumber": self.value("key", st.just(sku), KEYS),
                 "reorderPoint": self.value("quantity", st.sampled_from(["0", "00000000000000.0000", "0.0001"]),
                                            DECIMALS),
                 "maximumInventory": self.value("quantity", st.sampled_from(["99999999999999.9999", "007.5"]),
                                                DECIMALS)}
                for store, sku in pairs]


@st.composite
def uploads(draw: st.DrawFn) -> tuple[str, dict[str, Any], bool]:
    upload = Upload(draw)
    kind = draw(st.sampled_from(list(KINDS)))
    items = upload.forecast() if kind == "SALES_FORECAST" else upload.replenishment()
    for item in items:
        item.update(draw(st.dictionaries(FIELD_NAMES, st.just(1), max_size=2)))
    document: dict[str, Any] = {"generatedAt": upload.value("generatedAt", EDGE_TIMESTAMPS, BROKEN_TIMESTAMPS),
                                "itemCount": upload.value("itemCount", st.just(len(items)), EXTREME_INTEGERS),
                                "items": items}
    if draw(st.booleans()) or upload.broken == "batchIndex":
        document["batchIndex"], document["batchTotal"] = upload.value(
            "batchIndex", EDGE_BATCH_NUMBERS, st.tuples(EXTREME_INTEGERS, EXTREME_INTEGERS))
    document.update(draw(st.dictionaries(FIELD_NAMES, st.just({"nested": [None]}), max_size=3)))
    return kind, document, draw(st.booleans())


def _known(kind: str = "SALES_FORECAST", items: list[dict[str, Any]] | None = None, **fields: Any) -> tuple:
    if items is None:
        items = [forecast_item("100001", days=1, start=date(9999, 12, 31)), forecast_item("100002", ecom="2001",
                 retail=None, days=MAX_HORIZON_DAYS, start=TODAY - timedelta(days=7), quantity="99999999999999.9999")]
    return kind, envelope(items, **{"generated_at": "2026-11-21T02:00:00Z", **fields}), True


# The inputs an attack run found, and their neighbours that must be taken, whatever Hypothesis draws.
KNOWN = [
    _known(generated_at="0001-01-01T00:00:00+01:00"), _known(generated_at="9999-12-31T23:59:59-01:00"),
    _known(batchIndex=1, batchTotal=2**31), _known(batchIndex=2**63, batchTotal=2**63),
    _known(items=[forecast_item("1000\x0001")]), _known(items=[forecast_item("100001", retail=" 1001")]),
    _known(generated_at="0001-01-01T00:00:00Z", batchIndex=2**31 - 1, batchTotal=2**31 - 1),
    _known(generated_at="9999-12-31T23:59:59.999999Z", **{f"unknown{n}\x00": n for n in range(150)}),
    _known("REPLENISHMENT_PARAMETER", [replenishment_item("100001", reorder="00000000000000.0000",
                                                          maximum="99999999999999.9999")]),
]


@pytest.fixture
def planner(http, world) -> tuple[str, dict[str, str]]:
    token = get_token(http, world, client_of(world, "demand_planning"))
    return f"/v1/tenants/{world['id']}/demand_planning", bearer(token)


def test_extreme_uploads_never_answer_5xx_and_never_stop_the_pipeline(http, planner, other_world) -> None:
    base, auth = planner
    accepted: list[str] = []

    @examples(*KNOWN)
    @given(uploads())
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    def never_a_server_error(upload: tuple[str, dict[str, Any], bool]) -> None:
        kind, document, gzipped = upload
        raw, headers = body(document, gzipped)
        response = http.put(f"{base}/{KINDS[kind]}/{new_batch_id()}", content=raw, headers={**auth, **headers})
        assert response.status_code in {202, 400, 413}, response.text
        if response.status_code == 202:
            accepted.append(response.headers["Location"])
        else:
            assert response.json()["error"] in {"VALIDATION_ERROR", "BAD_REQUEST", "LIMIT_EXCEEDED"}

    never_a_server_error()
    assert len(accepted) >= 5, "too few generated uploads were valid to test the worker"
    for location in accepted:
        final = wait_finished(http, location, auth, timeout=60)
        assert final["progress"] in {"COMPLETED", "COMPLETED_WITH_REJECTED_ITEMS"}, final

    other_base = f"/v1/tenants/{other_world['id']}/demand_planning"
    other_auth = bearer(get_token(http, other_world, client_of(other_world, "demand_planning")))
    raw, headers = body(envelope([forecast_item("100001")]))
    response = http.put(f"{other_base}/sales_forecast_batches/{new_batch_id()}", content=raw,
                        headers={**other_auth, **headers})
    assert response.status_code == 202, response.text
    assert wait_finished(http, response.headers["Location"], other_auth)["progress"] == "COMPLETED"
