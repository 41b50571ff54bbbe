"""Removing an eCom store's event destination (issue 22 point 2), on both backends.

`DELETE …/event_destination` and `pia admin event-destination --remove` (directly and over the admin API) answer
204 (the command prints `removed`), or 404 when none is set. The store's events still to deliver are then discarded
as NO_DESTINATION in the same transaction, and so are those written while it has none when a destination is set
again: a destination gets only the events written after it was set. A destination set anew where one is (a new key)
keeps the backlog. The bridge here is the real outbox bridge, posting to webhook receivers that verify signatures.
"""

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from hypothesis.strategies import integers

from contracts import events as subjects
from db.destinations import DestinationSettings, remove_destination, set_destination
from db.event_delivery import NO_DESTINATION, StoreKey, dead_letter, mark_delivered, record_failure
from db.ids import new_id
from db.outbox import pair_events
from db.schema import event_outbox
from db.secrets import secret_box
from events.bridge import run_bridge
from serving.admin import issue_client
from serving.cli import main
from settings import Settings
from tests.conftest import bearer, get_token, wait_for
from tests.test_bridge import FAST, SECRET, add_stores, quick_webhook
from tests.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.timeout(240)  # a guard: the property takes tens of seconds on a loaded machine


def write(engine: sa.Engine, store: StoreKey, count: int) -> list[str]:
    """`count` events for the store, written as a change writes them; their ids in outbox order."""
    entities = [new_id() for _ in range(count)]
    with engine.begin() as conn:
        pair_events(conn, store.tenant_id, subjects.INVENTORY_UPDATED, [(store.ecom_store_id, e) for e in entities])
        return list(conn.scalars(sa.select(event_outbox.c.event_id).where(
            event_outbox.c.tenant_id == store.tenant_id, event_outbox.c.entity_id.in_(entities))
            .order_by(event_outbox.c.event_id)))


def rows(engine: sa.Engine, store: StoreKey) -> dict[str, sa.Row]:
    with engine.connect() as conn:
        return {row.event_id: row for row in conn.execute(sa.select(event_outbox).where(
            event_outbox.c.tenant_id == store.tenant_id, event_outbox.c.ecom_store_id == store.ecom_store_id))}


def discarded(engine: sa.Engine, store: StoreKey) -> set[str]:
    return {event_id for event_id, row in rows(engine, store).items()
            if row.delivered_time is not None and row.last_error == NO_DESTINATION}


def backlog(engine: sa.Engine, store: StoreKey) -> set[str]:
    return {event_id for event_id, row in rows(engine, store).items()
            if row.delivered_time is None and row.dead_letter_time is None}


def delivered(receiver: WebhookReceiver) -> list[str]:
    """The event ids a receiver got (delivery is at least once), in outbox order: each is another entity's, and
    entities go out side by side, so their order of arrival is not the outbox's."""
    return sorted(set(delivery.webhook_id for delivery in receiver.deliveries))


def webhook(url: str) -> DestinationSettings:
    return DestinationSettings(kind="WEBHOOK", endpoint=url, entity_path=None, shared_access_key_name=None,
                               secret=SECRET)


# --- the admin API and the command ------------------------------------------------------------------------------

@pytest.fixture
def operator(engine: sa.Engine, http: httpx.Client) -> dict[str, Any]:
    """A tenant with two eCom stores (no back-office data: events are written directly), its admin client and the
    environment `pia admin` reaches the session's store with."""
    tenant_id, store_ids = add_stores(engine, 2)
    client_id, secret = issue_client(engine, tenant_id, "operator", "admin", None, ())
    world = {"id": tenant_id}
    token = get_token(http, world, {"clientId": client_id, "clientSecret": secret, "scope": "admin",
                                    "resource": None})
    return {"stores": [StoreKey(tenant_id, store_id) for store_id in store_ids], "headers": bearer(token),
            "path": f"/admin/v1/tenants/{tenant_id}/ecom_stores/{{}}/event_destination",
            "env": {"PIA_ADMIN_CLIENT_ID": client_id, "PIA_ADMIN_CLIENT_SECRET": secret}}


def test_delete_discards_the_backlog_and_answers_404_when_none_is_set(engine, http, operator) -> None:
    store, other = operator["stores"]
    url, headers = operator["path"].format(store.ecom_store_id), operator["headers"]
    hook = {"kind": "WEBHOOK", "url": "https://hooks.example.com/pia", "secret": SECRET + "-0123456789"}
    assert http.delete(url, headers=headers).status_code == 404  # none set yet
    assert http.put(url, json=hook, headers=headers).status_code == 200
    delivered, dead, waiting = write(engine, store, 1), write(engine, store, 1), write(engine, store, 3)
    mark_delivered(engine, store, delivered)
    record_failure(engine, store, dead[0], "HTTP 410", answer="410", counted=True, credentials_refused=False)
    dead_letter(engine, store, dead[0])
    others = write(engine, other, 2)

    removed = http.delete(url, headers=headers)
    assert (removed.status_code, removed.content) == (204, b"")
    held = rows(engine, store)
    assert {event_id for event_id in waiting if held[event_id].last_error == NO_DESTINATION
            and held[event_id].delivered_time is not None} == set(waiting)
    assert held[delivered[0]].last_error is None  # what was delivered, and the dead letter, stay as they were
    assert held[dead[0]].dead_letter_time is not None and held[dead[0]].last_error == "HTTP 410"
    assert backlog(engine, other) == set(others)  # another store's events are not touched
    state = http.get(url.replace("event_destination", "event_delivery"), headers=headers).json()
    assert (state["backlog"], state["deadLetters"], state["lastError"]) == (0, 1, NO_DESTINATION)
    assert http.get(url, headers=headers).status_code == 404
    again = http.delete(url, headers=headers)
    assert (again.status_code, again.json()["error"]) == (404, "NOT_FOUND")
    foreign = http.delete(operator["path"].format(new_id()), headers=headers)
    assert foreign.status_code == 404

    # Written while none is set, then a destination is set: those are discarded, later ones wait for it.
    meanwhile = write(engine, store, 2)
    assert http.put(url, json=hook, headers=headers).status_code == 200
    assert set(meanwhile) <= discarded(engine, store)
    after = write(engine, store, 2)
    # Set anew where one is set (a rotated secret): the backlog stays for the new settings.
    assert http.put(url, json={**hook, "secret": SECRET + "-rotated-key"}, headers=headers).status_code == 200
    assert backlog(engine, store) == set(after)


def test_the_command_removes_directly_and_over_the_admin_api(engine, settings, server, operator) -> None:
    store = operator["stores"][0]
    env = {"PIA_DATA_DIR": str(settings.data_dir), "PIA_DATABASE_URL": settings.database_url,
           "PIA_SECRET_KEY": settings.secret_key.get_secret_value(), "PIA_ADMIN_URL": "", **operator["env"]}
    box = secret_box(settings)
    command = ["admin", "event-destination", "--tenant", store.tenant_id, "--ecom-store", store.ecom_store_id,
               "--remove"]
    for way in ([], ["--url", server.url]):
        set_destination(engine, box, store.tenant_id, store.ecom_store_id, webhook("https://hooks.example.com/x"))
        waiting = write(engine, store, 2)
        done = CliRunner().invoke(main, [*command, *way], env=env)
        assert done.exit_code == 0, done.output
        assert json.loads(done.stdout) == {"ecomStoreId": store.ecom_store_id, "removed": True}
        assert set(waiting) <= discarded(engine, store) and not backlog(engine, store)
        refused = CliRunner().invoke(main, [*command, *way], env=env)
        assert refused.exit_code == 1 and json.loads(refused.stderr)["error"] == "NOT_FOUND", refused.output


# --- delivery: what a destination set again gets ----------------------------------------------------------------

class RunningBridge:
    """The outbox bridge on its own event loop in a thread, until stopped."""

    def __init__(self, settings: Settings, engine: sa.Engine) -> None:
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._loop.run_until_complete, daemon=True, args=(
            run_bridge(settings, engine, self._stop, destination_factory=quick_webhook),))
        self._thread.start()

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "the bridge did not stop"
        self._loop.close()


@pytest.fixture
def fast(own_store: tuple[Settings, sa.Engine]) -> tuple[Settings, sa.Engine]:
    settings, engine = own_store
    return settings.with_changes(**FAST), engine


@pytest.fixture
def receivers() -> Iterator[Callable[[], WebhookReceiver]]:
    """Makes started receivers, each stopped at the end."""
    made: list[WebhookReceiver] = []

    def make() -> WebhookReceiver:
        made.append(WebhookReceiver(SECRET.encode()).start())
        return made[-1]

    yield make
    for receiver in made:
        receiver.stop()


def test_a_broken_destination_removed_and_replaced_gets_only_new_events(fast, receivers) -> None:
    """The operator's case: the store's receiver fails, events pile up in backoff; the destination is removed and
    later a new one set: the new receiver gets only what was written after it, the old backlog never arrives."""
    settings, engine = fast
    settings = settings.with_changes(bridge={"max_attempts": 1000})  # the failing receiver's events stay
    tenant_id, (store_id,) = add_stores(engine, 1)
    store, box, old, new = StoreKey(tenant_id, store_id), secret_box(settings), receivers(), receivers()
    set_destination(engine, box, tenant_id, store_id, webhook(old.url))
    bridge = RunningBridge(settings, engine)
    try:
        first = write(engine, store, 3)
        wait_for(lambda: old.event_ids() == set(first) and not backlog(engine, store), 30,
                 "the first events at the old receiver, marked delivered")
        old.fail_with(503)
        piled = write(engine, store, 4)
        wait_for(lambda: old.attempts >= len(first) + 2, 30, "the bridge to try the failing receiver")
        assert remove_destination(engine, tenant_id, store_id)
        meanwhile = write(engine, store, 2)
        set_destination(engine, box, tenant_id, store_id, webhook(new.url))
        fresh = write(engine, store, 3)
        wait_for(lambda: new.event_ids() == set(fresh) and not backlog(engine, store), 30,
                 "the new events at the new receiver")
        old.behave()
    finally:
        bridge.stop()
    assert old.event_ids() == set(first)
    assert delivered(new) == fresh  # nothing older
    assert discarded(engine, store) == set(piled) | set(meanwhile)


def test_removal_and_the_bridge_writing_the_same_rows_both_go_through(fast) -> None:
    """An operator removes or sets the destination while the bridge records failures, dead letters and deliveries of
    the same rows (on DuckDB a concurrent update of a row is a conflict): neither side fails, and every event ends
    either as the bridge left it or discarded, none still to deliver."""
    _, engine = fast
    tenant_id, (store_id,) = add_stores(engine, 1)
    store, box = StoreKey(tenant_id, store_id), secret_box(fast[0])
    rounds, errors = 30, []
    events = write(engine, store, 4 * rounds)
    stop = threading.Event()

    def bridge_writes() -> None:
        """What the bridge writes of its failing and succeeding attempts, as fast as it can."""
        try:
            for n in range(4 * rounds):
                if stop.is_set():
                    return
                event = events[n]
                record_failure(engine, store, event, "HTTP 503", answer="503", counted=True,
                               credentials_refused=False, lanes_in_backoff=1)
                if n % 3 == 0:
                    dead_letter(engine, store, event)
                elif n % 3 == 1:
                    mark_delivered(engine, store, [event])
        except Exception as error:  # noqa: BLE001 - the test's finding
            errors.append(error)

    writer = threading.Thread(target=bridge_writes)
    writer.start()
    try:
        for _ in range(rounds):
            set_destination(engine, box, tenant_id, store_id, webhook("https://hooks.example.com/pia"))
            assert remove_destination(engine, tenant_id, store_id)
    finally:
        stop.set()
        writer.join(timeout=60)
    assert not writer.is_alive() and errors == []
    assert remove_destination(engine, tenant_id, store_id) is False and not backlog(engine, store)


class DestinationLife(RuleBasedStateMachine):
    """Random lives of one eCom store's destination: events written, the destination set, set anew, removed, and
    the bridge run until nothing is left to deliver. The model: an event is delivered, once, to the receiver of the
    destination that was set when it was written, unless that destination was removed before the bridge ran;
    every other event is discarded (NO_DESTINATION), never delivered to a destination set later."""

    def __init__(self, settings: Settings, engine: sa.Engine, make_receiver: Callable[[], WebhookReceiver]) -> None:
        super().__init__()
        self.settings, self.engine, self.make_receiver = settings, engine, make_receiver
        tenant_id, (store_id,) = add_stores(engine, 1)
        self.store, self.box = StoreKey(tenant_id, store_id), secret_box(settings)
        self.receiver: WebhookReceiver | None = None  # the current destination's receiver; None: none set
        self.pending: list[str] = []  # written, still to deliver as the model sees it
        self.expected: dict[WebhookReceiver, list[str]] = {}
        self.dropped: set[str] = set()

    @rule(count=integers(1, 4))
    def write_events(self, count: int) -> None:
        self.pending += write(self.engine, self.store, count)

    @rule()
    def set_destination(self) -> None:
        if self.receiver is None:  # set where none was: what was written meanwhile is discarded
            self.dropped.update(self.pending)
            self.pending = []
            self.receiver = self.make_receiver()
            self.expected[self.receiver] = []
        # Set anew where one is: a new modified time, the same receiver, the backlog kept.
        set_destination(self.engine, self.box, self.store.tenant_id, self.store.ecom_store_id,
                        webhook(self.receiver.url))

    @rule()
    def remove_destination(self) -> None:
        removed = remove_destination(self.engine, self.store.tenant_id, self.store.ecom_store_id)
        assert removed == (self.receiver is not None)
        if removed:  # with none set, nothing happens (404): what waits is discarded when the bridge meets it
            self.dropped.update(self.pending)
            self.pending, self.receiver = [], None

    @precondition(lambda self: self.pending)
    @rule()
    def deliver(self) -> None:
        bridge = RunningBridge(self.settings, self.engine)
        try:
            wait_for(lambda: not backlog(self.engine, self.store), 30, "the bridge to settle the backlog")
        finally:
            bridge.stop()
        if self.receiver is None:
            self.dropped.update(self.pending)
        else:
            self.expected[self.receiver] += self.pending
        self.pending = []

    @invariant()
    def outbox_and_receivers_agree_with_the_model(self) -> None:
        for receiver, event_ids in self.expected.items():
            assert delivered(receiver) == event_ids
        assert discarded(self.engine, self.store) == self.dropped
        assert backlog(self.engine, self.store) == set(self.pending)


LIVES = hypothesis_settings(max_examples=12, stateful_step_count=8, deadline=None, database=None,
                            suppress_health_check=list(HealthCheck))


def test_a_destination_gets_only_events_written_while_it_was_set(fast, receivers) -> None:
    settings, engine = fast
    run_state_machine_as_test(lambda: DestinationLife(settings, engine, receivers), settings=LIVES)

