"""A badly behaved receiver hurts only what it refuses (issue 17): the embedded bridge on both backends, a real
webhook receiver over a socket, the default retry policy and attempt timeout (only the outbox poll is made short,
so that the figures measure delivery, not the wait for the next poll).

The time bounds are the issue's: a permanent answer is settled within 2 s (a transient one would be tried again
after backoffs of 1 s, 2 s, …), and other entities' events arrive within 5 s although one entity's POSTs fail or
hang (a hanging POST lasts the 10 s attempt timeout, and before lanes one store's events waited behind it).
"""

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from contracts import events as subjects
from db.destinations import DestinationSettings, set_destination
from db.event_operations import delivery_state
from db.ids import new_id
from db.outbox import pair_events
from db.schema import ecom_stores, event_outbox
from db.secrets import secret_box
from db.tenants import create_tenant
from events.bridge import run_bridge
from settings import Settings
from tests.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.timeout(60)
SECRET = "lanes test secret"


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(SECRET.encode()) as running:
        yield running


@pytest.fixture
def world(own_store: tuple[Settings, sa.Engine], receiver: WebhookReceiver) -> tuple[Settings, sa.Engine, str, str]:
    """A tenant with one eCom store whose webhook is the receiver; settings as shipped but a short outbox poll."""
    settings, engine = own_store
    settings = settings.with_changes(bridge={"poll_seconds": 0.05})
    tenant_id = create_tenant(engine, f"lanes {new_id()}", is_test=False)
    store_id = new_id()
    with engine.begin() as conn:
        conn.execute(ecom_stores.insert().values(id=store_id, tenant_id=tenant_id, company_id=new_id(), number="E1",
                                                 name="shop", released=True))
    set_destination(engine, secret_box(settings), tenant_id, store_id, DestinationSettings(
        kind="WEBHOOK", endpoint=receiver.url, entity_path=None, shared_access_key_name=None, secret=SECRET))
    return settings, engine, tenant_id, store_id


def write(engine: sa.Engine, tenant_id: str, store_id: str, entities: list[str], rounds: int) -> dict[str, list[str]]:
    """`rounds` transactions, each announcing every entity once; each entity's event ids in outbox order."""
    for _ in range(rounds):
        with engine.begin() as conn:
            pair_events(conn, tenant_id, subjects.PRODUCT_UPDATED, [(store_id, entity) for entity in entities])
    with engine.connect() as conn:
        rows = conn.execute(sa.select(event_outbox.c.event_id, event_outbox.c.entity_id)
                            .where(event_outbox.c.tenant_id == tenant_id, event_outbox.c.ecom_store_id == store_id)
                            .order_by(event_outbox.c.event_id)).all()
    written: dict[str, list[str]] = {entity: [] for entity in entities}
    for event_id, entity_id in rows:
        written[entity_id].append(event_id)
    return written


def rows(engine: sa.Engine, tenant_id: str) -> dict[str, Any]:
    with engine.connect() as conn:
        return {row.event_id: row for row in conn.execute(
            sa.select(event_outbox).where(event_outbox.c.tenant_id == tenant_id))}


class RunningBridge:
    """The embedded bridge in the test's event loop, timed from its start."""

    def __init__(self, settings: Settings, engine: sa.Engine) -> None:
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(run_bridge(settings, engine, self._stop))
        self.started = time.monotonic()

    async def within(self, seconds: float, condition: Callable[[], bool], what: str) -> float:
        """Wait until `condition()` holds, at most `seconds` after the start; how long it took."""
        while not await asyncio.to_thread(condition):
            assert not self._task.done(), f"the bridge ended: {self._task.exception()!r}"
            if time.monotonic() - self.started > seconds:
                pytest.fail(f"{what}: not within {seconds} s")
            await asyncio.sleep(0.02)
        return time.monotonic() - self.started

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.wait_for(self._task, 15)


async def test_a_410_dead_letters_the_event_after_exactly_one_post(
        world: tuple[Settings, sa.Engine, str, str], receiver: WebhookReceiver) -> None:
    settings, engine, tenant_id, store_id = world
    ((gone,),) = write(engine, tenant_id, store_id, [new_id()], rounds=1).values()
    receiver.refuse({gone}, 410)

    bridge = RunningBridge(settings, engine)
    try:
        await bridge.within(2.0, lambda: rows(engine, tenant_id)[gone].dead_letter_time is not None,
                            "the 410 event dead-lettered")
        await asyncio.sleep(0.5)  # anything more would have been sent by now (the first backoff is 0.5–1 s)
    finally:
        await bridge.stop()

    row = rows(engine, tenant_id)[gone]
    assert receiver.posts_of(gone) == 1
    assert (row.attempts, row.last_answer, row.delivered_time) == (1, "410", None)
    assert "answered 410" in row.last_error
    state = delivery_state(engine, tenant_id, store_id)
    assert (state.dead_letters, state.dead_letters_by_answer, state.backlog) == (1, {"410": 1}, 0)


async def test_400_for_one_entity_dead_letters_its_events_while_the_others_arrive(
        world: tuple[Settings, sa.Engine, str, str], receiver: WebhookReceiver) -> None:
    settings, engine, tenant_id, store_id = world
    refused, *others = entities = [new_id() for _ in range(6)]
    written = write(engine, tenant_id, store_id, entities, rounds=3)
    receiver.refuse(set(written[refused]), 400)
    wanted = {event_id for entity in others for event_id in written[entity]}

    bridge = RunningBridge(settings, engine)
    try:
        await bridge.within(5.0, lambda: receiver.event_ids() >= wanted, "the other entities' events")
        await bridge.within(5.0, lambda: all(rows(engine, tenant_id)[event_id].dead_letter_time
                                             for event_id in written[refused]), "the refused entity's dead letters")
    finally:
        await bridge.stop()

    assert [receiver.posts_of(event_id) for event_id in written[refused]] == [1, 1, 1]
    for entity in others:  # in order per entity
        assert [delivery.webhook_id for delivery in receiver.deliveries
                if delivery.body["entityId"] == entity] == written[entity]
    assert delivery_state(engine, tenant_id, store_id).dead_letters_by_answer == {"400": 3}


async def test_a_receiver_hanging_on_one_entity_holds_up_only_that_entity(
        world: tuple[Settings, sa.Engine, str, str], receiver: WebhookReceiver) -> None:
    settings, engine, tenant_id, store_id = world
    assert settings.bridge.attempt_timeout_seconds == 10  # the default: the hanging POST outlasts the test's bound
    stuck, *others = entities = [new_id() for _ in range(6)]
    written = write(engine, tenant_id, store_id, entities, rounds=3)
    receiver.hang({written[stuck][0]})
    wanted = {event_id for entity in others for event_id in written[entity]}

    bridge = RunningBridge(settings, engine)
    try:
        took = await bridge.within(5.0, lambda: receiver.event_ids() >= wanted, "the other entities' events")
        assert took < settings.bridge.attempt_timeout_seconds
        assert receiver.in_flight == 1 and receiver.posts_of(written[stuck][0]) == 1  # still hanging
        assert not receiver.event_ids() & set(written[stuck])  # its later events wait behind it, in order
        receiver.behave()  # the hanging POST is answered 503: a transient failure, tried again after a backoff
        await bridge.within(15.0, lambda: receiver.event_ids() >= set(written[stuck]), "the stuck entity's events")
    finally:
        receiver.behave()
        await bridge.stop()

    assert [delivery.webhook_id for delivery in receiver.deliveries
            if delivery.body["entityId"] == stuck] == written[stuck]
    row = rows(engine, tenant_id)[written[stuck][0]]
    assert row.attempts == 1 and row.last_answer == "503" and row.delivered_time is not None


async def test_two_outbox_bridges_on_postgresql_take_turns_per_store(
        own_store: tuple[Settings, sa.Engine], backend: str, receiver: WebhookReceiver) -> None:
    """`pia bridge` without Kafka, twice on one PostgreSQL database: a store is claimed (a session advisory lock)
    by one process at a time, so each event goes out once and each entity's in order."""
    if backend != "postgresql":
        pytest.skip("several bridge processes share PostgreSQL only (the DuckDB file has one process)")
    settings, engine = own_store
    settings = settings.with_changes(bridge={"poll_seconds": 0.05, "batch_size": 10})
    tenant_id = create_tenant(engine, f"lanes {new_id()}", is_test=False)
    store_ids = [new_id() for _ in range(4)]
    with engine.begin() as conn:
        conn.execute(ecom_stores.insert(), [{"id": store_id, "tenant_id": tenant_id, "company_id": new_id(),
                                             "number": f"E{n}", "name": "shop", "released": True}
                                            for n, store_id in enumerate(store_ids)])
    for store_id in store_ids:
        set_destination(engine, secret_box(settings), tenant_id, store_id, DestinationSettings(
            kind="WEBHOOK", endpoint=receiver.url, entity_path=None, shared_access_key_name=None, secret=SECRET))
    written = {store_id: write(engine, tenant_id, store_id, [new_id() for _ in range(10)], rounds=5)
               for store_id in store_ids}
    every = {event_id for of_store in written.values() for ids in of_store.values() for event_id in ids}
    receiver.slow_down(0.002)  # deliveries overlap the other bridge's polls
    other_engine = sa.create_engine(engine.url)  # a second process's own sessions, and so its own claims
    bridges = [RunningBridge(settings, engine), RunningBridge(settings, other_engine)]
    try:
        await bridges[0].within(30.0, lambda: receiver.event_ids() >= every, "every event")
        await bridges[0].within(30.0, lambda: all(row.delivered_time for row in rows(engine, tenant_id).values()),
                                "every row marked delivered")
    finally:
        for bridge in bridges:
            await bridge.stop()
        other_engine.dispose()

    arrived = [delivery.webhook_id for delivery in receiver.deliveries]
    assert len(arrived) == len(set(arrived)) == len(every)  # once each: no store was delivered by both at once
    for of_store in written.values():
        for entity, event_ids in of_store.items():
            assert [delivery.webhook_id for delivery in receiver.deliveries
                    if delivery.body["entityId"] == entity] == event_ids
