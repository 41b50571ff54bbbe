"""/metrics after real traffic, read with prometheus_client's parser: requests by route template (never a raw
path or id), the queues read from the database, event delivery per eCom store, the process; and a scrape that
cannot reach the database still answers."""

import sys
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import httpx
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from db.batches import StagedBatch, mark_processing, record_batch
from db.engine import create_engine
from db.ids import new_id, utc_now
from db.schema import orders
from serving.app import create_app
from serving.metrics import METHODS, ServerMetrics
from settings import Settings
from tests.batches import body, envelope, forecast_item, new_batch_id, wait_finished
from tests.conftest import bearer, client_of, free_port
from tests.prometheus import samples
from tests.served_process import clean_environment, running

PIA = Path(sys.executable).parent / "pia"

REQUESTS = "pia_http_request_duration_seconds"
LIMITS = "/v1/tenants/<tenantId>/demand_planning/limits"
BATCH = "/v1/tenants/<tenantId>/demand_planning/sales_forecast_batches/<batchId>"


def requests_counted(text: str, route: str, method: str, status: int) -> float:
    return samples(text)[f"{REQUESTS}_count"].get(
        frozenset({("route", route), ("method", method), ("status", str(status))}), 0)


def test_a_scrape_after_real_traffic_counts_requests_by_route_template(settings, engine, http, shared_world,
                                                                       cached_token) -> None:
    token = cached_token(shared_world, client_of(shared_world, "demand_planning"))
    base = f"/v1/tenants/{shared_world['id']}/demand_planning"
    before = http.get("/metrics").text
    for _ in range(3):
        assert http.get(f"{base}/limits", headers=bearer(token)).status_code == 200
    assert http.get(f"{base}/limits").status_code == 401
    batch_id = new_batch_id()
    content, headers = body(envelope([forecast_item("100001")]))
    accepted = http.put(f"{base}/sales_forecast_batches/{batch_id}", content=content,
                        headers=headers | bearer(token))
    assert accepted.status_code == 202, accepted.text
    wait_finished(http, f"{base}/sales_forecast_batches/{batch_id}", bearer(token))
    stray = new_id()
    assert http.get(f"/no/such/{stray}").status_code == 404
    assert http.request("BREW", f"{base}/limits").status_code == 405

    answer = http.get("/metrics")
    assert answer.status_code == 200 and answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    after = answer.text
    # The in-process pipeline observed the batch: its wait for the first attempt, and the attempt that completed it
    # (at least: batches of earlier tests may still be finishing).
    for name, labels in (("pia_batch_wait_seconds_count", {("kind", "SALES_FORECAST")}),
                         ("pia_batch_attempt_seconds_count", {("kind", "SALES_FORECAST"), ("progress", "COMPLETED")})):
        assert samples(after)[name][frozenset(labels)] - samples(before).get(name, {}).get(frozenset(labels), 0) >= 1
    counted = {(route, method, status): requests_counted(after, route, method, status) -
               requests_counted(before, route, method, status)
               for route, method, status in [(LIMITS, "GET", 200), (LIMITS, "GET", 401), (BATCH, "PUT", 202),
                                             ("unmatched", "GET", 404), ("unmatched", "OTHER", 405)]}
    assert counted == {(LIMITS, "GET", 200): 3, (LIMITS, "GET", 401): 1, (BATCH, "PUT", 202): 1,
                       ("unmatched", "GET", 404): 1, ("unmatched", "OTHER", 405): 1}
    found = samples(after)
    # Bounded: every route label is a rule of the app's URL map (or "unmatched"); no id made it into a label.
    labels = [dict(key) for key in found[f"{REQUESTS}_count"]]
    assert {label["route"] for label in labels} <= app_routes(settings, engine)
    assert not [value for key in found[f"{REQUESTS}_bucket"] for _, value in key
                if shared_world["id"] in value or batch_id in value or stray in value]
    # The histogram's buckets add up: the +Inf bucket holds every request of its series.
    for key, count in found[f"{REQUESTS}_count"].items():
        assert found[f"{REQUESTS}_bucket"][key | {("le", "+Inf")}] == count
    assert found["pia_database_figures_up"][frozenset()] == 1
    for store in shared_world["ecomStores"]:
        assert frozenset({("tenant_id", shared_world["id"]), ("ecom_store_id", store["id"])}) \
            in found["pia_event_backlog"]
    for gauge in ("pia_batches_waiting", "pia_batches_applying", "pia_orders_waiting",
                  "pia_batches_waiting_oldest_age_seconds", "pia_orders_waiting_oldest_age_seconds",
                  "process_cpu_seconds_total", "process_resident_memory_bytes", "python_gc_collections_total"):
        assert gauge in found, gauge


ANY_METHOD = st.sampled_from(sorted(METHODS)) | st.from_regex(r"[A-Z]{1,12}", fullmatch=True)
ANY_PATH = st.lists(st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=40),
                    max_size=6).map(lambda segments: "/" + "/".join(quote(s, safe="") for s in segments))
KNOWN_PREFIXES = st.sampled_from(["", "/v1/tenants/{tenant}/demand_planning", "/admin/v1/tenants/{tenant}",
                                  "/v1/tenants/{tenant}/ecom_stores/{tenant}", "/oauth2"])


@hypothesis_settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(method=ANY_METHOD, prefix=KNOWN_PREFIXES, path=ANY_PATH)
def test_whatever_is_asked_the_labels_stay_templates_and_known_methods(settings, engine, http, shared_world,
                                                                        method, prefix, path) -> None:
    """Cardinality stays bounded: any path and method a caller sends ends as a route template of the app (or
    `unmatched`) and a known method (or `OTHER`), never as its own series."""
    answer = http.request(method, prefix.format(tenant=shared_world["id"]) + path)
    assert answer.status_code < 500, answer.text
    labels = [dict(key) for key in samples(http.get("/metrics").text)[f"{REQUESTS}_count"]]
    assert {label["route"] for label in labels} <= app_routes(settings, engine)
    assert {label["method"] for label in labels} <= METHODS | {"OTHER"}


_ROUTES: dict[str, set[str]] = {}


def app_routes(settings, engine) -> set[str]:
    """The route templates of the app's URL map, and `unmatched`."""
    if settings.resolved_database_url not in _ROUTES:
        app = create_app(settings, engine, "http://pia")
        _ROUTES[settings.resolved_database_url] = {rule.rule for rule in app.url_map.iter_rules()} | {"unmatched"}
    return _ROUTES[settings.resolved_database_url]

def test_the_queues_and_their_oldest_ages_are_read_from_the_database(own_store) -> None:
    settings, engine = own_store
    now = utc_now()
    tenant_id = new_id()
    staged = StagedBatch("0" * 64, "none.parquet", now, None, None, 1, [])
    for batch_id, received in (("waiting", now - timedelta(minutes=2)), ("applying", now - timedelta(minutes=9))):
        assert record_batch(engine, tenant_id, batch_id, "SALES_FORECAST", staged, received)
    mark_processing(engine, tenant_id, ["applying"], now - timedelta(minutes=1))
    with engine.begin() as conn:  # an order no processor has opened (none runs on this store)
        conn.execute(orders.insert().values(
            id=new_id(), tenant_id=tenant_id, ecom_store_id=new_id(), number="100001", external_order_id="e1",
            external_order_number="n1", customer_id=new_id(), status="RECEIVED", order_date=now - timedelta(minutes=5),
            delivery_date=now.date(), currency_iso_code="NOK", delivery_address="{}", gross_amount=1, vat_amount=0,
            modified_time=now))

    found = samples(ServerMetrics(engine).exposition().decode())

    def gauge(name: str) -> float:
        return found[name][frozenset()]

    assert (gauge("pia_batches_waiting"), gauge("pia_batches_applying"), gauge("pia_orders_waiting")) == (1, 1, 1)
    # At least the ages set above; the upper bounds only guard against a wrong column (generous: a loaded machine).
    assert 120 <= gauge("pia_batches_waiting_oldest_age_seconds") < 120 + 300
    assert 60 <= gauge("pia_batches_applying_oldest_age_seconds") < 60 + 300
    assert 300 <= gauge("pia_orders_waiting_oldest_age_seconds") < 300 + 300


def test_a_scrape_without_the_database_still_answers_with_the_process_metrics(tmp_path) -> None:
    unreachable = Settings(data_dir=tmp_path, database_url="postgresql+psycopg://pia@127.0.0.1:1/pia")
    engine = create_engine(unreachable)
    try:
        found = samples(ServerMetrics(engine).exposition().decode())
    finally:
        engine.dispose()
    assert found["pia_database_figures_up"][frozenset()] == 0
    assert "pia_batches_waiting" not in found
    assert "process_cpu_seconds_total" in found



def test_a_worker_serves_its_own_metrics(tmp_path) -> None:
    """`pia worker` has no HTTP server of its own: with PIA_WORKER_METRICS_PORT it answers Prometheus on that port
    (its process and the batch timings of its pipeline)."""
    port = free_port()
    environment = clean_environment(PIA_DATA_DIR=str(tmp_path), PIA_WORKER_METRICS_PORT=str(port))
    with running([str(PIA), "worker"], environment, tmp_path, tmp_path / "worker.log", f"http://127.0.0.1:{port}/"):
        text = httpx.get(f"http://127.0.0.1:{port}/").text
    kinds = {family.name: family.type for family in text_string_to_metric_families(text)}
    assert kinds["pia_batch_attempt_seconds"] == kinds["pia_batch_wait_seconds"] == "histogram"
    assert kinds["process_cpu_seconds"] == "counter" and "process_resident_memory_bytes" in kinds
