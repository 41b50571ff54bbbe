"""Operating event delivery, on both backends: the delivery state and dead letters of an eCom store through the
admin API and `pia admin events`, replaying dead letters, and the backlog as Prometheus gauges at /metrics.

Outbox rows are written with db/outbox.py's writers and then marked delivered, published or dead-lettered with
plain UPDATEs, as the relay and the bridge would."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from contracts import events
from contracts.admin import DeadLetters, EventDeliveryState, ReplayReport
from db.ids import new_id, utc_now
from db.outbox import order_event
from db.schema import ecom_stores, event_delivery_state, event_outbox
from db.tenants import create_tenant
from serving.admin import issue_client
from serving.cli import main
from serving.demo import seed_demo_tenant
from tests.conftest import bearer, client_of, get_token
from tests.prometheus import samples

NOW = datetime(2026, 11, 21, 2, 0, tzinfo=UTC)
OLDEST = NOW - timedelta(seconds=90)


@pytest.fixture
def world(engine) -> dict[str, Any]:
    """A demo tenant, its seeding's events taken out of the outbox: these tests count the rows they write."""
    world = seed_demo_tenant(engine, f"event operations {new_id()}", is_test=False, shop=False)
    with engine.begin() as conn:
        conn.execute(event_outbox.delete().where(event_outbox.c.tenant_id == world["id"]))
    return world


@pytest.fixture
def admin(engine, http, world) -> dict[str, Any]:
    client_id, secret = issue_client(engine, world["id"], "events admin", "admin", None, ())
    client = {"clientId": client_id, "clientSecret": secret, "scope": "admin", "resource": None, "permissions": []}
    return {"headers": bearer(get_token(http, world, client)), "base": f"/admin/v1/tenants/{world['id']}"}


def _write(engine: sa.Engine, tenant_id: str, ecom_store_id: str, count: int) -> list[str]:
    """`count` OrderCreated events to the store, through the outbox writer; their event ids in order written."""
    with engine.begin() as conn:
        for _ in range(count):
            order_event(conn, tenant_id, ecom_store_id, events.ORDER_CREATED, new_id())
        return list(conn.scalars(sa.select(event_outbox.c.event_id).where(
            event_outbox.c.tenant_id == tenant_id, event_outbox.c.ecom_store_id == ecom_store_id)
            .order_by(event_outbox.c.event_id)))


def _mark(engine: sa.Engine, event_ids: list[str], **values: Any) -> None:
    with engine.begin() as conn:
        conn.execute(event_outbox.update().where(event_outbox.c.event_id.in_(event_ids)).values(**values))


def _dead(minutes: int, answer: str = "503") -> dict[str, Any]:
    return {"dead_letter_time": NOW + timedelta(minutes=minutes), "attempts": 8,
            "last_error": f"HTTP {answer} #{minutes}", "last_answer": answer, "published_time": NOW}


def _rows(engine: sa.Engine, event_ids: list[str]) -> dict[str, tuple]:
    with engine.connect() as conn:
        return {row[0]: tuple(row[1:]) for row in conn.execute(sa.select(
            event_outbox.c.event_id, event_outbox.c.published_time, event_outbox.c.delivered_time,
            event_outbox.c.attempts, event_outbox.c.last_error, event_outbox.c.dead_letter_time)
            .where(event_outbox.c.event_id.in_(event_ids)))}


@pytest.fixture
def traffic(engine, world) -> dict[str, Any]:
    """Store A: 6 events, 1 delivered, 1 published only (its change made at OLDEST), 3 dead letters (two answered
    503, one 410; backlog 2), and the bridge's record; store B: 2 events, neither delivered (backlog 2), no
    record."""
    store_a, store_b = sorted(store["id"] for store in world["ecomStores"])[:2]
    a, b = _write(engine, world["id"], store_a, 6), _write(engine, world["id"], store_b, 2)
    _mark(engine, [a[0]], published_time=NOW, delivered_time=NOW)
    _mark(engine, [a[1]], published_time=NOW, datetime=OLDEST)
    for index, answer in ((2, "503"), (3, "410"), (4, "503")):
        _mark(engine, [a[index]], **_dead(index, answer))
    with engine.begin() as conn:
        conn.execute(event_delivery_state.insert().values(
            tenant_id=world["id"], ecom_store_id=store_a, last_delivered_event_id=a[0], last_delivered_time=NOW,
            consecutive_failures=3, last_error="credentials refused (401)", last_failure_time=NOW,
            credentials_refused=True, lanes_in_backoff=2, modified_time=NOW))
    return {"a": store_a, "b": store_b, "a_events": a, "b_events": b}


# --- delivery state -----------------------------------------------------------------------------------------

def test_delivery_state_counts_the_backlog_and_dead_letters_of_each_store(engine, http, admin, traffic) -> None:
    asked = utc_now()
    answer = http.get(f"{admin['base']}/ecom_stores/{traffic['a']}/event_delivery", headers=admin["headers"])
    assert answer.status_code == 200, answer.text
    assert EventDeliveryState.model_validate(answer.json())
    state = answer.json()
    age = state.pop("oldestUndeliveredAgeSeconds")
    assert (asked - OLDEST).total_seconds() <= age <= (utc_now() - OLDEST).total_seconds() + 0.001
    assert state == {
        "ecomStoreId": traffic["a"], "backlog": 2, "deadLetters": 3, "deadLettersByAnswer": {"410": 1, "503": 2},
        "oldestUndeliveredTime": "2026-11-21T01:58:30Z", "lanesInBackoff": 2,
        "lastDeliveredEventId": traffic["a_events"][0],
        "lastDeliveredTime": "2026-11-21T02:00:00Z", "consecutiveFailures": 3,
        "lastError": "credentials refused (401)", "lastFailureTime": "2026-11-21T02:00:00Z",
        "credentialsRefused": True}
    untouched = http.get(f"{admin['base']}/ecom_stores/{traffic['b']}/event_delivery", headers=admin["headers"])
    state = untouched.json()
    assert state.pop("oldestUndeliveredAgeSeconds") >= 0 and state.pop("oldestUndeliveredTime") is not None
    assert state == {
        "ecomStoreId": traffic["b"], "backlog": 2, "deadLetters": 0, "deadLettersByAnswer": {}, "lanesInBackoff": 0,
        "lastDeliveredEventId": None, "lastDeliveredTime": None, "consecutiveFailures": 0, "lastError": None,
        "lastFailureTime": None, "credentialsRefused": False}
    _mark(engine, traffic["b_events"], published_time=NOW, delivered_time=NOW)
    nothing = http.get(f"{admin['base']}/ecom_stores/{traffic['b']}/event_delivery", headers=admin["headers"]).json()
    assert (nothing["backlog"], nothing["oldestUndeliveredTime"], nothing["oldestUndeliveredAgeSeconds"]) == (
        0, None, None)


# --- dead letters -------------------------------------------------------------------------------------------

def test_dead_letters_are_listed_newest_first_page_by_page(http, admin, traffic) -> None:
    url, a = f"{admin['base']}/ecom_stores/{traffic['a']}/dead_letters", traffic["a_events"]
    first = http.get(url, params={"limit": 2}, headers=admin["headers"])
    assert first.status_code == 200, first.text
    page = DeadLetters.model_validate(first.json())
    assert [item.eventId for item in page.items] == [a[4], a[3]] and page.nextAfter == a[3]
    assert first.json()["items"][0] == {
        "eventId": a[4], "subject": "OrderCreated", "entityId": first.json()["items"][0]["entityId"],
        "datetime": first.json()["items"][0]["datetime"], "attempts": 8, "lastError": "HTTP 503 #4",
        "deadLetterTime": "2026-11-21T02:04:00Z"}
    last = http.get(url, params={"limit": 2, "after": page.nextAfter}, headers=admin["headers"]).json()
    assert [item["eventId"] for item in last["items"]] == [a[2]] and last["nextAfter"] is None
    whole = http.get(url, headers=admin["headers"]).json()
    assert [item["eventId"] for item in whole["items"]] == [a[4], a[3], a[2]] and whole["nextAfter"] is None
    none = http.get(f"{admin['base']}/ecom_stores/{traffic['b']}/dead_letters", headers=admin["headers"])
    assert none.json() == {"items": [], "nextAfter": None}
    by_answer = http.get(url, params={"answer": "410 #3"}, headers=admin["headers"]).json()
    assert [item["eventId"] for item in by_answer["items"]] == [a[3]] and by_answer["nextAfter"] is None
    paged = http.get(url, params={"answer": "HTTP ", "limit": 1, "after": a[4]}, headers=admin["headers"]).json()
    assert [item["eventId"] for item in paged["items"]] == [a[3]] and paged["nextAfter"] == a[3]
    # The text is matched as written: LIKE's wildcards in it match only themselves.
    assert http.get(url, params={"answer": "HTTP%503"}, headers=admin["headers"]).json()["items"] == []
    for limit in ("0", "abc", "5001"):
        refused = http.get(url, params={"limit": limit}, headers=admin["headers"])
        assert refused.status_code == 400, (limit, refused.text)
        assert refused.json()["details"]["errors"][0]["path"] == "limit"
    refused = http.get(url, params={"answer": "x" * 201}, headers=admin["headers"])
    assert refused.status_code == 400 and refused.json()["details"]["errors"][0]["path"] == "answer"


def test_replay_clears_exactly_the_dead_letters_named_then_all_of_the_store(engine, http, admin, traffic) -> None:
    url, a, b = f"{admin['base']}/ecom_stores/{traffic['a']}/dead_letters/replay", traffic["a_events"], \
        traffic["b_events"]
    before = _rows(engine, a + b)
    # The delivered, the published and another store's events are named too: they are not this store's dead letters.
    one = http.post(url, json={"eventIds": [a[3], a[0], a[1], b[0], new_id()]}, headers=admin["headers"])
    assert one.status_code == 200, one.text
    assert ReplayReport.model_validate(one.json()).replayed == 1
    after = _rows(engine, a + b)
    assert after[a[3]] == (None, None, 0, None, None)
    assert {event: row for event, row in after.items() if event != a[3]} == \
        {event: row for event, row in before.items() if event != a[3]}

    state = http.get(f"{admin['base']}/ecom_stores/{traffic['a']}/event_delivery", headers=admin["headers"]).json()
    assert (state["backlog"], state["deadLetters"]) == (3, 2)
    assert http.post(url, json={"eventIds": []}, headers=admin["headers"]).json() == {"replayed": 0}
    assert http.post(url, json={}, headers=admin["headers"]).json() == {"replayed": 2}
    assert all(_rows(engine, [a[2], a[4]])[event] == (None, None, 0, None, None) for event in (a[2], a[4]))
    assert _rows(engine, [a[0], a[1]]) == {a[0]: before[a[0]], a[1]: before[a[1]]}
    assert http.post(url, json={}, headers=admin["headers"]).json() == {"replayed": 0}

    for body, status in ((b"", 400), (b"[1]", 400), (b'{"eventIds": "x"}', 400)):
        refused = http.post(url, content=body, headers={**admin["headers"], "Content-Type": "application/json"})
        assert refused.status_code == status, (body, refused.text)


# --- who may call -------------------------------------------------------------------------------------------

def test_the_routes_answer_401_403_and_404(engine, http, world, other_world, admin, traffic, cached_token) -> None:
    base, store = admin["base"], traffic["a"]
    routes = [("GET", f"/ecom_stores/{store}/event_delivery"), ("GET", f"/ecom_stores/{store}/dead_letters"),
              ("POST", f"/ecom_stores/{store}/dead_letters/replay")]
    other_client, other_secret = issue_client(engine, other_world["id"], "other admin", "admin", None, ())
    other_admin = get_token(http, other_world, {"clientId": other_client, "clientSecret": other_secret,
                                                "scope": "admin", "resource": None})
    ecom = cached_token(world, client_of(world, "ecom"))
    for method, path in routes:
        assert http.request(method, base + path, json={}).status_code == 401
        for token in (ecom, other_admin):
            refused = http.request(method, base + path, json={}, headers=bearer(token))
            assert refused.status_code == 403, (method, path, refused.text)
        # Another tenant's store, and a store that does not exist, are not found in this tenant.
        for missing in (other_world["ecomStores"][0]["id"], new_id()):
            answer = http.request(method, base + path.replace(store, missing), json={}, headers=admin["headers"])
            assert answer.status_code == 404, (method, path, answer.text)
            assert answer.json()["error"] == "NOT_FOUND"
    assert _rows(engine, traffic["a_events"])[traffic["a_events"][2]][4] is not None  # nothing was replayed


# --- the CLI, straight on the database ----------------------------------------------------------------------

def test_cli_shows_lists_and_replays_on_the_database(own_store) -> None:
    settings, engine = own_store
    tenant = create_tenant(engine, "events cli", False)
    store = new_id()
    with engine.begin() as conn:
        conn.execute(ecom_stores.insert().values(id=store, tenant_id=tenant, company_id=new_id(), number="1",
                                                 name="Web", released=True))
    written = _write(engine, tenant, store, 3)
    _mark(engine, written[:2], **_dead(1))
    env = {"PIA_DATA_DIR": str(settings.data_dir), "PIA_DATABASE_URL": settings.database_url,
           "PIA_SECRET_KEY": settings.secret_key.get_secret_value(), "PIA_ADMIN_URL": ""}

    def pia(*arguments: str) -> Any:
        result = CliRunner().invoke(main, ["admin", "events", *arguments, "--tenant", tenant, "--ecom-store", store],
                                    env=env)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    status = pia("status")
    assert (status["backlog"], status["deadLetters"], status["deadLettersByAnswer"]) == (1, 2, {"503": 2})
    listed = pia("dead-letters", "--limit", "1")
    assert [item["eventId"] for item in listed["items"]] == [written[1]] and listed["nextAfter"] == written[1]
    assert [item["eventId"] for item in pia("dead-letters", "--after", written[1])["items"]] == [written[0]]
    assert [item["eventId"] for item in pia("dead-letters", "--answer", "503 #1")["items"]] == written[1::-1]
    assert pia("dead-letters", "--answer", "answered 410")["items"] == []
    assert pia("replay", "--event", written[0]) == {"replayed": 1}
    assert pia("replay", "--all") == {"replayed": 1}
    assert (pia("status")["backlog"], pia("status")["deadLetters"]) == (3, 0)

    missing = CliRunner().invoke(main, ["admin", "events", "status", "--tenant", tenant, "--ecom-store", new_id()],
                                 env=env)
    assert missing.exit_code == 1 and json.loads(missing.stderr)["error"] == "NOT_FOUND"
    neither = CliRunner().invoke(main, ["admin", "events", "replay", "--tenant", tenant, "--ecom-store", store],
                                 env=env)
    assert neither.exit_code == 2 and "--all" in neither.output


# --- /metrics -----------------------------------------------------------------------------------------------

def test_metrics_carry_backlog_and_dead_letters_of_every_store_without_a_token(engine, http, world,
                                                                            traffic) -> None:
    before = utc_now()
    answer = http.get("/metrics")
    after = utc_now()
    assert answer.status_code == 200
    assert answer.headers["Content-Type"].startswith("text/plain; version=0.0.4")

    def gauge(name: str, store: str, text: str = answer.text) -> float:
        return samples(text)[name][frozenset({("tenant_id", world["id"]), ("ecom_store_id", store)})]

    assert (gauge("pia_event_backlog", traffic["a"]), gauge("pia_event_dead_letters", traffic["a"])) == (2, 3)
    assert (gauge("pia_event_backlog", traffic["b"]), gauge("pia_event_dead_letters", traffic["b"])) == (2, 0)
    # Aged as of the scrape, which happened between `before` and `after` (a loaded machine takes seconds over it).
    age = gauge("pia_event_oldest_undelivered_age_seconds", traffic["a"])
    assert (before - OLDEST).total_seconds() <= age <= (after - OLDEST).total_seconds()
    assert 0 <= gauge("pia_event_oldest_undelivered_age_seconds", traffic["b"]) < 600  # written by the fixture
    # Every eCom store of the tenant is listed, the quiet ones with 0.
    quiet = [store["id"] for store in world["ecomStores"] if store["id"] not in (traffic["a"], traffic["b"])]
    assert all(gauge("pia_event_backlog", store) == 0 for store in quiet)
    assert all(gauge("pia_event_oldest_undelivered_age_seconds", store) == 0 for store in quiet)


    _mark(engine, traffic["b_events"][:1], published_time=NOW, delivered_time=NOW)  # computed on each scrape
    assert gauge("pia_event_backlog", traffic["b"], http.get("/metrics").text) == 1
