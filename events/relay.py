"""The relay, Kafka mode's first leg: unpublished outbox rows to the Kafka topic, marked published once acknowledged.

A round claims up to relay.batch_size rows in event_id order and sets their published_time in the same statement
(one pass over the rows, not a read and a write), sends each as the record the bridge reads (key
`ecomStoreId:entityId`, headers subject/tenantId/ecomStoreId, value the event message), a partition's records in
record batches filled here, waits for every acknowledgement (acks="all") and only then commits. A failed send
rolls the round back: its rows stay unpublished and go again next round, so a row reaches Kafka at least once,
possibly twice.

On PostgreSQL several relays (one per `pia worker`) share the outbox: each claims rows with FOR UPDATE SKIP
LOCKED, so in the normal case no row is sent twice, and each wakes at once on the NOTIFY a writing transaction
sends at commit (db/outbox.py), with the slow poll relay.poll_seconds as the safety net. On DuckDB the serve
process owns the file and runs the one relay, which polls, asking the database only once something was committed
since its last round that found nothing (db.polls). While Kafka (or the database) fails, rounds are tried
again after an exponential backoff with jitter; the rows wait in the outbox meanwhile.
"""

import asyncio
import contextlib
import logging
import threading
from collections import defaultdict
from typing import Any

import psycopg
import sqlalchemy as sa
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.producer.message_accumulator import BatchBuilder

from contracts.event_message import OutgoingEvent
from db.engine import is_duckdb, quiet_commit
from db.ids import utc_now
from db.outbox import OUTBOX_CHANNEL
from db.polls import PollGate
from db.schema import event_outbox
from db.tenancy import across_tenants
from db.transient import is_transient
from events.partitions import partitions_of
from rules.retry import RetryPolicy
from settings import Settings

log = logging.getLogger(__name__)

# Bounds every wait on the broker (metadata, acknowledgements): an unreachable Kafka fails a round, never hangs it.
KAFKA_TIMEOUT_MS = 10_000
RELAY_RETRY = RetryPolicy(base_seconds=0.5, max_seconds=30.0)
# Failures beyond this count wait the capped time; counting on would overflow base·2^failures in a long outage.
_BACKOFF_STEPS = 32
# A stop asked for by another thread (a signal handler, the server shutting down) is seen within this time.
STOP_CHECK_SECONDS = 0.2

Record = tuple[bytes, bytes, list[tuple[str, bytes]]]


def kafka_record(row: sa.Row) -> Record:
    """An outbox row as the Kafka record of the shared design: (key, value, headers)."""
    event = OutgoingEvent.of_outbox_row(row)
    headers = [("subject", row.subject.encode()), ("tenantId", row.tenant_id.encode()),
               ("ecomStoreId", row.ecom_store_id.encode())]
    return f"{row.ecom_store_id}:{row.entity_id or ''}".encode(), event.body(), headers


def new_producer(settings: Settings, timeout_ms: int = KAFKA_TIMEOUT_MS) -> AIOKafkaProducer:
    # No idempotence: the test broker cannot do it, and the bridge's consumers deduplicate on eventId anyway.
    return AIOKafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all", enable_idempotence=False,
                            request_timeout_ms=timeout_ms)


def _claim(engine: sa.Engine, batch_size: int) -> sa.Update:
    """Mark the next unpublished rows published, returning them; the mark stands only if the round commits."""
    pending = (sa.select(event_outbox.c.event_id)
               # Rows delivered without Kafka (the embedded mode, before Kafka was configured) are not sent again.
               .where(event_outbox.c.published_time.is_(None), event_outbox.c.delivered_time.is_(None),
                      event_outbox.c.dead_letter_time.is_(None))
               .order_by(event_outbox.c.event_id).limit(batch_size))
    if is_duckdb(engine):  # one relay, in the process owning the file
        claimed = event_outbox.c.event_id.in_(pending.scalar_subquery())
    else:
        # Relays sharing PostgreSQL each take rows no other holds. The ids come as one array (an InitPlan), and the
        # rows are found by their primary key: as `IN (subquery)` PostgreSQL hash-joined the ids to a scan of the
        # whole outbox, a round's cost growing with the table (a round of 2,000 of 100,000 rows: 34-38 against 20 ms).
        claimed = event_outbox.c.event_id == sa.any_(sa.func.array(pending.with_for_update(skip_locked=True)
                                                                   .scalar_subquery()))
    return across_tenants(
        event_outbox.update().where(claimed)
        .values(published_time=utc_now())
        .returning(event_outbox.c.event_id, event_outbox.c.tenant_id, event_outbox.c.ecom_store_id,
                   event_outbox.c.subject, event_outbox.c.entity_id, event_outbox.c.datetime, event_outbox.c.metadata),
        "the relay sends every tenant's events to Kafka")


def claim_in_index_order(conn: sa.Connection) -> None:
    """PostgreSQL: the claim walks the index of unpublished rows in event_id order and stops at the round's size.
    Before the outbox's first ANALYZE after a burst (autovacuum's comes up to a minute later, or never where it is
    off) PostgreSQL takes the waiting rows for a handful and sorts them all instead, on disk, every round: 57-64 ms
    a round of 2,000 with 100,000 waiting, and growing with them, against 19 ms so. Sorting is off for the round's
    transaction alone (SET LOCAL): this statement has no plan worth one."""
    if not is_duckdb(conn.engine):
        conn.exec_driver_sql("SET LOCAL enable_sort = off")


async def publish_pending(engine: sa.Engine, producer: AIOKafkaProducer, settings: Settings) -> int:
    """One round; returns how many rows were published. Raises (and leaves the rows unpublished) when a send
    fails. The database calls block the event loop: it is the relay's own, nothing else waits on it."""
    with engine.begin() as conn:
        claim_in_index_order(conn)
        # RETURNING comes in no particular order: sorted here, since the sends must go in event_id order.
        rows = sorted(conn.execute(_claim(engine, settings.relay.batch_size)), key=lambda row: row.event_id)
        if not rows:
            quiet_commit(conn)  # its update changed nothing: no work for the idle polls (db.polls), its own included
            return 0
        # Each partition's records in event_id order: one key always goes to one partition, so each eCom store and
        # entity keeps its order. The partitions are the default partitioner's, computed for the whole round at once
        # (events.partitions).
        records = [kafka_record(row) for row in rows]
        topic_partitions = sorted(await producer.partitions_for(settings.kafka.topic))
        by_partition: dict[int, list[Record]] = defaultdict(list)
        for record, partition in zip(records, partitions_of([key for key, _, _ in records], topic_partitions),
                                     strict=True):
            by_partition[partition].append(record)
        outcomes = await asyncio.gather(*(_send_in_batches(producer, settings.kafka.topic, partition, in_order)
                                          for partition, in_order in by_partition.items()), return_exceptions=True)
        if failure := next((outcome for outcome in outcomes if isinstance(outcome, BaseException)), None):
            raise failure  # the round's transaction rolls back: its rows are unpublished again
    return len(rows)


async def _send_in_batches(producer: AIOKafkaProducer, topic: str, partition: int, records: list[Record]) -> None:
    """A partition's records, in order, as record batches of the producer's batch size, filled here; returns once
    the broker acknowledged them all. A future per batch instead of one per record (as `send` makes): one relay's
    CPU per event 30 -> 18 us (README "Events"). aiokafka queues one partition's batches in the order given."""
    acknowledgements = []
    batch = producer.create_batch()
    for key, value, headers in records:
        # The first record always fits in an empty batch (aiokafka's builder takes it whatever its size).
        while batch.append(key=key, value=value, timestamp=None, headers=headers) is None:
            acknowledgements.append(await _submit(producer, batch, topic, partition))
            batch = producer.create_batch()
    acknowledgements.append(await _submit(producer, batch, topic, partition))
    await asyncio.gather(*acknowledgements)


async def _submit(producer: AIOKafkaProducer, batch: BatchBuilder, topic: str, partition: int) -> asyncio.Future[Any]:
    batch.close()  # complete: nothing else appends to it
    return await producer.send_batch(batch, topic, partition=partition)


def run_relay(settings: Settings, engine: sa.Engine, stop: threading.Event, retry: RetryPolicy = RELAY_RETRY,
              kafka_timeout_ms: int = KAFKA_TIMEOUT_MS) -> None:
    """Relay until `stop` is set (a thread of `pia worker`, or of `pia serve` on DuckDB), then flush and stop the
    producer. A round in progress when asked to stop finishes first (bounded by kafka_timeout_ms)."""
    asyncio.run(_Relay(settings, engine, stop, retry, kafka_timeout_ms).run())


class _Relay:
    def __init__(self, settings: Settings, engine: sa.Engine, stop: threading.Event, retry: RetryPolicy,
                 kafka_timeout_ms: int) -> None:
        self.settings, self.engine, self.stop, self.retry = settings, engine, stop, retry
        self.kafka_timeout_ms = kafka_timeout_ms
        self.producer: AIOKafkaProducer | None = None

    async def run(self) -> None:
        wake = asyncio.Event()
        listener = None if is_duckdb(self.engine) else asyncio.create_task(self._listen(wake))
        gate = PollGate(self.engine)  # DuckDB: after a round that found nothing, ask again once something is committed
        failures = 0
        try:
            while not self.stop.is_set():
                wake.clear()
                if not gate.open():
                    await self._pause(self.settings.relay.poll_seconds, wake)
                    continue
                gate.polling()
                try:
                    published = await publish_pending(self.engine, await self._producer(), self.settings)
                except Exception as error:
                    failures += 1
                    self._report(error, failures)
                    await self._drop_producer()
                    await self._pause(self._backoff(failures))  # not shortened by NOTIFY
                    continue
                if failures:
                    log.info("relay: sending again after %d failed round(s)", failures)
                    failures = 0
                if not published:
                    gate.idle()
                if published < self.settings.relay.batch_size:  # else more may wait: go on at once
                    await self._pause(self.settings.relay.poll_seconds, wake)
        finally:
            if listener is not None:
                listener.cancel()
                await asyncio.gather(listener, return_exceptions=True)
            await self._drop_producer()

    def _backoff(self, failures: int) -> float:
        return self.retry.delay(min(failures, _BACKOFF_STEPS)).total_seconds()

    async def _producer(self) -> AIOKafkaProducer:
        """The started producer; started on first use, so an unreachable broker is one more failed round."""
        if self.producer is None:
            producer = new_producer(self.settings, self.kafka_timeout_ms)
            try:
                await producer.start()
            except BaseException:
                await producer.stop()
                raise
            self.producer = producer
        return self.producer

    async def _drop_producer(self) -> None:
        """Stop the producer (flushing what it holds). After a failed round the next one starts a fresh producer,
        which learns the cluster again from the bootstrap servers instead of retrying on what it knew."""
        if self.producer is not None:
            producer, self.producer = self.producer, None
            with contextlib.suppress(KafkaError):
                await producer.stop()

    def _report(self, error: Exception, failures: int) -> None:
        """Once per outage for what comes and goes (Kafka, the database); every time for anything else."""
        if isinstance(error, KafkaError) or is_transient(error):
            if failures == 1:
                log.warning("relay: %s unavailable (%s); the outbox holds the events until it is back",
                            "Kafka" if isinstance(error, KafkaError) else "the database", type(error).__name__)
        else:
            log.exception("relay: a round failed (%d in a row)", failures)

    async def _pause(self, seconds: float, wake: asyncio.Event | None = None) -> None:
        """Wait `seconds`, less when woken or stopped."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not self.stop.is_set() and not (wake and wake.is_set()) and (left := deadline - loop.time()) > 0:
            step = min(left, STOP_CHECK_SECONDS)
            if wake is None:
                await asyncio.sleep(step)
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), step)

    async def _listen(self, wake: asyncio.Event) -> None:
        """PostgreSQL: LISTEN on the outbox channel on a connection of its own and wake the relay on each NOTIFY.
        A lost connection is made again after a backoff (logged once); the slow poll covers the gap."""
        conninfo = self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
        failures = 0
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True,
                                                                 connect_timeout=3) as conn:
                    await conn.execute(f"LISTEN {OUTBOX_CHANNEL}")
                    if failures:
                        log.info("relay: listening for new events again")
                    failures = 0
                    wake.set()  # rows committed while nobody listened
                    async for _ in conn.notifies():
                        wake.set()
            except psycopg.Error as error:
                failures += 1
                if failures == 1:
                    log.warning("relay: cannot listen for new events (%s); polling every %.0f s meanwhile",
                                type(error).__name__, self.settings.relay.poll_seconds)
                await asyncio.sleep(self._backoff(failures))
