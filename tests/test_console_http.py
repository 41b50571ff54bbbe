"""The operator console's server-side checks over plain HTTP, on both backends: sign-in through the token endpoint's
argon2 check and budgets, sessions kept as hashes with an expiry and ended at sign-out, the CSRF token on every
state-changing form, the tenant of the session and nothing else, and actions through the admin operations (a batch
rerun, a replay, a parked order's retry, a cart collected or cancelled)."""

import hashlib
import html
import re
from datetime import timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from contracts import events
from contracts.rendering import instant
from db import click_and_collect
from db.batches import get_batch
from db.clients import update_client
from db.console_sessions import session_hash
from db.destinations import DestinationSettings, set_destination
from db.ids import new_id, utc_now
from db.order_failures import processing_state
from db.outbox import order_event
from db.schema import click_and_collect_reservations, console_sessions
from db.secrets import secret_box
from serving import admin_operations
from serving.admin import issue_client
from serving.app import create_app
from serving.console import pages
from serving.console.routes import CONTENT_SECURITY_POLICY
from serving.demo import seed_demo_tenant
from settings import Settings
from tests.batches import failed_batch
from tests.conftest import LiveServer, client_of, free_port, get_token, wait_for, without_upload_workers
from tests.console_pages import (
    browser,
    csrf_in,
    dead_letter_ids,
    dead_letters,
    held_cart,
    sign_in_answer,
    signed_in,
)
from tests.test_order_processing import RefusedOpening
from tests.test_order_processing import Shop as ProcessingShop

PAGES = ("/console/", "/console/batches", "/console/batches?kind=REPLENISHMENT_PARAMETER", "/console/events",
         "/console/attention")
WEBHOOK_SECRET = "whsec_" + "Y29uc29sZSB0ZXN0IHNlY3JldCBuZXZlciBzaG93bg=="


def _admin(engine: sa.Engine, world: dict[str, Any], name: str = "console admin") -> dict[str, Any]:
    client_id, secret = issue_client(engine, world["id"], name, "admin", None, ())
    return {"clientId": client_id, "clientSecret": secret, "scope": "admin", "resource": None, "permissions": []}


@pytest.fixture
def admin(engine, shared_world) -> dict[str, Any]:
    return _admin(engine, shared_world)


@pytest.fixture
def console(server, admin) -> httpx.Client:
    with signed_in(server.url, admin) as console:
        yield console


def _cookie_header(answer: httpx.Response, name: str) -> str:
    return next(header for header in answer.headers.get_list("set-cookie") if header.startswith(f"{name}="))


def _stored_sessions(engine: sa.Engine) -> list[sa.Row]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(console_sessions)))


# --- signing in ---------------------------------------------------------------------------------------------


def test_sign_in_gives_an_http_only_strict_cookie_whose_id_is_stored_only_as_a_hash(server, engine, settings,
                                                                                     shared_world, admin) -> None:
    with browser(server.url) as console:
        answer = sign_in_answer(console, admin)
        assert answer.status_code == 303 and answer.headers["Location"] == "/console/"
        cookie = _cookie_header(answer, "pia_console")
        attributes = {part.strip().split("=")[0].lower(): part.strip() for part in cookie.split(";")[1:]}
        assert {"httponly", "path", "samesite", "max-age", "expires"} <= set(attributes)
        assert attributes["samesite"] == "SameSite=Strict" and attributes["path"] == "Path=/console"
        assert attributes["max-age"] == f"Max-Age={settings.console_session_seconds}"
        assert "secure" not in attributes  # plain HTTP on 127.0.0.1: the one place without Secure
        session_id = console.cookies["pia_console"]

        row = next(row for row in _stored_sessions(engine) if row.session_hash == session_hash(session_id))
        assert row.session_hash == hashlib.sha256(session_id.encode()).hexdigest()
        assert session_id not in {str(value) for row in _stored_sessions(engine) for value in row}
        assert (row.tenant_id, row.client_id) == (shared_world["id"], admin["clientId"])
        assert row.expires_time - row.created_time == timedelta(seconds=settings.console_session_seconds)

        for path in PAGES:
            page = console.get(path)
            assert page.status_code == 200, (path, page.text)
            assert page.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
            assert page.headers["Cache-Control"] == "no-store" and page.headers["X-Frame-Options"] == "DENY"
            assert shared_world["name"] in page.text


def test_the_cookie_is_secure_everywhere_but_plain_http_on_this_machine(server, admin) -> None:
    with browser(server.url) as console:
        form = console.get("/console/sign-in", headers={"Host": "console.example"})
        cookie = _cookie_header(form, "pia_console_sign_in")
        assert "; Secure" in cookie and "over HTTPS" in form.text
        # Sent back by hand: a client keeps no Secure cookie for plain HTTP.
        answer = console.post("/console/sign-in", headers={"Host": "console.example",
                                                           "Cookie": cookie.partition(";")[0]}, data={
            "csrf_token": csrf_in(form.text), "client_id": admin["clientId"], "client_secret": admin["clientSecret"]})
        assert answer.status_code == 303
        assert "; Secure" in _cookie_header(answer, "pia_console")


def test_wrong_secrets_other_scopes_and_disabled_clients_get_no_session(server, engine, shared_world,
                                                                       admin) -> None:
    disabled = _admin(engine, shared_world, "disabled console admin")
    update_client(engine, shared_world["id"], disabled["clientId"], enabled=False)
    cases = [(admin, "not the secret", 401, "Client authentication failed"),
             ({**admin, "clientId": new_id()}, None, 401, "Client authentication failed"),
             # A control character names no client (and a NUL cannot even be looked up on PostgreSQL): no 500.
             ({**admin, "clientId": admin["clientId"] + "\x00"}, None, 401, "Client authentication failed"),
             ({**admin, "clientId": "\x1b[31m"}, None, 401, "Client authentication failed"),
             (client_of(shared_world, "ecom"), None, 403, "only admin clients may use the console"),
             (disabled, None, 401, "disabled")]
    for client, secret, status, says in cases:
        with browser(server.url) as console:
            answer = sign_in_answer(console, client, secret)
            assert answer.status_code == status, answer.text
            assert says in answer.text and "pia_console" not in console.cookies
            assert console.get("/console/").status_code == 303


def test_sign_in_attempts_spend_the_token_endpoints_budget(own_store) -> None:
    """Two wrong token requests and one wrong sign-in spend a budget of three attempts per client and address: the
    next sign-in is refused before its secret is checked, as the next token request would be."""
    settings, engine = own_store
    settings = settings.with_changes(token={"attempts_per_minute_per_client": 3})
    world = seed_demo_tenant(engine, "budget", is_test=False, shop=False)
    admin = client_of(world, "admin")
    port = free_port()
    live = LiveServer(create_app(without_upload_workers(settings), engine, issuer=f"http://127.0.0.1:{port}"), port)
    live.start()
    try:
        with httpx.Client(base_url=live.url, timeout=30) as http:
            for _ in range(2):
                refused = http.post("/oauth2/token", data={"grant_type": "client_credentials",
                                                           "tenant_id": world["id"]},
                                    auth=(admin["clientId"], "wrong"))
                assert refused.status_code == 401
        with browser(live.url) as console:
            assert sign_in_answer(console, admin, "wrong").status_code == 401
            throttled = sign_in_answer(console, admin)  # the right secret, but the budget is spent
            assert throttled.status_code == 429 and int(throttled.headers["Retry-After"]) > 0
            assert "for this client from this address" in throttled.text and "pia_console" not in console.cookies
    finally:
        live.stop()


# --- refusals -----------------------------------------------------------------------------------------------


def test_without_a_session_pages_send_to_sign_in_and_actions_are_refused(server, engine, shared_world) -> None:
    store = shared_world["ecomStores"][0]["id"]
    letters = dead_letters(engine, shared_world["id"], store, 1)
    with browser(server.url) as console:
        for path in (*PAGES, f"/console/events/{store}"):
            answer = console.get(path)
            assert answer.status_code == 303, path
            assert answer.headers["Location"].startswith("/console/sign-in?next=/console/")
        polled = console.get("/console/", headers={"HX-Request": "true"})
        assert polled.status_code == 401 and polled.headers["HX-Redirect"].startswith("/console/sign-in")
        for path in (f"/console/events/{store}/replay/confirm", "/console/sign-out"):
            answer = console.post(path, data={"all": "yes", "csrf_token": "x"})
            assert answer.status_code == 401 and "Sign in" in answer.text
        console.cookies.set("pia_console", "made-up-session-id", domain="127.0.0.1", path="/console")
        forged = console.post(f"/console/events/{store}/replay/confirm", data={"all": "yes"})
        assert forged.status_code == 401
    assert set(letters) <= dead_letter_ids(engine, shared_world["id"], store)


def test_every_console_route_but_sign_in_needs_a_session(server) -> None:
    """Read from the app's URL map, so a page added later is checked without more code."""
    app = create_app(Settings(data_dir="/nonexistent"), engine=None, issuer="http://x")  # type: ignore[arg-type]
    routes = [(method, re.sub(r"<[^>]+>", new_id(), rule.rule)) for rule in app.url_map.iter_rules()
              if rule.endpoint.startswith("console.") and rule.endpoint not in ("console.sign_in", "console.static")
              for method in sorted(rule.methods - {"HEAD", "OPTIONS"})]
    assert len(routes) >= 9
    with browser(server.url) as console:
        for method, path in routes:
            answer = console.request(method, path, data={"csrf_token": "x"} if method == "POST" else None)
            assert answer.status_code == (303 if method == "GET" else 401), (method, path)


def _replay_all(console: httpx.Client, store: str, token: str | None, **headers: str) -> httpx.Response:
    data = {"all": "yes"} if token is None else {"all": "yes", "csrf_token": token}
    return console.post(f"/console/events/{store}/replay/confirm", data=data, headers=headers)


def test_a_form_without_the_sessions_csrf_token_changes_nothing(server, engine, shared_world, admin,
                                                                console) -> None:
    store = shared_world["ecomStores"][0]["id"]
    letters = set(dead_letters(engine, shared_world["id"], store, 2))
    token = csrf_in(console.get(f"/console/events/{store}").text)
    with signed_in(server.url, admin) as other_session:
        others_token = csrf_in(other_session.get("/console/").text)
    assert others_token != token

    refusals = [_replay_all(console, store, None), _replay_all(console, store, ""),
                _replay_all(console, store, token[:-1] + ("A" if token[-1] != "A" else "B")),
                _replay_all(console, store, others_token),
                _replay_all(console, store, token, Origin="https://attacker.example"),
                _replay_all(console, store, token, **{"Sec-Fetch-Site": "cross-site"})]
    for refusal in refusals:
        assert refusal.status_code == 403 and "Nothing was changed" in refusal.text
    assert letters <= dead_letter_ids(engine, shared_world["id"], store)

    done = _replay_all(console, store, token, Origin=server.url)
    assert done.status_code == 303 and "replayed=" in done.headers["Location"]
    assert not letters & dead_letter_ids(engine, shared_world["id"], store)


@hypothesis_settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(token=st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60))
def test_no_token_but_the_sessions_own_passes(engine, shared_world, console, token) -> None:
    store = shared_world["ecomStores"][1]["id"]
    own = csrf_in(console.get("/console/").text)
    letters = set(dead_letters(engine, shared_world["id"], store, 1))
    answer = _replay_all(console, store, token)
    if token == own:  # never drawn in practice; the property is that nothing else passes
        return
    assert answer.status_code == 403
    assert letters <= dead_letter_ids(engine, shared_world["id"], store)


def test_the_sign_in_form_needs_its_own_token(server, admin) -> None:
    with browser(server.url) as console:
        console.get("/console/sign-in")
        answer = console.post("/console/sign-in", data={"client_id": admin["clientId"],
                                                        "client_secret": admin["clientSecret"]})
        assert answer.status_code == 403 and "pia_console" not in console.cookies


def test_a_session_of_another_tenants_admin_sees_and_changes_nothing_of_this_tenant(
        server, settings, engine, shared_world, shared_other_world) -> None:
    store = shared_world["ecomStores"][0]
    letters = set(dead_letters(engine, shared_world["id"], store["id"], 1))
    batch_id = failed_batch(settings, engine, shared_world["id"], "2026-11-19T02:00:00Z")
    with signed_in(server.url, _admin(engine, shared_other_world)) as intruder:
        token = csrf_in(intruder.get("/console/").text)
        assert intruder.get(f"/console/events/{store['id']}").status_code == 404
        assert intruder.get(f"/console/batches/{batch_id}").status_code == 404
        assert _replay_all(intruder, store["id"], token).status_code == 404
        assert intruder.post(f"/console/events/{store['id']}/replay", data={"all": "yes", "csrf_token": token}) \
            .status_code == 404
        assert intruder.post(f"/console/batches/{batch_id}/rerun", data={"csrf_token": token}).status_code == 404
        listing = intruder.get("/console/events").text
        assert store["id"] not in listing and shared_world["name"] not in listing
        assert batch_id not in intruder.get("/console/batches").text
    assert letters <= dead_letter_ids(engine, shared_world["id"], store["id"])
    assert get_batch(engine, shared_world["id"], batch_id).progress == "FAILED"


def test_an_expired_session_is_refused(server, engine, console) -> None:
    assert console.get("/console/").status_code == 200
    with engine.begin() as conn:
        conn.execute(console_sessions.update()
                     .where(console_sessions.c.session_hash == session_hash(console.cookies["pia_console"]))
                     .values(expires_time=utc_now() - timedelta(seconds=1)))
    answer = console.get("/console/")
    assert answer.status_code == 303 and answer.headers["Location"].startswith("/console/sign-in")


def test_sign_out_ends_the_session_at_the_server(server, engine, console) -> None:
    session_id = console.cookies["pia_console"]
    token = csrf_in(console.get("/console/").text)
    answer = console.post("/console/sign-out", data={"csrf_token": token})
    assert answer.status_code == 303 and answer.headers["Location"] == "/console/sign-in"
    assert "Max-Age=0" in _cookie_header(answer, "pia_console")
    assert session_hash(session_id) not in {row.session_hash for row in _stored_sessions(engine)}
    with browser(server.url) as replayed:  # the old cookie, kept by someone, is worth nothing now
        replayed.cookies.set("pia_console", session_id, domain="127.0.0.1", path="/console")
        assert replayed.get("/console/").status_code == 303


# --- actions and what pages show ----------------------------------------------------------------------------


def test_replay_asks_for_confirmation_then_replays_the_chosen_dead_letters(engine, shared_world, console) -> None:
    store = shared_world["ecomStores"][0]["id"]
    chosen, kept = dead_letters(engine, shared_world["id"], store, 2)
    token = csrf_in(console.get(f"/console/events/{store}").text)

    confirmation = console.post(f"/console/events/{store}/replay", data={"event": chosen, "csrf_token": token})
    assert confirmation.status_code == 200 and chosen in confirmation.text and kept not in confirmation.text
    assert {chosen, kept} <= dead_letter_ids(engine, shared_world["id"], store)  # nothing yet

    done = console.post(f"/console/events/{store}/replay/confirm",
                        data={"event": chosen, "csrf_token": csrf_in(confirmation.text)})
    assert done.status_code == 303 and done.headers["Location"].endswith("replayed=1")
    left = dead_letter_ids(engine, shared_world["id"], store)
    assert chosen not in left and kept in left
    assert "1 dead letter(s) put back for delivery" in console.get(done.headers["Location"]).text


def test_dead_letters_are_filtered_by_answer(engine, shared_world, console) -> None:
    store = shared_world["ecomStores"][1]["id"]
    refused = dead_letters(engine, shared_world["id"], store, 1, answer="webhook at shop.example answered 410 Gone")
    page = console.get(f"/console/events/{store}", params={"answer": "answered 410"}).text
    assert refused[0] in page and "answered 503" not in page


def test_a_stores_page_shows_dead_letters_by_answer_and_the_oldest_undelivered_age(engine, shared_world,
                                                                                   console) -> None:
    store = shared_world["ecomStores"][1]["id"]
    dead_letters(engine, shared_world["id"], store, 2, answer="webhook at shop.example answered 410 Gone",
                 short_answer="410")
    with engine.begin() as conn:  # one event still to deliver
        order_event(conn, shared_world["id"], store, events.ORDER_CREATED, new_id())
    state = admin_operations.event_delivery(engine, shared_world["id"], store)
    page = html.unescape(console.get(f"/console/events/{store}").text)
    assert f"410 ×{state['deadLettersByAnswer']['410']:,}" in page and state["deadLettersByAnswer"]["410"] >= 2
    assert f"old ({state['oldestUndeliveredTime']})" in page
    assert "Entities waiting to retry (lanes in backoff)" in page


def test_rerun_of_a_failed_batch_from_its_page(settings, engine, shared_world, console) -> None:
    batch_id = failed_batch(settings, engine, shared_world["id"], "2026-11-18T02:00:00Z")
    page = console.get(f"/console/batches/{batch_id}")
    assert page.status_code == 200 and "Rerun this batch" in page.text
    answer = console.post(f"/console/batches/{batch_id}/rerun", data={"csrf_token": csrf_in(page.text)})
    assert answer.status_code == 303 and answer.headers["Location"] == f"/console/batches/{batch_id}?rerun=requested"
    wait_for(lambda: get_batch(engine, shared_world["id"], batch_id).progress == "COMPLETED", 30, "the rerun")
    assert "Rerun this batch" not in console.get(f"/console/batches/{batch_id}").text
    again = console.post(f"/console/batches/{batch_id}/rerun", data={"csrf_token": csrf_in(page.text)})
    assert again.status_code == 409 and "not FAILED" in again.text


def test_no_page_shows_a_secret(server, settings, engine, http, shared_world, admin, console) -> None:
    store = shared_world["ecomStores"][0]["id"]
    set_destination(engine, secret_box(settings), shared_world["id"], store,
                    DestinationSettings("WEBHOOK", "https://shop.example/hooks?token=query-secret", None, None,
                                        WEBHOOK_SECRET))
    secrets = {WEBHOOK_SECRET, "query-secret", admin["clientSecret"], console.cookies["pia_console"],
               get_token(http, shared_world, admin)}
    secrets |= {client["clientSecret"] for client in shared_world["clients"]}
    for path in (*PAGES, "/console/sign-in", f"/console/events/{store}"):
        page = console.get(path)
        assert page.status_code == 200, path
        assert not {secret for secret in secrets if secret in page.text}, path
    assert "https://shop.example/hooks" in console.get(f"/console/events/{store}").text


def _made_hours_ago(engine: sa.Engine, parked_cart_id: str, hours: int) -> None:
    with engine.begin() as conn:
        conn.execute(click_and_collect_reservations.update()
                     .where(click_and_collect_reservations.c.id == parked_cart_id)
                     .values(created_time=utc_now() - timedelta(hours=hours)))


def test_a_parked_order_is_retried_and_carts_are_collected_or_cancelled_from_orders_and_holds(
        own_store, monkeypatch) -> None:
    """A server of the test's own (no pipeline worker, so no cart expires) whose processor parks an order at its
    first failed attempt (the database refuses to open it, tests/test_order_processing.py), and three carts: one
    new, one near its expiry, one past it. The page lists the order and the carts, soonest to expire first, a page
    at a time; its forms refuse a missing or forged CSRF token and another tenant's admin; the retry opens the order
    once the fault is gone; a cart is collected, another cancelled, and ending that one another way is 409, through
    the admin API's operations."""
    settings, engine = own_store
    shop = ProcessingShop(engine)
    refused = RefusedOpening(shop)
    order_id = shop.receive((refused.sku, 1), customer_id=refused.customer_id)
    new, near, past = (held_cart(engine, shop.tenant_id, shop.id, shop.skus[0], name)
                       for name in ("Kari", "Ola", "Per"))
    _made_hours_ago(engine, near, 60)
    _made_hours_ago(engine, past, 73)
    hold = timedelta(hours=settings.click_and_collect_hold_hours)
    port = free_port()
    served = settings.with_changes(order={"max_attempts": 1}, worker={"poll_seconds": 0.2})
    live = LiveServer(create_app(without_upload_workers(served), engine, issuer=f"http://127.0.0.1:{port}"), port)
    live.start()
    try:
        wait_for(lambda: processing_state(engine, shop.tenant_id, order_id).parked, 60, "the order to be parked")
        number = processing_state(engine, shop.tenant_id, order_id).number
        with signed_in(live.url, client_of(shop.world, "admin")) as console:
            overview = console.get("/console/").text
            assert "1 order(s) parked after failing every attempt" in overview and "/console/attention" in overview
            page = console.get("/console/attention")
            assert page.status_code == 200, page.text
            assert number in page.text and refused.error in page.text
            expiry = {cart: instant(click_and_collect.read_cart(engine, shop.tenant_id, cart).created_time + hold)
                      for cart in (new, near, past)}
            assert all(expires in page.text for expires in expiry.values())
            assert page.text.index(past) < page.text.index(near) < page.text.index(new)  # soonest to expire first
            for shown in ("past its expiry by 1 h", "expires in 11 h 59 min", "expires in 2 d 23 h",
                          "Of them expiring within 24 h</dt><dd>2</dd>"):
                assert shown in page.text, shown
            assert re.findall(r'badge status-(\w+)">(?:past|expires)', page.text) == ["failing", "attention", "ok"]
            monkeypatch.setattr(pages, "CARTS_PER_PAGE", 2)
            paged = console.get("/console/attention").text
            assert past in paged and near in paged and new not in paged and f"cartsAfter={near}" in paged
            assert new in console.get("/console/attention", params={"cartsAfter": near}).text
            monkeypatch.undo()
            token, retry = csrf_in(page.text), f"/console/attention/orders/{order_id}/retry"

            for forged in ({}, {"csrf_token": token[:-1] + ("A" if token[-1] != "A" else "B")}):
                assert console.post(retry, data=forged).status_code == 403
                assert console.post(f"/console/attention/carts/{new}/collect", data=forged).status_code == 403
            assert processing_state(engine, shop.tenant_id, order_id).parked
            assert click_and_collect.read_cart(engine, shop.tenant_id, new).state == "ACTIVE"

            other = seed_demo_tenant(engine, "intruding tenant", is_test=True, shop=False)
            with signed_in(live.url, _admin(engine, other)) as intruder:
                own_token = csrf_in(intruder.get("/console/attention").text)
                assert intruder.post(retry, data={"csrf_token": own_token}).status_code == 404
                assert intruder.get(f"/console/attention/carts/{new}").status_code == 404
                assert intruder.post(f"/console/attention/carts/{new}/cancel",
                                     data={"csrf_token": own_token}).status_code == 404
                listing = intruder.get("/console/attention").text
                assert number not in listing and new not in listing
            assert processing_state(engine, shop.tenant_id, order_id).parked
            assert click_and_collect.read_cart(engine, shop.tenant_id, new).state == "ACTIVE"

            refused.lift()
            done = console.post(retry, data={"csrf_token": token})
            assert done.status_code == 303 and done.headers["Location"].endswith(f"retried={number}&status=OPEN")
            assert processing_state(engine, shop.tenant_id, order_id).status == "OPEN"
            after = console.get(done.headers["Location"]).text
            assert f"Order {number} retried: it is OPEN now." in after and refused.error not in after

            cart_page = console.get(f"/console/attention/carts/{new}")
            assert cart_page.status_code == 200 and expiry[new] in cart_page.text
            assert "Mark as collected" in cart_page.text
            collected = console.post(f"/console/attention/carts/{new}/collect", data={"csrf_token": token})
            assert collected.status_code == 303
            assert collected.headers["Location"] == f"/console/attention/carts/{new}?ended=COLLECTED"
            assert console.post(f"/console/attention/carts/{near}/cancel",
                                data={"csrf_token": token}).status_code == 303
            assert [click_and_collect.read_cart(engine, shop.tenant_id, cart).state for cart in (new, near, past)] \
                == ["COLLECTED", "CANCELLED", "ACTIVE"]
            late = console.post(f"/console/attention/carts/{near}/collect", data={"csrf_token": token})
            assert late.status_code == 409 and "CANCELLED" in late.text
            assert console.post(f"/console/attention/carts/{near}/keep", data={"csrf_token": token}) \
                .status_code == 404
            left = console.get("/console/attention").text
            assert past in left and new not in left and near not in left
    finally:
        live.stop()


def test_bad_addresses_of_orders_and_holds_are_refused_with_their_path(console) -> None:
    cursor = console.get("/console/attention", params={"cartsAfter": "not-a-cart"})
    assert cursor.status_code == 400 and "cartsAfter" in cursor.text and "INVALID_ID" in cursor.text
    control = console.get("/console/attention/carts/%01")
    assert control.status_code == 400 and "INVALID_PATH_PARAMETER" in control.text
