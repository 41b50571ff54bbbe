"""The operator console in a real browser: Debian's Chromium driven by Playwright against a real server on DuckDB
(pipeline and outbox bridge in the process, as `pia serve` runs them), its webhook receiver a real HTTP server
(tests/webhook_receiver.py). Sign-in, a batch uploaded through the API, a dead letter replayed to the receiver, a
parked order retried and a held cart cancelled, the refusals, no secret in any page; axe-core (vendored,
tests/vendor/axe-core) checks every page, and every page is photographed into test-artifacts/console/ (README: how
docs/console/ is refreshed from it).

One backend: the browser sees HTML, which both backends render alike; tests/test_console_http.py checks the
server-side rules on both. Chromium comes from Debian's package (`.ci/run` installs it): Playwright's own browser
download is not reachable here.
"""

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

from contracts import events
from contracts.rendering import instant
from db.click_and_collect import read_cart
from db.engine import create_engine
from db.ids import new_id
from db.migrate import upgrade
from db.order_failures import processing_state
from db.outbox import order_event
from db.schema import event_outbox
from serving.admin import issue_client
from serving.app import create_app
from serving.demo import seed_demo_tenant
from settings import BridgeSettings, OrderSettings, Settings, TokenSettings, WorkerSettings
from tests.batches import body, envelope, forecast_item, new_batch_id, wait_finished
from tests.conftest import LiveServer, bearer, client_of, free_port, get_token, service_missing, wait_for
from tests.console_pages import held_cart
from tests.test_order_processing import RefusedOpening
from tests.test_order_processing import Shop as ProcessingShop
from tests.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.timeout(300)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run"]
AXE = Path(__file__).parent / "vendor" / "axe-core" / "axe.min.js"
SCREENSHOTS = Path(__file__).parent.parent / "test-artifacts" / "console"
WEBHOOK_SECRET = "whsec_" + "YnJvd3NlciB0ZXN0IHdlYmhvb2sgc2VjcmV0"
RUN_AT = ("2026-11-19T02:00:00Z", "2026-11-20T02:00:00Z", "2026-11-21T02:00:00Z")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        service_missing(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def scene(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A server of its own (the bridge gives up after one failed attempt, so a failing receiver makes dead letters
    at once, and the order processor parks an order at its first failed attempt), two tenants, and the first
    tenant's first eCom store delivering to a webhook receiver."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("console-browser"), worker=WorkerSettings(poll_seconds=0.2),
                        bridge=BridgeSettings(poll_seconds=0.2, max_attempts=1, retry_base_seconds=0.1),
                        order=OrderSettings(max_attempts=1),
                        token=TokenSettings(attempts_per_minute_per_address=100_000,
                                            attempts_per_minute_per_client=100_000))
    engine = create_engine(settings)
    upgrade(engine)
    world = seed_demo_tenant(engine, "Nordlys Retail", is_test=False, shop=False)
    other = seed_demo_tenant(engine, "Other Retail", is_test=True, shop=False)
    port = free_port()
    server = LiveServer(create_app(settings, engine, issuer=f"http://127.0.0.1:{port}", run_pipeline=True,
                                   run_bridge=True), port)
    server.start()
    receiver = WebhookReceiver(WEBHOOK_SECRET).start()
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            store = world["ecomStores"][0]["id"]
            admin = client_of(world, "admin")
            answer = http.put(f"/admin/v1/tenants/{world['id']}/ecom_stores/{store}/event_destination",
                              json={"kind": "WEBHOOK", "url": receiver.url, "secret": WEBHOOK_SECRET},
                              headers=bearer(get_token(http, world, admin)))
            assert answer.status_code == 200, answer.text
            yield {"settings": settings, "engine": engine, "server": server, "http": http, "world": world,
                   "other": other, "store": store, "admin": admin, "receiver": receiver}
    finally:
        receiver.stop()
        server.stop()
        engine.dispose()


class Visit:
    """A browser page that records console errors (a Content-Security-Policy refusal shows as one), checks every page
    it loads with axe-core, and photographs it."""

    def __init__(self, page: Page, base_url: str) -> None:
        self.page, self.base_url = page, base_url
        self.errors: list[str] = []
        page.on("console", self._console)
        page.add_init_script(path=str(AXE))  # evaluated by the browser itself, beside the page's CSP

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(message.text)

    def open(self, path: str) -> Page:
        self.page.goto(self.base_url + path)
        return self.page

    def check(self, name: str) -> None:
        """No serious or critical accessibility violation, no console error; a screenshot named `name`."""
        violations = self.page.evaluate("""async () => (await axe.run(document, {resultTypes: ["violations"]}))
            .violations.map(v => ({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map(n => n.target)}))""")
        assert not [v for v in violations if v["impact"] in ("serious", "critical")], (name, violations)
        assert not self.errors, (name, self.errors)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)

    def sign_in(self, client: dict[str, Any]) -> None:
        self.open("/console/sign-in")
        self.page.get_by_label("Client id").fill(client["clientId"])
        self.page.get_by_label("Client secret").fill(client["clientSecret"])
        self.page.get_by_role("button", name="Sign in").click()
        expect(self.page).to_have_url(re.compile(r".*/console/$"))


@pytest.fixture
def visit(browser: Browser, scene: dict[str, Any]) -> Iterator[Visit]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        yield Visit(context.new_page(), scene["server"].url)
    finally:
        context.close()


def _upload_run(scene: dict[str, Any], generated_at: str, skus: list[str]) -> dict[str, Any]:
    """A forecast batch of a run through the demand planning API, followed until it is processed."""
    world, http = scene["world"], scene["http"]
    headers = bearer(get_token(http, world, client_of(world, "demand_planning")))
    raw, content = body(envelope([forecast_item(sku) for sku in skus], generated_at=generated_at,
                                 batchIndex=1, batchTotal=1))
    url = f"/v1/tenants/{world['id']}/demand_planning/sales_forecast_batches/{new_batch_id()}"
    answer = http.put(url, content=raw, headers={**headers, **content})
    assert answer.status_code == 202, answer.text
    return wait_finished(http, answer.headers["Location"], headers)


def _dead_letter(scene: dict[str, Any]) -> str:
    """An event to the receiving store while the receiver answers 503: the bridge gives up on it at once."""
    engine, receiver, order_id = scene["engine"], scene["receiver"], new_id()
    receiver.fail_with(503)
    try:
        with engine.begin() as conn:
            order_event(conn, scene["world"]["id"], scene["store"], events.ORDER_CREATED, order_id)

        def dead() -> str | None:
            with engine.connect() as conn:
                return conn.scalar(sa.select(event_outbox.c.event_id).where(
                    event_outbox.c.entity_id == order_id, event_outbox.c.dead_letter_time.is_not(None)))

        return wait_for(dead, 60, "the event to go to the dead letters")
    finally:
        receiver.behave()


def test_sign_in_and_see_the_overview(visit: Visit, scene: dict[str, Any]) -> None:
    visit.open("/console/")
    expect(visit.page.get_by_role("heading", name="Sign in")).to_be_visible()  # sent to sign in first
    visit.check("sign-in")
    visit.sign_in(scene["admin"])
    expect(visit.page.get_by_role("heading", name="Overview")).to_be_visible()
    expect(visit.page.get_by_text("Nordlys Retail")).to_be_visible()
    for check in ("Database", "Demand planning pipeline", "Order processor", "Event delivery"):
        expect(visit.page.get_by_role("heading", name=check)).to_be_visible()
    visit.check("overview")


def test_a_batch_uploaded_through_the_api_appears_with_its_counts(visit: Visit, scene: dict[str, Any]) -> None:
    for generated_at, skus in zip(RUN_AT[:2], (["100001", "100002"], ["100001", "100002", "100003"]), strict=True):
        _upload_run(scene, generated_at, skus)
    status = _upload_run(scene, RUN_AT[2], ["100001", "100002", "NO-SUCH-SKU", "ANOTHER-UNKNOWN"])
    assert status["counts"]["rejected"] == 2
    visit.sign_in(scene["admin"])
    visit.open("/console/batches")
    run = visit.page.get_by_role("row").filter(has_text=RUN_AT[2])
    expect(run.get_by_role("cell")).to_have_text(
        [re.compile("1 of 1"), re.compile("COMPLETED_WITH_REJECTED_ITEMS 1"), "4", "2", "0", "0", "2",
         "UNKNOWN_SKU 2"])
    chart_table = visit.page.get_by_role("table", name=re.compile("Items per planning run"))
    expect(chart_table.get_by_role("row").filter(has_text="11-21 02:00").get_by_role("cell")).to_have_text(
        ["2", "0", "0", "2", "4"])
    visit.check("batches")
    visit.page.get_by_role("row").filter(has_text=RUN_AT[2]).get_by_text("1 of 1").click()
    visit.page.get_by_role("link", name=re.compile(status["batchId"])).click()
    expect(visit.page.get_by_role("heading", name=re.compile("Batch"))).to_contain_text(status["batchId"])
    expect(visit.page.get_by_role("table", name=re.compile("Rejected items"))).to_contain_text("NO-SUCH-SKU")
    visit.check("batch")


def test_replay_a_dead_letter_and_see_the_receiver_get_it(visit: Visit, scene: dict[str, Any]) -> None:
    event_id = _dead_letter(scene)
    assert event_id not in scene["receiver"].event_ids()
    visit.sign_in(scene["admin"])
    visit.open("/console/events")
    visit.check("events")
    visit.page.get_by_role("link", name=re.compile(scene["world"]["ecomStores"][0]["number"])).click()
    delivery = visit.page.locator("#delivery")
    expect(delivery).to_contain_text("Dead letters")
    visit.check("event-store")

    visit.page.get_by_label(f"Replay event {event_id}").check()
    visit.page.get_by_role("button", name="Replay the chosen…").click()
    expect(visit.page.get_by_role("heading", name="Replay dead letters?")).to_be_visible()
    expect(visit.page.get_by_role("main")).to_contain_text(event_id)
    visit.check("replay-confirm")
    assert event_id not in scene["receiver"].event_ids()  # nothing before the confirmation
    visit.page.get_by_role("button", name="Confirm the replay").click()

    expect(visit.page.get_by_role("status")).to_contain_text("1 dead letter(s) put back for delivery")
    wait_for(lambda: event_id in scene["receiver"].event_ids(), 60, "the receiver to get the replayed event")
    # The delivery section refreshes itself (htmx, every 3 s): the event shows as the last delivered.
    last_delivered = delivery.locator("div").filter(has_text="Last delivered event")
    expect(last_delivered).to_contain_text(event_id, timeout=30_000)
    assert not visit.errors


def test_refused_without_a_session_with_a_forged_token_to_another_tenant_and_after_sign_out(
        visit: Visit, scene: dict[str, Any]) -> None:
    store, page = scene["store"], visit.page
    visit.open(f"/console/events/{store}")
    expect(page).to_have_url(re.compile(r"/console/sign-in\?next=/console/events/"))

    _dead_letter(scene)
    visit.sign_in(scene["admin"])
    visit.open(f"/console/events/{store}")
    page.locator("input[name=csrf_token]").last.evaluate("input => { input.value = 'forged' }")
    page.get_by_role("button", name=re.compile("Replay all")).click()
    expect(page.get_by_role("heading", name="Refused")).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text("Nothing was changed")
    visit.errors.clear()  # the browser logs the 403 itself
    visit.check("refused")

    visit.open("/console/")
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    visit.open("/console/events")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()

    intruder = scene["other"]
    client_id, secret = issue_client(scene["engine"], intruder["id"], "other console admin", "admin", None, ())
    visit.sign_in({"clientId": client_id, "clientSecret": secret})
    visit.open(f"/console/events/{store}")
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    visit.open("/console/events")
    expect(page.get_by_text("Other Retail")).to_be_visible()
    assert store not in page.content()


def test_no_page_holds_a_secret(visit: Visit, scene: dict[str, Any]) -> None:
    visit.sign_in(scene["admin"])
    session_id = next(cookie["value"] for cookie in visit.page.context.cookies()
                      if cookie["name"] == "pia_console")
    secrets = {WEBHOOK_SECRET, session_id} | {client["clientSecret"] for client in scene["world"]["clients"]}
    paths = ["/console/", "/console/batches", "/console/batches?kind=REPLENISHMENT_PARAMETER", "/console/events",
             f"/console/events/{scene['store']}", "/console/attention"]
    for path in paths:
        html = visit.open(path).content()
        assert not {secret for secret in secrets if secret in html}, path


def test_retry_a_parked_order_and_cancel_a_held_cart(visit: Visit, scene: dict[str, Any]) -> None:
    """A tenant of its own with web shop orders: the database refuses to open one customer's orders
    (tests/test_order_processing.py), so the server's processor parks that customer's order; two carts are held."""
    engine, page = scene["engine"], visit.page
    shop = ProcessingShop(engine, "Fjord Outdoor")
    refused = RefusedOpening(shop)
    order_id = shop.receive((refused.sku, 1), customer_id=refused.customer_id)
    carts = [held_cart(engine, shop.tenant_id, shop.id, shop.skus[0], name) for name in ("Kari Nordmann", "Ola Hansen")]
    wait_for(lambda: processing_state(engine, shop.tenant_id, order_id).parked, 60, "the order to be parked")
    number = processing_state(engine, shop.tenant_id, order_id).number

    visit.sign_in(client_of(shop.world, "admin"))
    processor = page.get_by_role("article").filter(has_text="Order processor")
    expect(processor).to_contain_text("1 order(s) parked after failing every attempt")
    processor.get_by_role("link", name="Orders and holds").click()
    expect(page.get_by_role("heading", name="Orders needing attention and click-and-collect holds")).to_be_visible()
    parked = page.get_by_role("table", name="Parked orders, oldest first").get_by_role("row").filter(has_text=number)
    expect(parked).to_contain_text(refused.error)
    expected_expiry = [instant(read_cart(engine, shop.tenant_id, cart).created_time
                               + timedelta(hours=scene["settings"].click_and_collect_hold_hours)) for cart in carts]
    held = page.get_by_role("table", name="Parked carts, soonest to expire first").get_by_role("row")
    expect(held.filter(has_text="Kari Nordmann")).to_contain_text(expected_expiry[0])
    expect(held.filter(has_text="Kari Nordmann")).to_contain_text("expires in 2 d 23 h")
    expect(held.nth(1)).to_contain_text("Kari Nordmann")  # soonest first, under the header row
    visit.check("attention")

    # A forged form changes nothing.
    parked.locator("input[name=csrf_token]").evaluate("input => { input.value = 'forged' }")
    parked.get_by_role("button", name=f"Retry order {number}").click()
    expect(page.get_by_role("heading", name="Refused")).to_be_visible()
    visit.errors.clear()  # the browser logs the 403 itself
    assert processing_state(engine, shop.tenant_id, order_id).parked

    refused.lift()
    visit.open("/console/attention")
    page.get_by_role("button", name=f"Retry order {number}").click()
    expect(page.get_by_role("status")).to_contain_text(f"Order {number} retried: it is OPEN now.")
    expect(page.get_by_role("table", name="Parked orders, oldest first")).to_have_count(0)
    assert processing_state(engine, shop.tenant_id, order_id).status == "OPEN"

    page.get_by_role("link", name="Kari Nordmann").click()
    expect(page.get_by_role("heading", name=re.compile("Kari Nordmann"))).to_be_visible()
    expect(page.get_by_role("main")).to_contain_text(expected_expiry[0])
    visit.check("cart")
    page.get_by_role("button", name="Cancel the cart").click()
    expect(page.get_by_role("status")).to_contain_text("The cart is CANCELLED now.")
    assert read_cart(engine, shop.tenant_id, carts[0]).state == "CANCELLED"
    assert read_cart(engine, shop.tenant_id, carts[1]).state == "ACTIVE"
    assert not visit.errors
