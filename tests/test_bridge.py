"""The bridge over real sockets: outbox rows (or Kafka records) to webhook receivers that verify every signature.

Embedded mode runs the bridge in the test's event loop against both backends; Kafka mode runs real `pia bridge`
processes in one consumer group against the Tansu test broker. The relay is another part: the Kafka tests publish
the records themselves, in the relay's format, and mark the rows published.
"""

import asyncio
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import sqlalchemy as sa
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import RecordMetadata

from contracts import events as subjects
from contracts.event_message import OutgoingEvent
from db.destinations import DestinationSettings, set_destination
from db.event_delivery import NO_DESTINATION, StoreKey, undelivered
from db.ids import new_id, utc_now
from db.outbox import pair_events
from db.schema import ecom_stores, event_delivery_state, event_outbox
from db.secrets import secret_box
from db.tenants import create_tenant
from events.bridge import run_bridge
from events.webhook import WebhookDestination
from settings import Settings
from tests.kafka_broker import KafkaBroker, kafka  # noqa: F401 - the fixture
from tests.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.timeout(60)  # a guard: each test takes seconds
PIA = str(Path(sys.executable).parent / "pia")
SECRET = "bridge test secret"
FAST = {"bridge": {"retry_base_seconds": 0.05, "retry_max_seconds": 0.2, "poll_seconds": 0.05, "batch_size": 50}}


def quick_webhook(settings: DestinationSettings) -> WebhookDestination:
    """The default webhook destination with a short timeout, so a misbehaving receiver cannot hold a test."""
    return WebhookDestination(settings, timeout=2.0)


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(SECRET.encode()) as running:
        yield running


@pytest.fixture
def other_receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(SECRET.encode()) as running:
        yield running


def add_stores(engine: sa.Engine, count: int) -> tuple[str, list[str]]:
    """A tenant with `count` eCom stores (no back-office data: the bridge needs none)."""
    tenant_id = create_tenant(engine, f"bridge {new_id()}", is_test=False)
    store_ids = [new_id() for _ in range(count)]
    with engine.begin() as conn:
        conn.execute(ecom_stores.insert(), [{"id": store_id, "tenant_id": tenant_id, "company_id": new_id(),
                                             "number": f"E{n}", "name": f"shop {n}", "released": True}
                                            for n, store_id in enumerate(store_ids)])
    return tenant_id, store_ids


def write_events(engine: sa.Engine, tenant_id: str, store_ids: list[str], per_store: int) -> dict[str, list[str]]:
    """Events written the way changes write them, in several transactions, each announcing the same entities
    again (a Kafka key is a store and an entity); each store's event ids in outbox order."""
    entities = [new_id() for _ in range(per_store // 4)]
    for _ in range(4):
        with engine.begin() as conn:
            pair_events(conn, tenant_id, subjects.INVENTORY_UPDATED,
                        [(store_id, entity_id) for store_id in store_ids for entity_id in entities])
    return {store_id: [event.event_id for event in undelivered(engine, StoreKey(tenant_id, store_id), 10_000)]
            for store_id in store_ids}


def point_at(settings: Settings, engine: sa.Engine, tenant_id: str, store_id: str, url: str) -> None:
    set_destination(engine, secret_box(settings), tenant_id, store_id,
                    DestinationSettings(kind="WEBHOOK", endpoint=url, entity_path=None, shared_access_key_name=None,
                                        secret=SECRET))


def outbox_rows(engine: sa.Engine, tenant_id: str) -> dict[str, Any]:
    with engine.connect() as conn:
        return {row.event_id: row for row in conn.execute(
            sa.select(event_outbox).where(event_outbox.c.tenant_id == tenant_id))}


def delivery_state(engine: sa.Engine, tenant_id: str, store_id: str) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.select(event_delivery_state).where(
            event_delivery_state.c.tenant_id == tenant_id, event_delivery_state.c.ecom_store_id == store_id)).first()


async def bridge_until(settings: Settings, engine: sa.Engine, done: Callable[[], Any], what: str,
                       timeout: float = 30) -> None:
    """Run the embedded bridge until `done()` holds, then stop it cleanly."""
    stop = asyncio.Event()
    running = asyncio.create_task(run_bridge(settings, engine, stop, destination_factory=quick_webhook))
    try:
        deadline = time.monotonic() + timeout
        while not await asyncio.to_thread(done):
            assert not running.done(), f"the bridge ended: {running.exception()!r}"
            if time.monotonic() > deadline:
                pytest.fail(f"waited {timeout} s for {what}")
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await asyncio.wait_for(running, 15)


@pytest.fixture
def fast(own_store: tuple[Settings, sa.Engine]) -> tuple[Settings, sa.Engine]:
    settings, engine = own_store
    return settings.with_changes(**FAST), engine


def assert_delivered_in_order_per_entity(receiver: WebhookReceiver, expected: dict[str, list[str]]) -> None:
    """Each entity's events arrived in outbox order (a store's events go out in lanes by entity, side by side)."""
    entity_of = {delivery.webhook_id: delivery.body["entityId"] for delivery in receiver.deliveries}
    first_arrivals = list(dict.fromkeys(delivery.webhook_id for delivery in receiver.deliveries))
    assert receiver.rejections == []
    for event_ids in expected.values():
        for entity_id in {entity_of[event_id] for event_id in event_ids}:
            in_outbox = [event_id for event_id in event_ids if entity_of[event_id] == entity_id]
            assert [event_id for event_id in first_arrivals if event_id in set(in_outbox)] == in_outbox


async def test_embedded_bridge_delivers_every_row_once_in_order_per_entity(
        fast: tuple[Settings, sa.Engine], receiver: WebhookReceiver) -> None:
    settings, engine = fast
    tenant_id, store_ids = add_stores(engine, 3)
    for store_id in store_ids:
        point_at(settings, engine, tenant_id, store_id, receiver.url)
    expected = write_events(engine, tenant_id, store_ids, 120)  # several batches per store
    total = sum(len(ids) for ids in expected.values())

    await bridge_until(settings, engine, lambda: len(receiver.deliveries) >= total, "every event")

    arrived = [delivery.webhook_id for delivery in receiver.deliveries]
    assert len(arrived) == len(set(arrived)) == total  # once each: nothing failed, so nothing was sent again
    assert_delivered_in_order_per_entity(receiver, expected)
    rows = outbox_rows(engine, tenant_id)
    unsettled = [(row.event_id, row.delivered_time, row.attempts, row.last_error) for row in rows.values()
                 if row.delivered_time is None or row.attempts != 0 or row.last_error is not None]
    assert unsettled == []
    first = receiver.deliveries[0]
    assert first.subject == subjects.INVENTORY_UPDATED
    assert first.body == orjson.loads(OutgoingEvent(first.webhook_id, rows[first.webhook_id].subject,
                                                    rows[first.webhook_id].entity_id, rows[first.webhook_id].datetime,
                                                    None).body())
    for store_id, event_ids in expected.items():
        state = delivery_state(engine, tenant_id, store_id)
        # Lanes go side by side: the last one marked is one of the store's events, not necessarily its last.
        assert state.last_delivered_event_id in event_ids
        assert (state.consecutive_failures, state.credentials_refused, state.lanes_in_backoff) == (0, False, 0)


async def test_a_receiver_failing_for_a_while_gets_everything_after_backoff(
        fast: tuple[Settings, sa.Engine], receiver: WebhookReceiver) -> None:
    settings, engine = fast
    settings = settings.with_changes(bridge={"max_attempts": 1000})
    tenant_id, (store_id,) = add_stores(engine, 1)
    point_at(settings, engine, tenant_id, store_id, receiver.url)
    receiver.fail_with(503, seconds=1.0)
    expected = write_events(engine, tenant_id, [store_id], 20)

    await bridge_until(settings, engine, lambda: receiver.distinct_deliveries() >= 20, "delivery after the outage")

    assert_delivered_in_order_per_entity(receiver, expected)
    rows = outbox_rows(engine, tenant_id)
    first = rows[expected[store_id][0]]
    assert first.attempts >= 2 and "503" in first.last_error  # the failures it outlived stay on record
    assert all(row.delivered_time is not None and row.dead_letter_time is None for row in rows.values())
    assert receiver.attempts > 20 + first.attempts - 1  # the retries did reach the receiver
    state = delivery_state(engine, tenant_id, store_id)
    assert (state.consecutive_failures, state.last_error, state.last_failure_time is not None) == (0, None, True)


async def test_refused_credentials_are_reported_and_retried_slowly_without_dead_letters(
        fast: tuple[Settings, sa.Engine], receiver: WebhookReceiver) -> None:
    settings, engine = fast
    settings = settings.with_changes(bridge={"max_attempts": 2, "credentials_retry_seconds": 0.5})
    tenant_id, (store_id,) = add_stores(engine, 1)
    point_at(settings, engine, tenant_id, store_id, receiver.url)
    receiver.fail_with(401)
    expected = write_events(engine, tenant_id, [store_id], 4)
    started = time.monotonic()

    def refused_three_times() -> bool:
        state = delivery_state(engine, tenant_id, store_id)
        return bool(state and state.credentials_refused and state.consecutive_failures >= 3)

    await bridge_until(settings, engine, refused_three_times, "three refusals")
    elapsed = time.monotonic() - started

    # A batch attempt, then one event at a time, each only after the credentials wait (not the 0.05 s backoff).
    assert receiver.attempts <= 2 + math.ceil(elapsed / 0.5)
    rows = outbox_rows(engine, tenant_id)
    # Refusals are not the event's fault: no attempt counted, none dead-lettered (two counted would have).
    assert all(row.attempts == 0 and row.dead_letter_time is None and row.delivered_time is None
               for row in rows.values())
    assert "401" in delivery_state(engine, tenant_id, store_id).last_error

    receiver.behave()
    await bridge_until(settings, engine, lambda: receiver.distinct_deliveries() >= 4, "delivery with fixed credentials")
    assert_delivered_in_order_per_entity(receiver, expected)
    assert delivery_state(engine, tenant_id, store_id).credentials_refused is False


async def test_an_event_failing_every_attempt_is_dead_lettered_after_the_attempts(
        fast: tuple[Settings, sa.Engine], receiver: WebhookReceiver) -> None:
    settings, engine = fast
    settings = settings.with_changes(bridge={"max_attempts": 3})
    tenant_id, (store_id,) = add_stores(engine, 1)
    point_at(settings, engine, tenant_id, store_id, receiver.url)
    receiver.fail_with(503)
    write_events(engine, tenant_id, [store_id], 4)  # one entity's four events

    await bridge_until(settings, engine, lambda: all(row.dead_letter_time for row in outbox_rows(
        engine, tenant_id).values()), "the dead letters")

    rows = outbox_rows(engine, tenant_id).values()
    assert all(row.attempts == 3 and "503" in row.last_error and row.last_answer == "503"
               and row.delivered_time is None for row in rows)
    # The webhook says which POST failed: the attempts land on that event, none on the ones behind it.
    assert receiver.attempts == 4 * 3
    assert delivery_state(engine, tenant_id, store_id).consecutive_failures == 12


async def test_a_failing_store_does_not_hold_up_another(
        fast: tuple[Settings, sa.Engine], receiver: WebhookReceiver, other_receiver: WebhookReceiver) -> None:
    settings, engine = fast
    settings = settings.with_changes(bridge={"max_attempts": 1000})
    tenant_id, (failing, healthy) = add_stores(engine, 2)
    point_at(settings, engine, tenant_id, failing, other_receiver.url)
    point_at(settings, engine, tenant_id, healthy, receiver.url)
    other_receiver.fail_with(503)
    expected = write_events(engine, tenant_id, [failing, healthy], 100)

    await bridge_until(settings, engine, lambda: receiver.distinct_deliveries() >= 100, "the healthy store's events")

    assert_delivered_in_order_per_entity(receiver, {healthy: expected[healthy]})
    assert other_receiver.deliveries == [] and other_receiver.attempts >= 2
    rows = outbox_rows(engine, tenant_id)
    assert all(rows[event_id].delivered_time is None for event_id in expected[failing])
    assert delivery_state(engine, tenant_id, failing).consecutive_failures >= 1


async def test_events_of_a_store_without_destination_are_discarded(
        fast: tuple[Settings, sa.Engine], receiver: WebhookReceiver) -> None:
    settings, engine = fast
    tenant_id, (silent, listening) = add_stores(engine, 2)
    point_at(settings, engine, tenant_id, listening, receiver.url)
    expected = write_events(engine, tenant_id, [silent, listening], 6)

    await bridge_until(settings, engine, lambda: all(row.delivered_time for row in outbox_rows(
        engine, tenant_id).values()), "every row settled")

    rows = outbox_rows(engine, tenant_id)
    assert receiver.event_ids() == set(expected[listening])
    assert {rows[event_id].last_error for event_id in expected[silent]} == {NO_DESTINATION}
    assert delivery_state(engine, tenant_id, silent).last_error == NO_DESTINATION


# Kafka mode: `pia bridge` processes in one consumer group.

TOPIC_PARTITIONS = 4


@pytest.fixture
def postgres_store(own_store: tuple[Settings, sa.Engine], backend: str) -> tuple[Settings, sa.Engine]:
    if backend != "postgresql":
        pytest.skip("separate `pia bridge` processes need PostgreSQL (the DuckDB file has one process)")
    return own_store


class BridgeProcess:
    """A `pia bridge` subprocess, its log in a file."""

    def __init__(self, settings: Settings, kafka: KafkaBroker, topic: str, log_path: Path,  # noqa: F811
                 **overrides: str) -> None:
        """`overrides`: PIA_* settings of its own (quick retries and small batches unless given)."""
        env = {**os.environ, "PIA_DATABASE_URL": settings.database_url, "PIA_DATA_DIR": str(settings.data_dir),
               "PIA_SECRET_KEY": settings.secret_key.get_secret_value(),
               "PIA_KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers, "PIA_KAFKA_TOPIC": topic,
               "PIA_KAFKA_GROUP_ID": f"group-{topic}", "PIA_BRIDGE_RETRY_BASE_SECONDS": "0.05",
               "PIA_BRIDGE_RETRY_MAX_SECONDS": "0.2", "PIA_BRIDGE_BATCH_SIZE": "20", **overrides}
        self.log_path = log_path
        self._log = log_path.open("w")
        self.process = subprocess.Popen([PIA, "bridge"], env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def assigned(self) -> set[int]:
        """The partitions of its latest assignment, from its log."""
        found = re.findall(r"partitions assigned: \[([0-9, ]*)\]", self.log_path.read_text())
        return {int(part) for part in found[-1].split(",") if part.strip()} if found else set()

    def stop(self, how: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(how)
        code = self.process.wait(timeout=20)
        self._log.close()
        return code


def publish(kafka: KafkaBroker, engine: sa.Engine, topic: str, tenant_id: str,  # noqa: F811
            event_ids: list[str]) -> dict[str, RecordMetadata]:
    """What the relay does: each row as a record of the design's format, acknowledged, then marked published.
    Returns where each event went (partition and offset)."""
    rows = outbox_rows(engine, tenant_id)

    async def send() -> dict[str, RecordMetadata]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap_servers, acks="all", enable_idempotence=False,
                                    request_timeout_ms=10_000)
        await producer.start()
        try:
            sent = [await producer.send(topic, OutgoingEvent(
                row.event_id, row.subject, row.entity_id, row.datetime, None).body(),
                key=f"{row.ecom_store_id}:{row.entity_id or ''}".encode(),
                headers=[("subject", row.subject.encode()), ("tenantId", row.tenant_id.encode()),
                         ("ecomStoreId", row.ecom_store_id.encode())]) for row in map(rows.get, event_ids)]
            acknowledged = await asyncio.gather(*sent)
        finally:
            await producer.stop()
        return dict(zip(event_ids, acknowledged, strict=True))

    partitions = asyncio.run(send())
    with engine.begin() as conn:
        conn.execute(event_outbox.update().where(event_outbox.c.event_id.in_(event_ids)).values(
            published_time=utc_now()))
    return partitions


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 45) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout} s for {what}")
        time.sleep(0.05)


@pytest.fixture
def two_bridges(postgres_store: tuple[Settings, sa.Engine], kafka: KafkaBroker,  # noqa: F811
                tmp_path: Path) -> Iterator[tuple[str, list[BridgeProcess]]]:
    settings, _ = postgres_store
    topic = f"pia.events.{new_id()}"
    kafka.create_topic(topic, partitions=TOPIC_PARTITIONS)
    bridges = [BridgeProcess(settings, kafka, topic, tmp_path / f"bridge-{n}.log") for n in range(2)]
    try:
        # Both members in the group before anything is published, so the partitions are shared from the start.
        wait_until(lambda: all(bridge.assigned() for bridge in bridges), "both bridges to get partitions")
        yield topic, bridges
    finally:
        for bridge in bridges:
            bridge.stop(signal.SIGKILL)


def kafka_world(settings: Settings, engine: sa.Engine, receiver: WebhookReceiver,
                stores: int, per_store: int) -> tuple[str, dict[str, list[str]]]:
    tenant_id, store_ids = add_stores(engine, stores)
    for store_id in store_ids:
        point_at(settings, engine, tenant_id, store_id, receiver.url)
    return tenant_id, write_events(engine, tenant_id, store_ids, per_store)


@pytest.mark.timeout(120)  # two processes start and join the group: slow only on a loaded machine
def test_two_bridge_processes_share_the_partitions_and_deliver_everything(
        postgres_store: tuple[Settings, sa.Engine], kafka: KafkaBroker,  # noqa: F811
        two_bridges: tuple[str, list[BridgeProcess]], receiver: WebhookReceiver) -> None:
    settings, engine = postgres_store
    topic, bridges = two_bridges
    tenant_id, expected = kafka_world(settings, engine, receiver, stores=8, per_store=40)
    every = [event_id for ids in expected.values() for event_id in ids]

    publish(kafka, engine, topic, tenant_id, every)
    wait_until(lambda: receiver.event_ids() >= set(every), "every event at the receiver")
    wait_until(lambda: all(row.delivered_time for row in outbox_rows(engine, tenant_id).values()),
               "every row marked delivered")

    shares = [bridge.assigned() for bridge in bridges]
    assert shares[0] and shares[1] and shares[0] | shares[1] == set(range(TOPIC_PARTITIONS))
    assert not shares[0] & shares[1]
    assert_delivered_in_order_per_entity(receiver, expected)
    assert [bridge.stop() for bridge in bridges] == [0, 0]  # SIGTERM: a clean stop


@pytest.mark.timeout(120)  # as above, and the group notices the dead member only after its session timeout
def test_when_one_bridge_is_killed_the_other_delivers_the_rest(
        postgres_store: tuple[Settings, sa.Engine], kafka: KafkaBroker,  # noqa: F811
        two_bridges: tuple[str, list[BridgeProcess]], receiver: WebhookReceiver) -> None:
    settings, engine = postgres_store
    topic, (victim, survivor) = two_bridges
    tenant_id, expected = kafka_world(settings, engine, receiver, stores=8, per_store=40)
    every = [event_id for ids in expected.values() for event_id in ids]
    # The first two of each entity's four events are delivered, the last two wait at the receiver: deliveries are
    # under way and the victim's partitions hold events when it dies, however fast or slow this machine is (a
    # receiver slowed by 5 ms a POST let the victim finish its share first on a loaded machine).
    receiver.hang({event_id for ids in expected.values() for event_id in ids[len(ids) // 2:]})

    partitions = publish(kafka, engine, topic, tenant_id, every)
    wait_until(lambda: len(receiver.deliveries) >= 40, "deliveries under way")
    victims_share = victim.assigned()
    victim.stop(signal.SIGKILL)
    left_by_victim = ({event_id for event_id in every if partitions[event_id].partition in victims_share}
                      - receiver.event_ids())
    assert left_by_victim  # the survivor has some of the victim's partitions' events to deliver
    wait_until(lambda: survivor.assigned() == set(range(TOPIC_PARTITIONS)), "the survivor to take every partition")
    receiver.behave()
    wait_until(lambda: receiver.event_ids() >= set(every), "every event delivered at least once")

    assert len(receiver.event_ids()) == len(every)
    assert_delivered_in_order_per_entity(receiver, expected)
    wait_until(lambda: all(row.delivered_time for row in outbox_rows(engine, tenant_id).values()),
               "every row marked delivered")


# Kafka mode in this process: several POSTs in flight to one store, in lanes by entity.

LANES, PARTITIONS = 4, 2


async def committed_offsets(kafka: KafkaBroker, group_id: str, topic: str, partitions: int) -> dict[int, int]:  # noqa: F811
    """The group's committed offset of each partition that has one."""
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka.bootstrap_servers, request_timeout_ms=10_000)
    await admin.start()
    try:  # the partitions named: the test broker cannot answer for all of a group's at once
        committed = await admin.list_consumer_group_offsets(group_id, partitions=[
            TopicPartition(topic, partition) for partition in range(partitions)])
    finally:
        await admin.close()
    return {partition.partition: at.offset for partition, at in committed.items() if at.offset >= 0}


async def eventually(condition: Callable[[], Any], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not await condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout} s for {what}")
        await asyncio.sleep(0.05)


async def test_lanes_keep_each_entitys_order_and_commit_only_up_to_the_first_undelivered_event(
        fast: tuple[Settings, sa.Engine], kafka: KafkaBroker, receiver: WebhookReceiver) -> None:  # noqa: F811
    settings, engine = fast
    topic = f"pia.events.{new_id()}"
    await asyncio.to_thread(kafka.create_topic, topic, PARTITIONS)
    settings = settings.with_changes(
        kafka={"bootstrap_servers": kafka.bootstrap_servers, "topic": topic, "group_id": f"group-{topic}"},
        bridge={"webhook_concurrency": LANES, "batch_size": 5, "max_attempts": 1000})
    tenant_id, expected = kafka_world(settings, engine, receiver, stores=1, per_store=64)  # 16 entities, 4 each
    (every,) = expected.values()
    placed = await asyncio.to_thread(publish, kafka, engine, topic, tenant_id, every)
    rows = outbox_rows(engine, tenant_id)
    lane = {event_id: row.entity_id for event_id, row in rows.items()}  # a lane per entity
    # The receiver refuses an early event (not its partition's first) whose partition has later events of other
    # lanes: those are delivered meanwhile, and the partition's offset must be committed up to the refused event.
    held = next(event_id for event_id in every if placed[event_id].offset > 0 and any(
        placed[other].partition == placed[event_id].partition and placed[other].offset > placed[event_id].offset
        and lane[other] != lane[event_id] for other in every))
    held_at = placed[held]
    overtaking = {other for other in every if lane[other] != lane[held] and placed[other].partition == held_at.partition
                  and placed[other].offset > held_at.offset}
    receiver.refuse({held}, 503)
    receiver.slow_down(0.005)  # POSTs last long enough to overlap

    stop = asyncio.Event()
    running = asyncio.create_task(run_bridge(settings, engine, stop, destination_factory=quick_webhook))
    try:
        other_lanes = {event_id for event_id in every if lane[event_id] != lane[held]}
        await eventually(lambda: asyncio.to_thread(lambda: receiver.event_ids() >= other_lanes),
                         "the other lanes' events")

        async def committed_up_to_held() -> bool:
            committed = await committed_offsets(kafka, settings.kafka.group_id, topic, PARTITIONS)
            return committed.get(held_at.partition) == held_at.offset
        await eventually(committed_up_to_held, "the offset committed up to the refused event")
        assert overtaking <= receiver.event_ids() and held not in receiver.event_ids()
        row = outbox_rows(engine, tenant_id)[held]
        assert row.delivered_time is None and row.attempts >= 1 and "503" in row.last_error

        receiver.behave()
        ends = {partition: 1 + max(at.offset for at in placed.values() if at.partition == partition)
                for partition in {at.partition for at in placed.values()}}

        async def everything_committed() -> bool:
            return await committed_offsets(kafka, settings.kafka.group_id, topic, PARTITIONS) == ends
        await eventually(lambda: asyncio.to_thread(lambda: receiver.event_ids() == set(every)), "every event")
        await eventually(everything_committed, "every offset committed")
    finally:
        stop.set()
        await asyncio.wait_for(running, 15)

    assert receiver.most_in_flight > 1  # several POSTs at once to the one store
    assert_delivered_in_order_per_entity(receiver, expected)
    assert all(row.delivered_time is not None for row in outbox_rows(engine, tenant_id).values())


def test_a_record_not_of_the_relays_format_is_skipped_not_a_crash() -> None:
    """A record whose value is not the event message, or a header missing or without a value (Kafka allows
    both), is no event: the consumer loop skips it instead of failing on it. A record that is one is sent on with
    its value as the body."""
    from aiokafka import ConsumerRecord

    from events.bridge import _parse

    event = OutgoingEvent(new_id(), subjects.INVENTORY_UPDATED, new_id(), utc_now(), {"a": 1})
    headers = [("subject", event.subject.encode()), ("tenantId", b"tenant"), ("ecomStoreId", b"store")]

    def record(value: bytes | None, headers: list[tuple[str, bytes | None]] = headers) -> ConsumerRecord:
        return ConsumerRecord("topic", 0, 7, 0, 0, b"key", value, None, 0, 0, headers)

    assert _parse(record(event.body())) == (StoreKey("tenant", "store"), event)
    # The message goes on as it came, byte for byte (an instant written with +00:00 stays so), not rendered again.
    as_written = event.body().replace(b'Z"', b'+00:00"')
    assert as_written != event.body()
    assert _parse(record(as_written))[1].body() == as_written
    assert _parse(record(b"not json")) is None
    assert _parse(record(None)) is None
    assert _parse(record(event.body(), [*headers[:2], ("ecomStoreId", None)])) is None
    assert _parse(record(event.body(), headers[1:])) is None
