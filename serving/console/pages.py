"""What each console page shows, gathered for one tenant (blocking: the routes run these off the event loop).

Records come from the admin operations where the admin API has them (event delivery, destinations, dead letters)
and are rendered by serving/rendering.py (batch statuses), so the console shows what the API answers.
"""

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import sqlalchemy as sa

from contracts.batch_kinds import SALES_FORECAST
from contracts.errors import NotFound
from contracts.models import Shape, Uuid
from contracts.rendering import decimal, instant
from db.batches import FAILED, PENDING, PROCESSING, batches_of_runs, counts_by_progress, get_batch, run_times
from db.click_and_collect import ActiveCart, active_cart_counts, active_carts
from db.event_operations import deliveries_per_hour, failing_events
from db.ids import utc_now
from db.order_failures import PARKED, RETRYING, failure_counts
from db.order_processing import received_backlog
from db.reference import list_ecom_stores
from serving import admin_operations
from serving.console.charts import Series, StackedBars
from serving.health import age_seconds, probe_database, probe_pipeline
from serving.rendering.batches import batch_status
from settings import Settings

RUNS_PER_PAGE = 20
REJECTED_ITEMS_PER_PAGE = 50
DEAD_LETTERS_PER_PAGE = 25
FAILING_EVENTS_SHOWN = 10
ORDERS_PER_PAGE = 25
CARTS_PER_PAGE = 25
CHART_HOURS = 24
# A finished batch's items fall in one of these.
RUN_SERIES = (Series("accepted", "good"), Series("superseded", "other"), Series("locked", "neutral"),
              Series("rejected", "bad"))
OK, ATTENTION, FAILING = "ok", "attention", "failing"


@dataclass(frozen=True)
class Figure:
    label: str
    value: str


@dataclass(frozen=True)
class HealthCheck:
    name: str
    status: str  # OK, ATTENTION or FAILING
    summary: str
    figures: list[Figure]
    page: tuple[str, str] | None = None  # (endpoint, label) of the console page with the details


def duration(seconds: float | None) -> str:
    """An age for a person: "45 s", "12 min", "3 h 5 min", "2 d 4 h"; "—" for none."""
    if seconds is None:
        return "—"
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if minutes < 60:
        return f"{minutes} min"
    if hours < 24:
        return f"{hours} h {minutes % 60} min"
    return f"{days} d {hours % 24} h"


# Overview: the health of what serves the tenant, with the numbers behind each verdict.


def overview(engine: sa.Engine, settings: Settings, tenant_id: str) -> list[HealthCheck]:
    """The checks in the order the page shows them."""
    return [_database(engine), _pipeline(engine, settings, tenant_id), _order_processor(engine, settings, tenant_id),
            _event_delivery(event_stores(engine, tenant_id))]


def _database(engine: sa.Engine) -> HealthCheck:
    latency = probe_database(engine)
    return HealthCheck("Database", OK, f"answers in {latency} ms", [
        Figure("Backend", engine.dialect.name), Figure("Latency of SELECT 1", f"{latency} ms")])


def _pipeline(engine: sa.Engine, settings: Settings, tenant_id: str) -> HealthCheck:
    probe = probe_pipeline(engine, settings.pipeline_stale_seconds, tenant_id)
    counts = counts_by_progress(engine, tenant_id)
    if probe["status"] == "stalled":
        status, summary = FAILING, "batches wait and no worker has beaten lately"
    elif counts[FAILED]:
        status, summary = ATTENTION, f"{counts[FAILED]} batch(es) FAILED: rerun them from the batch page"
    else:
        status, summary = OK, "workers alive" if probe["heartbeatAgeSeconds"] is not None else "no batches waiting"
    return HealthCheck("Demand planning pipeline", status, summary, [
        Figure("Last worker heartbeat", f"{duration(probe['heartbeatAgeSeconds'])} ago"
               if probe["heartbeatAgeSeconds"] is not None else "none yet"),
        Figure("Oldest PENDING batch waits", duration(probe["oldestPendingAgeSeconds"])),
        *(Figure(f"Batches {progress}", f"{count:,}") for progress, count in counts.items())],
        ("console.batches", "Demand-planning batches"))


def _order_processor(engine: sa.Engine, settings: Settings, tenant_id: str) -> HealthCheck:
    waiting, oldest = received_backlog(engine, tenant_id)
    failed = failure_counts(engine, tenant_id)
    waited = age_seconds(utc_now(), oldest)
    behind = waited is not None and waited > settings.pipeline_stale_seconds
    if behind:
        summary = f"an order has waited {duration(waited)} to be opened"
    elif failed[PARKED]:
        summary = f"{failed[PARKED]:,} order(s) parked after failing every attempt: retry them"
    else:
        summary = "orders are opened as they come" if waiting == 0 else f"{waiting} order(s) being opened"
    return HealthCheck("Order processor", ATTENTION if behind or failed[PARKED] else OK, summary, [
        Figure("Orders RECEIVED, waiting to be opened", f"{waiting:,}"),
        Figure("Oldest of them waits", duration(waited)),
        Figure("Parked after failing every attempt", f"{failed[PARKED]:,}"),
        Figure("Failed, tried again after a backoff", f"{failed[RETRYING]:,}")],
        ("console.attention", "Orders and holds"))


@dataclass(frozen=True)
class StoreDelivery:
    """An eCom store with its event destination (None: none set; never its secret) and its delivery state, as the
    admin API answers them."""

    id: str
    number: str
    name: str
    destination: dict[str, Any] | None
    state: dict[str, Any]

    @property
    def status(self) -> str:
        if self.state["credentialsRefused"] or self.state["consecutiveFailures"]:
            return FAILING
        return ATTENTION if self.state["deadLetters"] else OK

    @property
    def target(self) -> str:
        """Where its events go, for a person: a webhook's address without query string or user info (they may hold
        a token), a Service Bus entity by namespace and name."""
        if self.destination is None:
            return "no destination: events are discarded"
        if self.destination["kind"] == "WEBHOOK":
            url = urlsplit(self.destination["url"])
            return urlunsplit((url.scheme, url.hostname + (f":{url.port}" if url.port else ""), url.path, "", ""))
        return f"{self.destination['endpoint']} / {self.destination['entityPath']}"


def _destination(engine: sa.Engine, tenant_id: str, ecom_store_id: str) -> dict[str, Any] | None:
    try:
        return admin_operations.show_destination(engine, tenant_id, ecom_store_id)
    except NotFound:
        return None


def event_stores(engine: sa.Engine, tenant_id: str) -> list[StoreDelivery]:
    return [StoreDelivery(row.id, row.number, row.name, _destination(engine, tenant_id, row.id),
                          admin_operations.event_delivery(engine, tenant_id, row.id))
            for row in list_ecom_stores(engine, tenant_id)]


def _event_delivery(stores: list[StoreDelivery]) -> HealthCheck:
    failing = [store for store in stores if store.status == FAILING]
    dead_letters = sum(store.state["deadLetters"] for store in stores)
    refused = sum(store.state["credentialsRefused"] for store in stores)
    if failing:
        status, summary = FAILING, f"{len(failing)} eCom store(s) failing: {', '.join(s.number for s in failing)}"
    elif dead_letters:
        status, summary = ATTENTION, f"{dead_letters:,} dead letter(s) wait for a replay"
    else:
        status, summary = OK, "every eCom store is delivered to"
    return HealthCheck("Event delivery", status, summary, [
        Figure("eCom stores", f"{len(stores)}"),
        Figure("Without a destination", f"{sum(store.destination is None for store in stores)}"),
        Figure("Events still to deliver", f"{sum(store.state['backlog'] for store in stores):,}"),
        Figure("Dead letters", f"{dead_letters:,}"),
        Figure("Stores failing now", f"{len(failing)}"),
        Figure("Stores whose credentials are refused", f"{refused}")],
        ("console.events", "Event delivery"))


# Demand planning: a tenant's planning runs (the batches sharing a generatedAt) and each batch.


@dataclass
class PlanningRun:
    generated_at: str
    batches: list[dict[str, Any]] = field(default_factory=list)

    @property
    def states(self) -> Counter[str]:
        return Counter(batch["progress"] for batch in self.batches)

    @property
    def expected_batches(self) -> int | None:
        return max((batch["batchTotal"] or 0 for batch in self.batches), default=0) or None

    @property
    def counts(self) -> dict[str, int]:
        """Items of the run's finished batches by outcome (accepted: applied)."""
        finished = [batch["counts"] for batch in self.batches if batch["counts"]]
        return {"items": sum(batch["itemCount"] for batch in self.batches),
                **{series.name: sum(counts["applied" if series.name == "accepted" else series.name]
                                    for counts in finished) for series in RUN_SERIES}}

    @property
    def rejection_codes(self) -> Counter[str]:
        """Codes of the rejected items listed (a batch lists its first 500)."""
        return Counter(item["code"] for batch in self.batches for item in batch["rejectedItems"] or ())


def batch_runs(engine: sa.Engine, tenant_id: str, kind: str,
               before: datetime | None) -> tuple[list[PlanningRun], str | None, StackedBars]:
    """A page of the tenant's runs of one kind, newest first, with the generatedAt to continue before, and the chart
    of their items' outcomes (oldest run on the left)."""
    times, next_before = run_times(engine, tenant_id, kind, before=before, limit=RUNS_PER_PAGE)
    runs: dict[str, PlanningRun] = {}
    for row in batches_of_runs(engine, tenant_id, kind, times):
        status = batch_status(row)
        runs.setdefault(status["generatedAt"], PlanningRun(status["generatedAt"])).batches.append(status)
    ordered = list(runs.values())
    chart = StackedBars(
        chart_id="runs-chart", title=f"Items per planning run ({_kind_name(kind)})",
        description="Stacked bars, one per run in generatedAt order: items accepted, superseded, locked and rejected.",
        category_name="Run (UTC)", categories=tuple(_short_instant(run.generated_at)
                                                                 for run in reversed(ordered)),
        series=RUN_SERIES, values=tuple(tuple(run.counts[series.name] for series in RUN_SERIES)
                                        for run in reversed(ordered)))
    return ordered, next_before.isoformat() if next_before else None, chart


def _kind_name(kind: str) -> str:
    return "sales forecasts" if kind == SALES_FORECAST else "replenishment parameters"


def _short_instant(instant: str) -> str:
    """2026-11-21T02:00:00Z → 11-21 02:00 (the table beside the chart has the whole instant)."""
    return f"{instant[5:10]} {instant[11:16]}"


@dataclass(frozen=True)
class BatchPage:
    status: dict[str, Any]
    rejected: list[dict[str, Any]]  # this page's rejected items
    page: int
    pages: int
    rejection_codes: Counter[str]

    @property
    def can_rerun(self) -> bool:
        return self.status["progress"] == FAILED

    @property
    def unfinished(self) -> bool:
        return self.status["progress"] in (PENDING, PROCESSING)


def batch(engine: sa.Engine, tenant_id: str, batch_id: str, page: int) -> BatchPage:
    row = get_batch(engine, tenant_id, batch_id)
    if row is None:
        raise NotFound(f"No demand planning batch {batch_id} in this tenant.")
    status = batch_status(row)
    items = status["rejectedItems"] or []
    pages = max(1, -(-len(items) // REJECTED_ITEMS_PER_PAGE))
    page = min(max(page, 1), pages)
    start = (page - 1) * REJECTED_ITEMS_PER_PAGE
    return BatchPage(status, items[start:start + REJECTED_ITEMS_PER_PAGE], page, pages,
                     Counter(item["code"] for item in items))


# Event delivery of one eCom store.


@dataclass(frozen=True)
class StorePage:
    store: StoreDelivery
    figures: list[Figure]
    failing: list[Any]
    dead_letters: dict[str, Any]  # the admin API's page: items, nextAfter
    answer: str | None
    chart: StackedBars


def delivery_figures(state: dict[str, Any]) -> list[Figure]:
    """The figures of the delivery state the admin API answers (GET …/event_delivery); a figure it gains is one
    more line here."""
    return [
        Figure("Events still to deliver", f"{state['backlog']:,}"),
        Figure("Oldest undelivered event", "none waiting" if state["oldestUndeliveredAgeSeconds"] is None else
               f"{duration(state['oldestUndeliveredAgeSeconds'])} old ({state['oldestUndeliveredTime']})"),
        Figure("Dead letters", f"{state['deadLetters']:,}"),
        Figure("Dead letters by answer", ", ".join(f"{answer} ×{count:,}" for answer, count in sorted(
            state["deadLettersByAnswer"].items(), key=lambda item: -item[1])) or "none"),
        Figure("Entities waiting to retry (lanes in backoff)", f"{state['lanesInBackoff']:,}"),
        Figure("Last delivered", state["lastDeliveredTime"] or "never"),
        Figure("Last delivered event", state["lastDeliveredEventId"] or "—"),
        Figure("Failures since the last delivery", f"{state['consecutiveFailures']:,}"),
        Figure("Last failure", state["lastFailureTime"] or "—"),
        Figure("Last failure's answer", state["lastError"] or "—"),
        Figure("Credentials refused", "yes: tried again only slowly" if state["credentialsRefused"] else "no"),
    ]


def event_store(engine: sa.Engine, tenant_id: str, ecom_store_id: str, query: dict[str, str]) -> StorePage:
    """`query`: the dead letters' `after` and `answer` as the page's address gives them."""
    state = admin_operations.event_delivery(engine, tenant_id, ecom_store_id)  # NotFound for another tenant's
    row = next(row for row in list_ecom_stores(engine, tenant_id) if row.id == ecom_store_id)
    store = StoreDelivery(row.id, row.number, row.name, _destination(engine, tenant_id, ecom_store_id), state)
    letters = admin_operations.list_dead_letters(engine, tenant_id, ecom_store_id,
                                                 {**query, "limit": str(DEAD_LETTERS_PER_PAGE)})
    now = utc_now()
    hours = deliveries_per_hour(engine, tenant_id, ecom_store_id, now - timedelta(hours=CHART_HOURS - 1), now)
    chart = StackedBars(
        chart_id="delivery-chart", title=f"Events per hour, last {CHART_HOURS} hours (UTC)",
        description="Stacked bars, one per hour: events the destination accepted, and events that went to the "
                    "dead letters.",
        category_name="Hour (UTC)", categories=tuple(hour.hour.strftime("%H:00") for hour in hours),
        series=(Series("delivered", "good"), Series("failed (dead-lettered)", "bad")),
        values=tuple((hour.delivered, hour.dead_lettered) for hour in hours))
    return StorePage(store, delivery_figures(state), failing_events(engine, tenant_id, ecom_store_id,
                                                                    FAILING_EVENTS_SHOWN),
                     letters, query.get("answer"), chart)


# Orders needing attention (the admin API's list of orders that failed to open) and click-and-collect holds.


class AttentionQuery(Shape):
    """Where each list of the page continues (its nextAfter), as the page's address gives them."""

    parkedAfter: Uuid | None = None
    retryingAfter: Uuid | None = None
    cartsAfter: Uuid | None = None


@dataclass(frozen=True)
class HeldCart:
    """An ACTIVE cart and when it expires (made + the hold time)."""

    cart: ActiveCart
    expires_at: datetime
    left_seconds: float  # below zero: past its expiry, released at the workers' next round
    soon: timedelta

    @property
    def status(self) -> str:
        if self.left_seconds <= 0:
            return FAILING
        return ATTENTION if self.left_seconds <= self.soon.total_seconds() else OK

    @property
    def left(self) -> str:
        return time_left(self.left_seconds)

    @property
    def units(self) -> str:
        return decimal(self.cart.units)

    @property
    def parked_at(self) -> str:
        return instant(self.cart.created_time)

    @property
    def expires(self) -> str:
        return instant(self.expires_at)


def time_left(seconds: float) -> str:
    if seconds <= 0:
        return f"past its expiry by {duration(-seconds)}: released at the workers' next round"
    return f"expires in {duration(seconds)}"


@dataclass(frozen=True)
class AttentionPage:
    figures: list[Figure]
    parked: dict[str, Any]  # the admin API's pages of failed orders: items, nextAfter
    retrying: dict[str, Any]
    carts: list[HeldCart]
    next_cart: str | None
    ecom_stores: dict[str, str]  # id → "number name"


def expires_soon(hold: timedelta) -> timedelta:
    """A cart within this of its expiry needs attention: a third of the hold time (24 h of the default 72 h)."""
    return hold / 3


def _hours(span: timedelta) -> str:
    """A span in hours, as the hold time is configured: "72 h", "1.5 h"."""
    return f"{span.total_seconds() / 3600:g} h"


def attention(engine: sa.Engine, tenant_id: str, hold: timedelta, query: AttentionQuery) -> AttentionPage:
    def failed(processing: str, after: str | None) -> dict[str, Any]:
        return admin_operations.list_failed_orders(engine, tenant_id, {
            "processing": processing, "limit": str(ORDERS_PER_PAGE), **({"after": after} if after else {})})

    now, soon = utc_now(), expires_soon(hold)
    counts = failure_counts(engine, tenant_id)
    active, due_soon = active_cart_counts(engine, tenant_id, made_by=now + soon - hold)
    carts, next_cart = active_carts(engine, tenant_id, after=query.cartsAfter, limit=CARTS_PER_PAGE)
    return AttentionPage(
        figures=[Figure("Orders parked after failing every attempt", f"{counts[PARKED]:,}"),
                 Figure("Orders failed, tried again after a backoff", f"{counts[RETRYING]:,}"),
                 Figure("Click-and-collect carts held", f"{active:,}"),
                 Figure(f"Of them expiring within {_hours(soon)}", f"{due_soon:,}"),
                 Figure("Hold time (PIA_CLICK_AND_COLLECT_HOLD_HOURS)", _hours(hold))],
        parked=failed(PARKED, query.parkedAfter), retrying=failed(RETRYING, query.retryingAfter),
        carts=[HeldCart(cart, cart.created_time + hold, (cart.created_time + hold - now).total_seconds(), soon)
               for cart in carts],
        next_cart=next_cart,
        ecom_stores={row.id: f"{row.number} {row.name}" for row in list_ecom_stores(engine, tenant_id)})


@dataclass(frozen=True)
class CartPage:
    cart: dict[str, Any]  # the admin API's parked cart
    ecom_store: str
    held: str | None  # how long it is still held (ACTIVE only)


def cart(engine: sa.Engine, tenant_id: str, parked_cart_id: str, hold: timedelta) -> CartPage:
    shown = admin_operations.show_cart(engine, tenant_id, parked_cart_id, hold)  # NotFound for another tenant's
    stores = {row.id: f"{row.number} {row.name}" for row in list_ecom_stores(engine, tenant_id)}
    held = (time_left((datetime.fromisoformat(shown["expiresAt"]) - utc_now()).total_seconds())
            if shown["expiresAt"] else None)
    return CartPage(shown, stores.get(shown["ecomStoreId"], shown["ecomStoreId"]), held)
