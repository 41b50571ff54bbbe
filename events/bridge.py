"""The bridge: change events to each eCom store's destination (its Service Bus entity or webhook), at least once.

Each eCom store has its own delivery (`StoreDelivery`), fed by one or more lanes (`Lane`): each lane's events go
out in the order read, in batches of up to bridge_batch_size, one batch at a time. From Kafka a store has up to
bridge_webhook_concurrency lanes, an event's lane chosen by its Kafka key (eCom store and entity), so one entity's
events keep their order while the store's webhook gets several POSTs at once; from the outbox a store is one lane.
A failure waits out an exponential backoff with jitter on that store alone (all its lanes), so a failing store
never holds up another. A failed batch is retried one event at a time in its lane, so the attempts and the dead
letter land on the event at fault; after bridge_max_attempts counted attempts the event is dead-lettered and the
store moves on. A refusal of the credentials is reported in the store's state and tried again only every
bridge_credentials_retry_seconds, without counting towards the attempts. A store without a destination has its
events discarded (NO_DESTINATION). Destinations are built from the stored settings and rebuilt when they change.

Two sources feed the deliveries:
- `KafkaSource` (Kafka mode): a consumer group on settings.kafka_topic; an offset is committed per partition only
  up to the first event not yet delivered or dead-lettered, so a crash or a rebalance re-reads, never skips.
- `OutboxSource` (embedded mode): the outbox itself, polled; on PostgreSQL each attempt claims the store, so
  that several bridge processes never deliver one store at once.
"""

import asyncio
import contextlib
import logging
import random
import time
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import orjson
import sqlalchemy as sa
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import KafkaError

from contracts.event_message import OutgoingEvent
from db import event_delivery
from db.destinations import DestinationSettings, get_destination
from db.event_delivery import StoreKey
from db.secrets import SecretBox, SecretKeyError, secret_box
from events.delivery import DeliveryFailed, Destination
from events.servicebus import ServiceBusDestination
from events.webhook import WebhookDestination
from settings import Settings

log = logging.getLogger("pia.bridge")
T = TypeVar("T")
DestinationFactory = Callable[[DestinationSettings], Destination]
# Outbox mode on PostgreSQL: each delivery in flight holds a pooled connection for its claim, so only this many
# stores are delivered at once per process (the others wait their turn, they are not blocked by a failing one:
# backoff waits hold no claim).
OUTBOX_CONCURRENT_STORES = 8
# How often a store waiting out a backoff looks whether its destination was set again.
DESTINATION_CHECK_SECONDS = 2.0


def build_destination(settings: DestinationSettings) -> Destination:
    """The default destination factory: the stored kind's destination."""
    if settings.kind == "WEBHOOK":
        return WebhookDestination(settings)
    return ServiceBusDestination.from_settings(settings)


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int
    base_seconds: float
    max_seconds: float
    credentials_seconds: float

    @classmethod
    def from_settings(cls, settings: Settings) -> "RetryPolicy":
        return cls(settings.bridge_max_attempts, settings.bridge_retry_base_seconds, settings.bridge_retry_max_seconds,
                   settings.bridge_credentials_retry_seconds)

    def delay(self, attempts: int) -> float:
        """Equal jitter: between half and all of base·2^(attempts−1), capped, so stores failing together (one
        receiver down) do not all come back at the same instant."""
        step = min(self.max_seconds, self.base_seconds * 2 ** (max(attempts, 1) - 1))
        return step / 2 + random.uniform(0, step / 2)


class Deliveries:
    """What every store's delivery shares: the database, the secret box, the destination factory, the policy."""

    def __init__(self, engine: sa.Engine, box: SecretBox, retry: RetryPolicy, batch_size: int, lanes: int,
                 destination_factory: DestinationFactory = build_destination) -> None:
        self.engine, self.box, self.retry, self.batch_size, self.lanes = engine, box, retry, batch_size, lanes
        self.destination_factory = destination_factory
        self._stores: dict[StoreKey, StoreDelivery] = {}

    @classmethod
    def from_settings(cls, settings: Settings, engine: sa.Engine,
                      destination_factory: DestinationFactory = build_destination) -> "Deliveries":
        return cls(engine, secret_box(settings), RetryPolicy.from_settings(settings), settings.bridge_batch_size,
                   settings.bridge_webhook_concurrency, destination_factory)

    def of(self, store: StoreKey) -> "StoreDelivery":
        if store not in self._stores:
            self._stores[store] = StoreDelivery(self, store)
        return self._stores[store]

    async def close(self) -> None:
        for delivery in self._stores.values():
            await delivery.close()


@dataclass
class Lane:
    """A run of one store's events that must go out in order, one attempt at a time."""

    singles_left: int = 0  # events after a failed batch, sent one at a time to find the one at fault


class StoreDelivery:
    """One eCom store's delivery: its destination and when it may try again, shared by the store's lanes."""

    def __init__(self, shared: Deliveries, store: StoreKey) -> None:
        self._shared, self.store = shared, store
        self._destination: Destination | None = None
        self._destination_version: datetime | None = None
        self._reading_destination = asyncio.Lock()  # lanes wanting it at once read and build it once
        self._one_at_a_time = asyncio.Lock()
        # The lanes' writes each update the store's event_delivery_state row: one at a time, or DuckDB refuses the
        # second as a conflict (PostgreSQL would only make it wait).
        self._writing = asyncio.Lock()
        self.ready_at = 0.0  # time.monotonic() before which it waits (backoff)

    def next_batch_size(self, lane: Lane) -> int:
        return 1 if lane.singles_left else self._shared.batch_size

    async def wait_until_ready(self, stop: asyncio.Event) -> bool:
        """Wait out the backoff; False when stopped meanwhile. A destination set again meanwhile (a fixed key, a new
        address) ends the wait, so an operator's fix is tried at once, not after the credentials' long wait."""
        while (remaining := self.ready_at - time.monotonic()) > 0:
            if await _stopped_within(stop, min(remaining, DESTINATION_CHECK_SECONDS)):
                return False
            if await self._destination_set_again():
                self.ready_at = 0.0
        return not stop.is_set()

    async def _destination_set_again(self) -> bool:
        stored = await asyncio.to_thread(get_destination, self._shared.engine, self.store.tenant_id,
                                         self.store.ecom_store_id)
        version = stored.modified_time if stored else None
        return self._destination_version is not None and version != self._destination_version

    async def attempt(self, lane: Lane, events: Sequence[OutgoingEvent]) -> int:
        """One try at the events (the lane's next ones, in order, at most next_batch_size(lane)); returns how many
        of them are settled (delivered, discarded or dead-lettered) from the front."""
        engine, store = self._shared.engine, self.store
        try:
            destination = await self._current_destination()
        except (SecretKeyError, ValueError) as error:  # unreadable secret, incomplete settings: nothing to send with
            return await self._failed(lane, events, DeliveryFailed(f"destination unusable: {error}",
                                                                   transient=False))
        if destination is None:
            await self._write(event_delivery.discard, engine, store, [event.event_id for event in events])
            return len(events)
        try:
            async with self._turn(destination):
                await destination.deliver(events)
        except DeliveryFailed as failure:
            return await self._failed(lane, events, failure)
        await self._write(event_delivery.mark_delivered, engine, store, [event.event_id for event in events])
        lane.singles_left = max(0, lane.singles_left - len(events))
        return len(events)

    async def _failed(self, lane: Lane, events: Sequence[OutgoingEvent], failure: DeliveryFailed) -> int:
        retry = self._shared.retry
        if len(events) > 1:  # which one is at fault is unknown: try them one by one, at once
            lane.singles_left = len(events)
            return 0
        (event,) = events
        attempts = await self._write(event_delivery.record_failure, self._shared.engine, self.store,
                                     event.event_id, str(failure), counted=not failure.credentials,
                                     credentials_refused=failure.credentials)
        if failure.credentials:
            log.warning("eCom store %s refused the credentials; trying again in %s s: %s", self.store.ecom_store_id,
                        retry.credentials_seconds, failure)
            self.ready_at = time.monotonic() + retry.credentials_seconds
            return 0
        if attempts >= retry.max_attempts:
            log.warning("event %s of eCom store %s dead-lettered after %s attempts: %s", event.event_id,
                        self.store.ecom_store_id, attempts, failure)
            await self._write(event_delivery.dead_letter, self._shared.engine, self.store, event.event_id)
            lane.singles_left = max(0, lane.singles_left - 1)
            return 1
        self.ready_at = time.monotonic() + retry.delay(attempts)
        return 0

    def _turn(self, destination: Destination) -> contextlib.AbstractAsyncContextManager[Any]:
        """Webhooks take the lanes' POSTs at once; other destinations one attempt at a time (Service Bus: one SDK
        sender, whose batches carry many events already)."""
        if isinstance(destination, WebhookDestination):
            return contextlib.nullcontext()
        return self._one_at_a_time

    async def _write(self, write: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        async with self._writing:
            return await asyncio.to_thread(write, *args, **kwargs)

    async def _current_destination(self) -> Destination | None:
        """The destination as stored now; built again when its settings changed since the last attempt (a lane's
        POST still in flight on the old one fails as transient and goes again)."""
        async with self._reading_destination:
            stored = await asyncio.to_thread(event_delivery.destination_settings, self._shared.engine,
                                             self._shared.box, self.store)
            version = stored[1] if stored else None
            if version != self._destination_version or (stored is None) != (self._destination is None):
                await self.close()
                self._destination = self._shared.destination_factory(stored[0]) if stored else None
                self._destination_version = version
            return self._destination

    async def close(self) -> None:
        destination, self._destination, self._destination_version = self._destination, None, None
        if destination is not None:
            await destination.close()


async def _stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep up to `seconds`, waking early when stopped; True when stopped."""
    if seconds > 0 and not stop.is_set():
        try:
            async with asyncio.timeout(seconds):
                await stop.wait()
        except TimeoutError:
            pass
    return stop.is_set()


class OutboxSource:
    """Embedded mode: the outbox is the queue. Stores with something to deliver are found by a poll; each gets a
    task that delivers its rows until none are left, reading them afresh before every attempt."""

    def __init__(self, deliveries: Deliveries, poll_seconds: float) -> None:
        self._deliveries, self._poll_seconds = deliveries, poll_seconds
        self._turns = asyncio.Semaphore(OUTBOX_CONCURRENT_STORES)
        self._draining: dict[StoreKey, asyncio.Task[None]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                try:
                    stores = await asyncio.to_thread(event_delivery.stores_with_undelivered, self._deliveries.engine)
                except sa.exc.DBAPIError as error:  # the database away for a while: the next poll tries again
                    log.warning("bridge cannot read the outbox: %s", error)
                    stores = []
                for store in stores:
                    if store not in self._draining:
                        task = asyncio.create_task(self._drain(store, stop), name=f"bridge {store.ecom_store_id}")
                        self._draining[store] = task
                        task.add_done_callback(lambda _, store=store: self._draining.pop(store, None))
                await _stopped_within(stop, self._poll_seconds)
        finally:
            await asyncio.gather(*self._draining.values(), return_exceptions=True)
            await self._deliveries.close()

    async def _drain(self, store: StoreKey, stop: asyncio.Event) -> None:
        delivery, lane = self._deliveries.of(store), Lane()  # the outbox is read in order: the store is one lane
        try:
            while await delivery.wait_until_ready(stop):
                async with self._turns:
                    if not await self._attempt(delivery, lane):
                        return
        except Exception:  # a bug or a lost database: logged, and the next poll starts the store again
            log.exception("delivery to eCom store %s failed", store.ecom_store_id)

    async def _attempt(self, delivery: StoreDelivery, lane: Lane) -> bool:
        """Claim the store, read its next rows and try them; False when there was nothing to do (or another
        bridge process holds the store)."""
        engine = self._deliveries.engine
        claim = await asyncio.to_thread(engine.connect)
        try:
            if not await asyncio.to_thread(event_delivery.claim_store, claim, delivery.store):
                return False
            events = await asyncio.to_thread(event_delivery.undelivered, engine, delivery.store,
                                             delivery.next_batch_size(lane))
            if not events:
                return False
            await delivery.attempt(lane, events)  # its writes commit on connections of their own, before the claim ends
            return True
        finally:
            await asyncio.to_thread(claim.close)  # ends the claim's transaction, which wrote nothing


@dataclass
class _Record:
    """An event read from Kafka, waiting in its lane's queue."""

    partition: TopicPartition
    offset: int
    event: OutgoingEvent


@dataclass
class _PartitionProgress:
    """Offsets read from one partition, in order, and which of them are settled."""

    read: deque[int] = field(default_factory=deque)
    settled: set[int] = field(default_factory=set)
    committable: int | None = None  # the offset to commit: the first one not settled

    def settle(self, offset: int) -> None:
        self.settled.add(offset)
        while self.read and self.read[0] in self.settled:
            front = self.read.popleft()
            self.settled.discard(front)
            self.committable = front + 1


@dataclass
class _KafkaLane(Lane):
    """A lane fed from Kafka: its records in read order, and the event that wakes its worker when some arrive."""

    queue: deque[_Record] = field(default_factory=deque)
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class KafkaSource(ConsumerRebalanceListener):
    """Kafka mode: a member of the consumer group. Each store's events queue up in read order in its lanes (by
    Kafka key), each lane with a worker; offsets are committed as the front of each partition settles, whatever
    order the lanes settle them in."""

    COMMIT_EVERY_SECONDS = 0.5

    def __init__(self, deliveries: Deliveries, settings: Settings) -> None:
        self._deliveries = deliveries
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.kafka_bootstrap_servers, group_id=settings.kafka_group_id,
            enable_auto_commit=False, auto_offset_reset="earliest", request_timeout_ms=30_000)
        self._topic = settings.kafka_topic
        self._progress: dict[TopicPartition, _PartitionProgress] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._lanes: dict[tuple[StoreKey, int], _KafkaLane] = {}
        self._workers: list[asyncio.Task[None]] = []
        self._stop = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> None:
        self._stop = stop
        self._consumer.subscribe([self._topic], listener=self)
        await self._consumer.start()
        try:
            while not stop.is_set():
                batches = await self._consumer.getmany(timeout_ms=int(self.COMMIT_EVERY_SECONDS * 1000))
                for partition, records in batches.items():
                    self._enqueue(partition, records)
                await self._commit()
        finally:
            for lane in self._lanes.values():
                lane.wake.set()
            await asyncio.gather(*self._workers, return_exceptions=True)
            await self._commit()
            await self._consumer.stop()
            await self._deliveries.close()

    def _enqueue(self, partition: TopicPartition, records: list[ConsumerRecord]) -> None:
        progress = self._progress.setdefault(partition, _PartitionProgress())
        for record in records:
            progress.read.append(record.offset)
            parsed = _parse(record)
            if parsed is None:
                log.error("skipping malformed record at %s offset %s", partition, record.offset)
                progress.settle(record.offset)
                continue
            store, event = parsed
            key = (store, lane_of(record.key, self._deliveries.lanes))
            if key not in self._lanes:
                self._lanes[key] = _KafkaLane()
                self._workers.append(asyncio.create_task(self._work(store, self._lanes[key]),
                                                         name=f"bridge {store.ecom_store_id} lane {key[1]}"))
            lane = self._lanes[key]
            lane.queue.append(_Record(partition, record.offset, event))
            lane.wake.set()

    async def _work(self, store: StoreKey, lane: _KafkaLane) -> None:
        queue, delivery = lane.queue, self._deliveries.of(store)
        while not self._stop.is_set():
            if not queue:
                lane.wake.clear()
                await lane.wake.wait()
                continue
            if not await delivery.wait_until_ready(self._stop):
                return
            batch = [queue[n] for n in range(min(len(queue), delivery.next_batch_size(lane)))]
            try:
                settled = await delivery.attempt(lane, [record.event for record in batch])
            except Exception:  # a bug or a lost database: logged, retried after a pause like a failure
                log.exception("delivery to eCom store %s failed", store.ecom_store_id)
                delivery.ready_at = time.monotonic() + self._deliveries.retry.delay(1)
                continue
            for record in batch[:settled]:
                if queue and queue[0] is record:  # not dropped meanwhile by a revocation
                    queue.popleft()
                progress = self._progress.get(record.partition)
                if progress is not None:
                    progress.settle(record.offset)

    async def _commit(self) -> None:
        offsets = {partition: progress.committable for partition, progress in self._progress.items()
                   if progress.committable is not None and progress.committable != self._committed.get(partition)}
        if not offsets:
            return
        try:
            await self._consumer.commit(offsets)
            self._committed.update(offsets)
        except KafkaError as error:  # a rebalance in progress: the revocation commits, or the new owner re-reads
            log.warning("commit failed: %r", error)

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        """Commit what is settled, and drop the rest: the partitions' next owner reads it again."""
        await self._commit()
        for partition in revoked:
            self._progress.pop(partition, None)
            self._committed.pop(partition, None)
        for lane in self._lanes.values():
            kept = [record for record in lane.queue if record.partition not in revoked]
            lane.queue.clear()
            lane.queue.extend(kept)
        if revoked:
            log.info("partitions revoked: %s", sorted(partition.partition for partition in revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        log.info("partitions assigned: %s", sorted(partition.partition for partition in assigned))


def lane_of(key: bytes | None, lanes: int) -> int:
    """The lane of a record's Kafka key (eCom store and entity): one key always lands in one lane, so its events
    keep their order. CRC-32, not hash(): the same in every process and run."""
    return zlib.crc32(key or b"") % lanes


def _parse(record: ConsumerRecord) -> tuple[StoreKey, OutgoingEvent] | None:
    """The store and event of a record of the relay's format; None when it is not one."""
    headers = {name: value.decode() for name, value in record.headers}
    try:
        message = orjson.loads(record.value)
        event = OutgoingEvent(event_id=message["eventId"], subject=headers["subject"], entity_id=message["entityId"],
                              datetime=datetime.fromisoformat(message["datetime"]), metadata=message.get("metadata"))
        return StoreKey(headers["tenantId"], headers["ecomStoreId"]), event
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


async def run_bridge(settings: Settings, engine: sa.Engine, stop: asyncio.Event,
                     destination_factory: DestinationFactory = build_destination) -> None:
    """Deliver until `stop` is set: from Kafka when bootstrap servers are set, else from the outbox."""
    deliveries = Deliveries.from_settings(settings, engine, destination_factory)
    source: KafkaSource | OutboxSource
    if settings.kafka_bootstrap_servers:
        source = KafkaSource(deliveries, settings)
    else:
        source = OutboxSource(deliveries, settings.bridge_poll_seconds)
    log.info("bridge delivering from %s", "Kafka" if settings.kafka_bootstrap_servers else "the outbox")
    await source.run(stop)

