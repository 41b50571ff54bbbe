"""The bridge: change events to each eCom store's destination (its Service Bus entity or webhook), at least once.

Each eCom store's events wait in lanes by entity (events/lanes.py) and go out in order per entity, several entities
at once (up to bridge.webhook_concurrency attempts per store), through the store's `StoreDelivery`: its destination,
what a failure means and what is written. A failure is classified by the destination (events/delivery.py):
- permanent (a webhook's 4xx other than 401/403/408/429, a redirect; Service Bus's unknown entity, a message too
  large): the event is dead-lettered after that one attempt, its answer recorded, and its lane goes on;
- transient (5xx, 408, 429, a timeout, a connection failure): its lane alone waits out an exponential backoff with
  jitter, and after bridge.max_attempts counted attempts the event is dead-lettered; when the lanes of
  STORE_DOWN_LANES different entities fail with no success between, the destination looks down and the whole store
  waits too, so a receiver that is down is not hammered once per entity;
- credentials refused: reported in the store's state and tried again only every bridge.credentials_retry_seconds,
  the whole store waiting, without counting towards the attempts.
A failed batch whose event at fault is unknown (Service Bus sends a batch at once) is tried one event at a time,
so the attempts and the dead letter land on that event. A store without a destination has its events discarded
(NO_DESTINATION). Destinations are built from the stored settings, with bridge.attempt_timeout_seconds as the
bound of each attempt (each POST), and rebuilt when they change.

Two sources feed the lanes, each holding at most bridge.max_held_events of a store's events at once:
- `KafkaSource` (Kafka mode): a consumer group on settings.kafka.topic; a partition whose records fill a store's
  lanes beyond the bound is paused until they drain to half of it; an offset is committed per partition only up to
  the first event not yet delivered or dead-lettered, so a crash or a rebalance re-reads, never skips.
- `OutboxSource` (embedded mode): the outbox itself, read by pages as the lanes drain; on PostgreSQL a bridge
  process claims a store (a session advisory lock) for as long as it holds the store's events, so that several
  bridge processes never deliver one store at once.
"""

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
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
from db.engine import is_duckdb
from db.event_delivery import StoreKey
from db.polls import PollGate
from db.secrets import SecretBox, SecretKeyError, secret_box
from events.delivery import DeliveryFailed, Destination
from events.lanes import FLUSH_SECONDS, Held, Outcome, StoreLanes, stopped_within
from events.webhook import WebhookDestination
from rules.retry import RetryPolicy
from settings import Settings

log = logging.getLogger("pia.bridge")
T = TypeVar("T")
DestinationFactory = Callable[[DestinationSettings], Destination]
# How often a store waiting out a backoff looks whether its destination was set again.
DESTINATION_CHECK_SECONDS = 2.0
# How long a read of the store's destination serves its attempts.
DESTINATION_FRESH_SECONDS = 1.0
# Transient failures of this many different entities' lanes with no success between: the destination looks down.
STORE_DOWN_LANES = 3


def build_destination(settings: DestinationSettings, timeout: float = 10.0) -> Destination:
    """The default destination factory: the stored kind's destination, each attempt bounded by `timeout`."""
    if settings.kind == "WEBHOOK":
        return WebhookDestination(settings, timeout=timeout)
    # Imported on the first Service Bus destination: the SDK costs a quarter second of every process's start.
    from events.servicebus import ServiceBusDestination

    return ServiceBusDestination.from_settings(settings, timeout_seconds=timeout)


class Deliveries:
    """What every store's delivery shares: the database, the secret box, the destination factory, the policy."""

    def __init__(self, engine: sa.Engine, box: SecretBox, retry: RetryPolicy, credentials_wait_seconds: float,
                 batch_size: int, workers: int, max_held: int,
                 destination_factory: DestinationFactory = build_destination) -> None:
        self.engine, self.box, self.retry, self.batch_size = engine, box, retry, batch_size
        # A destination refusing its credentials is tried again only this often, whatever its attempts.
        self.credentials_wait_seconds = credentials_wait_seconds
        self.workers, self.max_held = workers, max_held
        self.destination_factory = destination_factory
        self._stores: dict[StoreKey, StoreDelivery] = {}

    @classmethod
    def from_settings(cls, settings: Settings, engine: sa.Engine,
                      destination_factory: DestinationFactory | None = None) -> "Deliveries":
        factory = destination_factory or functools.partial(build_destination,
                                                           timeout=settings.bridge.attempt_timeout_seconds)
        return cls(engine, secret_box(settings), RetryPolicy.of(settings.bridge),
                   settings.bridge.credentials_retry_seconds, settings.bridge.batch_size,
                   settings.bridge.webhook_concurrency, settings.bridge.max_held_events, factory)

    def of(self, store: StoreKey) -> "StoreDelivery":
        if store not in self._stores:
            self._stores[store] = StoreDelivery(self, store)
        return self._stores[store]

    def lanes(self, store: StoreKey, settled: Callable[[Sequence[Held]], None]) -> StoreLanes:
        """New lanes for the store, telling `settled` of each event whose outcome is written."""
        return StoreLanes(self.of(store), self.workers, settled)

    async def close(self) -> None:
        for delivery in self._stores.values():
            await delivery.close()


class StoreDelivery:
    """One eCom store's delivery: its destination, when the store as a whole may try again, what its failures
    mean, and the writes of their outcome."""

    def __init__(self, shared: Deliveries, store: StoreKey) -> None:
        self._shared, self.store = shared, store
        self.batch_size = shared.batch_size
        self._destination: Destination | None = None
        self._destination_version: datetime | None = None
        self._destination_read_at = -math.inf  # time.monotonic() of the last read of the stored destination
        self._destination_known = False  # read at least once
        self._destination_changed_at = -math.inf  # when a read found it changed (or removed, or set)
        self._reading_destination = asyncio.Lock()  # lanes wanting it at once read and build it once
        self._one_at_a_time = asyncio.Lock()
        self._waiting = asyncio.Lock()  # one lane worker looks at the stored destination during a store's wait
        # The lanes' writes each update the store's event_delivery_state row: one at a time, or DuckDB refuses the
        # second as a conflict (PostgreSQL would only make it wait).
        self._writing = asyncio.Lock()
        self.ready_at = 0.0  # time.monotonic() before which the whole store waits
        self._singles_left = 0  # events after a failed batch, sent one at a time to find the one at fault
        self._backing_off: set[str] = set()  # lanes (entity keys) whose last attempt failed transiently
        self._failed_since_success: set[str] = set()

    def next_batch_size(self) -> int:
        return 1 if self._singles_left else self.batch_size

    def entities_per_attempt(self) -> int:
        """A webhook's attempt carries one entity's events (POSTs go one after another); other destinations send a
        batch at once and take as many entities as fit. One while the destination was never read."""
        if not self._destination_known or isinstance(self._destination, WebhookDestination):
            return 1
        return self.batch_size

    def pause_after_error(self) -> float:
        return self._shared.retry.delay(1).total_seconds()

    async def wait_until_ready(self, stop: asyncio.Event) -> bool:
        """Wait out the store's wait; False when stopped meanwhile. A destination set again meanwhile (a fixed key, a
        new address) ends the wait, so an operator's fix is tried at once, not after the credentials' long wait."""
        if self.ready_at <= time.monotonic():
            return not stop.is_set()
        async with self._waiting:
            while (remaining := self.ready_at - time.monotonic()) > 0:
                if await stopped_within(stop, min(remaining, DESTINATION_CHECK_SECONDS)):
                    return False
                if await self._destination_set_again():
                    self.ready_at, self._destination_read_at = 0.0, -math.inf
        return not stop.is_set()

    async def _destination_set_again(self) -> bool:
        stored = await asyncio.to_thread(get_destination, self._shared.engine, self.store.tenant_id,
                                         self.store.ecom_store_id)
        version = stored.modified_time if stored else None
        return self._destination_version is not None and version != self._destination_version

    async def attempt(self, batch: Sequence[Held]) -> Outcome:
        """One try at a lane's next events (or several lanes', each lane's in order): what became of them."""
        if self._singles_left:
            self._singles_left -= 1
        try:
            destination = await self._current_destination()
        except (SecretKeyError, ValueError) as error:  # unreadable secret, incomplete settings: nothing to send with
            # Not the events' fault: the store waits as for refused credentials, until the destination is fixed.
            return await self._failed(batch, DeliveryFailed(f"destination unusable: {error}", transient=False,
                                                            credentials=True, answer="destination unusable"))
        changed = self._destination_changed_at
        gone = await self._settled_elsewhere(batch) if any(held.checked_at < changed for held in batch) else []
        if gone:
            batch = [held for held in batch if held not in gone]
            self._backing_off.difference_update(held.key for held in gone)
        if destination is None:
            self._backing_off.difference_update(held.key for held in batch)
            await self._write(event_delivery.discard, self._shared.engine, self.store,
                              [held.event.event_id for held in batch])
            return Outcome(settled=len(batch), delivered=0, gone=gone)
        async with self._turn(destination):  # a failure is settled within the turn: the next sees the store's wait
            if self.ready_at > time.monotonic():  # the attempt before this one's turn made the store wait
                return Outcome(settled=0, delivered=0, gone=gone)
            try:
                await destination.deliver([held.event for held in batch])
            except DeliveryFailed as failure:
                return replace(await self._failed(batch, failure), gone=gone)
        self._succeeded(batch)
        return Outcome(settled=len(batch), delivered=len(batch), gone=gone)

    async def _settled_elsewhere(self, batch: Sequence[Held]) -> list[Held]:
        """Events held since before the destination last changed whose rows are settled: removing a destination
        discards the store's backlog, and a destination set later must not get it. Looked up only then."""
        unchecked = [held for held in batch if held.checked_at < self._destination_changed_at]
        if not unchecked:
            return []
        still = await asyncio.to_thread(event_delivery.still_open, self._shared.engine, self.store,
                                        [held.event.event_id for held in unchecked])
        now = time.monotonic()
        for held in unchecked:
            held.checked_at = now
        return [held for held in unchecked if held.event.event_id not in still]

    def _succeeded(self, delivered: Sequence[Held]) -> None:
        if delivered:
            self._failed_since_success.clear()
            self._backing_off.difference_update(held.key for held in delivered)

    async def _failed(self, batch: Sequence[Held], failure: DeliveryFailed) -> Outcome:
        at = failure.delivered if failure.delivered is not None else 0 if len(batch) == 1 else None
        if at is None:  # which one is at fault is unknown: try them one by one, at once
            self._singles_left = len(batch)
            return Outcome(settled=0, delivered=0)
        self._succeeded(batch[:at])
        held, retry = batch[at], self._shared.retry
        counted = not failure.credentials
        if failure.transient:
            self._backing_off.add(held.key)
        attempts = await self._write(
            event_delivery.record_failure, self._shared.engine, self.store, held.event.event_id, str(failure),
            answer=failure.answer, counted=counted, credentials_refused=failure.credentials,
            lanes_in_backoff=len(self._backing_off))
        if failure.credentials:
            log.warning("eCom store %s refused the credentials; trying again in %s s: %s", self.store.ecom_store_id,
                        self._shared.credentials_wait_seconds, failure)
            self.ready_at = time.monotonic() + self._shared.credentials_wait_seconds
            return Outcome(settled=at, delivered=at)
        if not failure.transient or attempts >= retry.max_attempts:
            log.warning("event %s of eCom store %s dead-lettered after %s attempt(s): %s", held.event.event_id,
                        self.store.ecom_store_id, attempts, failure)
            self._backing_off.discard(held.key)
            await self._write(event_delivery.dead_letter, self._shared.engine, self.store, held.event.event_id)
            return Outcome(settled=at + 1, delivered=at)
        self._failed_since_success.add(held.key)
        if len(self._failed_since_success) >= STORE_DOWN_LANES:  # not one entity's trouble: the destination's
            store_failures = len(self._failed_since_success) - STORE_DOWN_LANES + 1
            self.ready_at = time.monotonic() + retry.delay(store_failures).total_seconds()
        return Outcome(settled=at, delivered=at, wait=retry.delay(attempts).total_seconds())

    async def mark_delivered(self, delivered: Sequence[Held]) -> None:
        await self._write(event_delivery.mark_delivered, self._shared.engine, self.store,
                          [held.event.event_id for held in delivered], lanes_in_backoff=len(self._backing_off))

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
        """The destination as stored at most DESTINATION_FRESH_SECONDS ago (a webhook's attempts are often one
        event each: a read per attempt would cost more than the POST); built again when its settings changed (a
        lane's POST still in flight on the old one fails as transient and goes again). None is always read afresh:
        discarding cannot be undone, and a destination set a moment ago must get the events written since."""
        if self._destination is not None and time.monotonic() - self._destination_read_at < DESTINATION_FRESH_SECONDS:
            return self._destination
        async with self._reading_destination:
            fresh = time.monotonic() - self._destination_read_at < DESTINATION_FRESH_SECONDS
            if fresh and self._destination is not None:  # read by the lane that held the lock meanwhile
                return self._destination
            stored = await asyncio.to_thread(event_delivery.destination_settings, self._shared.engine,
                                             self._shared.box, self.store)
            version = stored[1] if stored else None
            if version != self._destination_version or (stored is None) != (self._destination is None):
                if self._destination_known:  # a change since the last read: held events may be discarded
                    self._destination_changed_at = time.monotonic()
                await self.close()
                self._destination = self._shared.destination_factory(stored[0]) if stored else None
                self._destination_version = version
            self._destination_read_at, self._destination_known = time.monotonic(), True
            return self._destination

    async def close(self) -> None:
        destination, self._destination, self._destination_version = self._destination, None, None
        if destination is not None:
            await destination.close()


class _Claims:
    """Outbox mode on PostgreSQL: the stores this process delivers, each held by a session advisory lock on one
    connection of its own (not waited for: another process holding a store delivers it). The locks end with the
    connection, so a bridge that dies lets another take its stores. DuckDB's file has one process: no claims."""

    def __init__(self, engine: sa.Engine) -> None:
        self._engine, self._conn = engine, None
        self._lock = asyncio.Lock()

    async def take(self, store: StoreKey) -> bool:
        return bool(await self._run(event_delivery.claim_store, store))

    async def release(self, store: StoreKey) -> None:
        await self._run(event_delivery.release_store, store)

    async def _run(self, statement: Callable[[sa.Connection, StoreKey], T], store: StoreKey) -> T | bool:
        if is_duckdb(self._engine):
            return True
        async with self._lock:
            if self._conn is None:
                self._conn = await asyncio.to_thread(
                    lambda: self._engine.connect().execution_options(isolation_level="AUTOCOMMIT"))
            return await asyncio.to_thread(statement, self._conn, store)

    async def close(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await asyncio.to_thread(conn.close)


class OutboxSource:
    """Embedded mode: the outbox is the queue. Stores with something to deliver are found by a poll; each gets a
    feeder that claims the store, reads its rows by pages into its lanes (no more than bridge.max_held_events at
    once) and ends, releasing the store, once nothing is left."""

    def __init__(self, deliveries: Deliveries, poll_seconds: float) -> None:
        self._deliveries, self._poll_seconds = deliveries, poll_seconds
        self._claims = _Claims(deliveries.engine)
        self._feeding: dict[StoreKey, asyncio.Task[None]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        # On DuckDB a poll that found every store delivered is not made again until something was committed (db.polls).
        gate = PollGate(self._deliveries.engine)
        try:
            while not stop.is_set():
                stores = []
                if gate.open():
                    gate.polling()
                    try:
                        stores = await asyncio.to_thread(event_delivery.stores_with_undelivered,
                                                         self._deliveries.engine)
                    except sa.exc.DBAPIError as error:  # the database away for a while: the next poll tries again
                        log.warning("bridge cannot read the outbox: %s", error)
                    else:
                        if not stores:
                            gate.idle()
                for store in stores:
                    if store not in self._feeding:
                        task = asyncio.create_task(self._feed(store, stop), name=f"bridge {store.ecom_store_id}")
                        self._feeding[store] = task
                        task.add_done_callback(lambda _, store=store: self._feeding.pop(store, None))
                await stopped_within(stop, self._poll_seconds)
        finally:
            await asyncio.gather(*self._feeding.values(), return_exceptions=True)
            await self._claims.close()
            await self._deliveries.close()

    async def _feed(self, store: StoreKey, stop: asyncio.Event) -> None:
        try:
            if not await self._claims.take(store):
                return
        except Exception:
            log.exception("claiming eCom store %s failed", store.ecom_store_id)
            return
        held = _HeldRows()
        lanes = self._deliveries.lanes(store, held.settled)
        try:
            await self._read_into(lanes, held, store, stop)
        except Exception:  # a bug or a lost database: logged, and the next poll starts the store again
            log.exception("delivery to eCom store %s failed", store.ecom_store_id)
        finally:
            await lanes.close()
            with contextlib.suppress(Exception):
                await self._claims.release(store)

    async def _read_into(self, lanes: StoreLanes, held: "_HeldRows", store: StoreKey, stop: asyncio.Event) -> None:
        """Read the store's rows in event_id order, a page at a time, while its lanes have room; once caught up,
        read again from the oldest undelivered row (skipping those held), so that a row committed late with a
        lower id is not passed by. Returns when nothing is held and nothing is left."""
        engine, bound, after = self._deliveries.engine, self._deliveries.max_held, None
        while not stop.is_set():
            room, added = min(bound - lanes.held, self._deliveries.batch_size), 0
            if room <= 0:  # the lanes are full: wait for them to drain
                await stopped_within(stop, FLUSH_SECONDS)
                continue
            held.settled_meanwhile = set()
            page = await asyncio.to_thread(event_delivery.undelivered, engine, store, room, after)
            for event in page:
                if held.is_new(event.event_id):
                    lanes.add(Held(event))
                    added += 1
            held.settled_meanwhile = None
            if not page and not held.ids:
                return
            after = page[-1].event_id if len(page) == room else None  # caught up: from the oldest again
            if not added:
                await stopped_within(stop, self._poll_seconds)


class _HeldRows:
    """The event ids of a store's outbox rows in its lanes. A row settled while a page was being read may be in
    that page as it was before: it is not taken again."""

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.settled_meanwhile: set[str] | None = None  # while a read is under way

    def settled(self, settled: Sequence[Held]) -> None:
        ids = {held.event.event_id for held in settled}
        self.ids -= ids
        if self.settled_meanwhile is not None:
            self.settled_meanwhile |= ids

    def is_new(self, event_id: str) -> bool:
        """Whether a row read is not held yet (and now is)."""
        if event_id in self.ids or event_id in (self.settled_meanwhile or ()):
            return False
        self.ids.add(event_id)
        return True


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


class KafkaSource(ConsumerRebalanceListener):
    """Kafka mode: a member of the consumer group. Each store's records go into its lanes in read order; offsets
    are committed as the front of each partition settles, whatever order the lanes settle them in. A partition
    holding records of a store whose lanes are full is paused, and resumed once they drained to half."""

    COMMIT_EVERY_SECONDS = 0.5

    def __init__(self, deliveries: Deliveries, settings: Settings) -> None:
        self._deliveries = deliveries
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.kafka.bootstrap_servers, group_id=settings.kafka.group_id,
            enable_auto_commit=False, auto_offset_reset="earliest", request_timeout_ms=30_000)
        self._topic = settings.kafka.topic
        self._progress: dict[TopicPartition, _PartitionProgress] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._stores: dict[StoreKey, StoreLanes] = {}
        self._full: set[StoreKey] = set()
        # Per partition, how many of its records each store's lanes hold: which partitions feed a full store.
        self._held: dict[TopicPartition, Counter[StoreKey]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        self._consumer.subscribe([self._topic], listener=self)
        await self._consumer.start()
        try:
            while not stop.is_set():
                batches = await self._consumer.getmany(timeout_ms=int(self.COMMIT_EVERY_SECONDS * 1000),
                                                       max_records=self._deliveries.batch_size)
                for partition, records in batches.items():
                    self._enqueue(partition, records)
                self._pause_or_resume()
                await self._commit()
        finally:
            await asyncio.gather(*(lanes.close() for lanes in self._stores.values()), return_exceptions=True)
            await self._commit()
            await self._consumer.stop()
            await self._deliveries.close()

    def _enqueue(self, partition: TopicPartition, records: list[ConsumerRecord]) -> None:
        progress = self._progress.setdefault(partition, _PartitionProgress())
        held = self._held.setdefault(partition, Counter())
        for record in records:
            progress.read.append(record.offset)
            parsed = _parse(record)
            if parsed is None:
                log.error("skipping malformed record at %s offset %s", partition, record.offset)
                progress.settle(record.offset)
                continue
            store, event = parsed
            lanes = self._stores.get(store)
            if lanes is None:
                lanes = self._stores[store] = self._deliveries.lanes(
                    store, functools.partial(self._settled, store))
            held[store] += 1
            lanes.add(Held(event, (partition, record.offset, progress)))

    def _settled(self, store: StoreKey, settled: Sequence[Held]) -> None:
        for held in settled:
            partition, offset, progress = held.source
            if self._progress.get(partition) is progress:  # not revoked meanwhile (nor assigned again since)
                progress.settle(offset)
                self._held[partition][store] -= 1

    def _pause_or_resume(self) -> None:
        """Bounded memory: stop fetching what would go into full lanes (a destination down, a backlog)."""
        bound = self._deliveries.max_held
        for store, lanes in self._stores.items():
            if lanes.held > bound:
                self._full.add(store)
            elif lanes.held <= bound // 2:
                self._full.discard(store)
        feeding_full = {partition for partition, held in self._held.items()
                        if any(held[store] > 0 for store in self._full)}
        paused = self._consumer.paused()
        if pause := feeding_full - paused:
            log.info("pausing partitions %s: lanes full", sorted(partition.partition for partition in pause))
            self._consumer.pause(*pause)
        if resume := paused - feeding_full:
            log.info("resuming partitions %s", sorted(partition.partition for partition in resume))
            self._consumer.resume(*resume)

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
        gone = set(revoked)
        for partition in revoked:
            self._progress.pop(partition, None)
            self._committed.pop(partition, None)
            self._held.pop(partition, None)
        for lanes in self._stores.values():
            lanes.drop(lambda held: held.source[0] in gone)
        if revoked:
            log.info("partitions revoked: %s", sorted(partition.partition for partition in revoked))

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        log.info("partitions assigned: %s", sorted(partition.partition for partition in assigned))


def _parse(record: ConsumerRecord) -> tuple[StoreKey, OutgoingEvent] | None:
    """The store and event of a record of the relay's format; None when it is not one."""
    try:
        headers = {name: value.decode() for name, value in record.headers}  # a header without a value: None
        message = orjson.loads(record.value)
        event = OutgoingEvent(event_id=message["eventId"], subject=headers["subject"], entity_id=message["entityId"],
                              datetime=datetime.fromisoformat(message["datetime"]), metadata=message.get("metadata"),
                              received=record.value)
        return StoreKey(headers["tenantId"], headers["ecomStoreId"]), event
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
        return None


async def run_bridge(settings: Settings, engine: sa.Engine, stop: asyncio.Event,
                     destination_factory: DestinationFactory | None = None) -> None:
    """Deliver until `stop` is set: from Kafka when bootstrap servers are set, else from the outbox."""
    deliveries = Deliveries.from_settings(settings, engine, destination_factory)
    source: KafkaSource | OutboxSource
    if settings.kafka.bootstrap_servers:
        source = KafkaSource(deliveries, settings)
    else:
        source = OutboxSource(deliveries, settings.bridge.poll_seconds)
    log.info("bridge delivering from %s", "Kafka" if settings.kafka.bootstrap_servers else "the outbox")
    await source.run(stop)
