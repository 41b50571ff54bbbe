"""The relay: outbox rows reach a real Kafka-compatible broker (Tansu) once, as the shared design's records, in
order per key, and only once committed; it holds them while the broker is away. Both backends; PostgreSQL also
runs two relays at once and wakes them by NOTIFY."""

import asyncio
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.partitioner import DefaultPartitioner

from contracts import events as subjects
from db.engine import is_duckdb
from db.ids import new_id
from db.outbox import OUTBOX_CHANNEL, order_event, pair_events
from db.schema import event_outbox
from events.relay import _claim, claim_in_index_order, new_producer, publish_pending, run_relay
from rules.retry import RetryPolicy
from serving.app import create_app
from settings import Settings
from tests.conftest import LiveServer, free_port, wait_for, without_upload_workers
from tests.kafka_broker import KafkaBroker, kafka  # noqa: F401 - the fixture

PIA = str(Path(sys.executable).parent / "pia")
PARTITIONS = 3
# Short waits, so the broker-outage test sees the relay fail and come back within seconds.
FAST_RETRY = RetryPolicy(base_seconds=0.1, max_seconds=0.5)
KAFKA_TIMEOUT_MS = 2_000


@pytest.fixture
def relayed(own_store: tuple[Settings, sa.Engine], kafka: KafkaBroker) -> tuple[Settings, sa.Engine]:  # noqa: F811
    """The test's own store, pointed at the broker, whose topic exists; small rounds, so tests see several."""
    settings, engine = own_store
    kafka.create_topic(settings.kafka.topic, PARTITIONS)
    return settings.with_changes(kafka={"bootstrap_servers": kafka.bootstrap_servers},
                                 relay={"batch_size": 4, "poll_seconds": 0.2}), engine


@pytest.fixture
def tenant_id() -> str:
    return new_id()


def write(engine: sa.Engine, tenant_id: str, pairs: list[tuple[str, str | None]],
          subject: str = subjects.INVENTORY_UPDATED) -> list[str]:
    """Events for (eCom store id, entity id) pairs in one committed transaction; returns their event ids."""
    with engine.begin() as conn:
        before = set(conn.scalars(sa.select(event_outbox.c.event_id).where(event_outbox.c.tenant_id == tenant_id)))
        pair_events(conn, tenant_id, subject, pairs)
        return sorted(set(conn.scalars(sa.select(event_outbox.c.event_id)
                                       .where(event_outbox.c.tenant_id == tenant_id))) - before)


def outbox(engine: sa.Engine, tenant_id: str) -> list[sa.Row]:
    with engine.connect() as conn:
        return conn.execute(sa.select(event_outbox).where(event_outbox.c.tenant_id == tenant_id)
                            .order_by(event_outbox.c.event_id)).all()


def unpublished(engine: sa.Engine, tenant_id: str) -> int:
    return sum(row.published_time is None for row in outbox(engine, tenant_id))


def listening(engine: sa.Engine) -> int:
    """PostgreSQL: how many sessions of this database listen on the outbox channel (a relay each)."""
    with engine.connect() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                    "AND query = :listen"), {"listen": f"LISTEN {OUTBOX_CHANNEL}"}).scalar_one()


def everything_in(broker: KafkaBroker, topic: str) -> list[ConsumerRecord]:
    """Every record the broker holds for the topic (read up to the end offsets), partition by partition."""

    async def read() -> list[ConsumerRecord]:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=10_000)
        await admin.start()
        try:
            [described] = await admin.describe_topics([topic])
        finally:
            await admin.close()
        partitions = [TopicPartition(topic, partition["partition"]) for partition in described["partitions"]]
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap_servers, enable_auto_commit=False,
                                    request_timeout_ms=10_000)
        await consumer.start()
        try:
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            ends = await consumer.end_offsets(partitions)
            records: list[ConsumerRecord] = []
            async with asyncio.timeout(30):
                while [p for p in partitions if await consumer.position(p) < ends[p]]:
                    for batch in (await consumer.getmany(timeout_ms=200)).values():
                        records += batch
            return records
        finally:
            await consumer.stop()

    return asyncio.run(read())


def event_ids(records: list[ConsumerRecord]) -> list[str]:
    return [orjson.loads(record.value)["eventId"] for record in records]


async def publish_everything(engine: sa.Engine, settings: Settings,
                             new: Callable[[], AIOKafkaProducer]) -> list[int]:
    """The relay's rounds until one finds nothing, on a producer made (in the loop, as aiokafka wants), started and
    stopped here; what each round published."""
    producer = new()
    await producer.start()
    try:
        rounds = [await publish_pending(engine, producer, settings)]
        while rounds[-1]:
            rounds.append(await publish_pending(engine, producer, settings))
        return rounds
    finally:
        await producer.stop()


class RunningRelay:
    """run_relay in a thread, as `pia worker` runs it; stopped (and joined) by the test."""

    def __init__(self, settings: Settings, engine: sa.Engine) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=run_relay, args=(settings, engine, self.stop),
                                       kwargs={"retry": FAST_RETRY, "kafka_timeout_ms": KAFKA_TIMEOUT_MS})
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the relay did not stop"


@pytest.fixture
def relays() -> Iterator[list[RunningRelay]]:
    started: list[RunningRelay] = []
    yield started
    for relay in started:
        relay.close()


def test_rows_are_published_once_as_the_designs_records(relayed: tuple[Settings, sa.Engine], kafka: KafkaBroker,  # noqa: F811
                                                         tenant_id: str) -> None:
    settings, engine = relayed
    store, other_store = new_id(), new_id()
    order_id, capture_id = new_id(), new_id()
    with engine.begin() as conn:
        order_event(conn, tenant_id, store, subjects.ORDER_READY_FOR_PAYMENT_CAPTURE, order_id,
                    {"captureId": capture_id})
    brands = subjects.REFERENCE_LISTS["brands"]
    write(engine, tenant_id, [(store, None), (other_store, None)], brands)
    write(engine, tenant_id, [(store, f"sku {n}") for n in range(5)])

    rounds = asyncio.run(publish_everything(engine, settings, lambda: new_producer(settings, KAFKA_TIMEOUT_MS)))
    assert rounds == [4, 4, 0]  # 8 rows in rounds of relay.batch_size
    rows = outbox(engine, tenant_id)
    assert len(rows) == 8 and all(row.published_time is not None for row in rows)

    records = everything_in(kafka, settings.kafka.topic)
    assert sorted(event_ids(records)) == [row.event_id for row in rows]  # each exactly once
    by_id = {orjson.loads(record.value)["eventId"]: record for record in records}
    capture = by_id[rows[0].event_id]
    assert capture.key == f"{store}:{order_id}".encode()
    assert capture.headers == (("subject", b"OrderReadyForPaymentCapture"), ("tenantId", tenant_id.encode()),
                               ("ecomStoreId", store.encode()))
    message = orjson.loads(capture.value)
    assert message == {"entityId": order_id, "eventId": rows[0].event_id, "datetime": message["datetime"],
                       "metadata": {"captureId": capture_id}}
    assert message["datetime"].endswith("Z")
    schema_event = next(by_id[row.event_id] for row in rows if row.ecom_store_id == other_store)
    assert schema_event.key == f"{other_store}:".encode()
    assert dict(schema_event.headers)["subject"] == brands.encode()
    assert orjson.loads(schema_event.value)["entityId"] is None
    assert "metadata" not in orjson.loads(schema_event.value)


def test_the_relay_names_each_records_partition_where_the_default_partitioner_would(
        relayed: tuple[Settings, sa.Engine], kafka: KafkaBroker, tenant_id: str) -> None:  # noqa: F811
    """The relay places records itself (events.partitions: aiokafka's placement at a fraction of its CPU, README
    Decisions): a producer whose partitioner fails if it is ever asked still publishes every row, each in the
    partition aiokafka's default partitioner gives its key, so consumers of either see one order per key."""
    settings, engine = relayed
    pairs = [(new_id(), entity) for entity in (None, "1001", "sku-7", new_id()) for _ in range(3)]
    write(engine, tenant_id, pairs)

    def never_asked(*_: object) -> int:
        raise AssertionError("the relay left a record's partition to the producer")

    asyncio.run(publish_everything(engine, settings, lambda: AIOKafkaProducer(
        bootstrap_servers=settings.kafka.bootstrap_servers, acks="all", enable_idempotence=False,
        request_timeout_ms=KAFKA_TIMEOUT_MS, partitioner=never_asked)))
    records = everything_in(kafka, settings.kafka.topic)
    assert len(records) == len(pairs) and unpublished(engine, tenant_id) == 0
    every_partition = list(range(PARTITIONS))
    for record in records:
        assert record.partition == DefaultPartitioner()(record.key, every_partition, every_partition)


def test_each_key_keeps_its_order(relayed: tuple[Settings, sa.Engine], kafka: KafkaBroker,  # noqa: F811
                                  tenant_id: str, relays: list[RunningRelay]) -> None:
    settings, engine = relayed
    stores, entities = [new_id() for _ in range(3)], [new_id() for _ in range(4)]
    for _ in range(5):  # each transaction changes every entity of every store once more
        write(engine, tenant_id, [(store, entity) for store in stores for entity in entities])
    relays.append(RunningRelay(settings, engine))
    wait_for(lambda: unpublished(engine, tenant_id) == 0, 30, "every row published")

    records = everything_in(kafka, settings.kafka.topic)
    assert len(records) == 60
    written = {row.event_id: f"{row.ecom_store_id}:{row.entity_id}".encode() for row in outbox(engine, tenant_id)}
    for key in set(written.values()):
        sent = [event_id for event_id, record in zip(event_ids(records), records, strict=True) if record.key == key]
        assert sent == sorted(event_id for event_id, written_key in written.items() if written_key == key)
        assert len(sent) == 5


class CountedBatches(AIOKafkaProducer):
    """A real producer that counts the record batches submitted to it, per partition."""

    def __init__(self, **config: object) -> None:
        super().__init__(**config)
        self.batches: dict[int, int] = {}

    async def send_batch(self, batch, topic, *, partition):  # type: ignore[no-untyped-def]  # aiokafka's own signature
        self.batches[partition] = self.batches.get(partition, 0) + 1
        return await super().send_batch(batch, topic, partition=partition)


def test_a_round_larger_than_a_record_batch_keeps_each_keys_order(relayed: tuple[Settings, sa.Engine],
                                                                  kafka: KafkaBroker, tenant_id: str) -> None:  # noqa: F811
    """The relay fills record batches itself (a future per batch, not per record): a round whose partitions each
    take several batches still sends every row once, and each key's rows in event_id order across the batches."""
    settings, engine = relayed
    settings = settings.with_changes(relay={"batch_size": 1200})
    store, entities = new_id(), [new_id() for _ in range(6)]
    for _ in range(100):  # 600 rows of six keys, in one round
        write(engine, tenant_id, [(store, entity) for entity in entities])
    made: list[CountedBatches] = []  # the producer is made in publish_everything's loop, as aiokafka wants

    def counted() -> CountedBatches:
        made.append(CountedBatches(bootstrap_servers=settings.kafka.bootstrap_servers, acks="all",
                                   enable_idempotence=False, request_timeout_ms=KAFKA_TIMEOUT_MS))
        return made[-1]

    assert asyncio.run(publish_everything(engine, settings, counted)) == [600, 0]
    [producer] = made
    assert producer.batches and all(batches >= 2 for batches in producer.batches.values())
    records = everything_in(kafka, settings.kafka.topic)
    assert sorted(event_ids(records)) == [row.event_id for row in outbox(engine, tenant_id)]  # each once
    for entity in entities:
        key = f"{store}:{entity}".encode()
        sent = [event_id for event_id, record in zip(event_ids(records), records, strict=True) if record.key == key]
        assert len(sent) == 100 and sent == sorted(sent)


def test_before_any_analyze_a_round_walks_the_unpublished_index_instead_of_sorting_the_backlog(
        own_store: tuple[Settings, sa.Engine], tenant_id: str) -> None:
    """A burst of events into an outbox PostgreSQL has no statistics for yet (autovacuum is off on the test server;
    elsewhere its ANALYZE comes up to a minute later): the relay's claim still reads the oldest rows of the index of
    unpublished rows and stops at the round's size, instead of sorting every waiting row each round."""
    settings, engine = own_store
    if is_duckdb(engine):
        pytest.skip("DuckDB plans the claim without an index; its one relay owns the file")
    store = new_id()
    written = sorted(write(engine, tenant_id, [(store, new_id()) for _ in range(20_000)]))
    claim = _claim(engine, 500)
    with engine.begin() as conn:
        claim_in_index_order(conn)
        plan = "\n".join(conn.exec_driver_sql("EXPLAIN " + str(claim.compile(
            dialect=engine.dialect, compile_kwargs={"literal_binds": True}))).scalars())
        assert "Sort" not in plan and "ix_event_outbox_unpublished" in plan, plan
        assert sorted(row.event_id for row in conn.execute(claim)) == written[:500]


def test_events_of_a_rolled_back_change_never_reach_kafka(relayed: tuple[Settings, sa.Engine],
                                                          kafka: KafkaBroker, tenant_id: str,  # noqa: F811
                                                          relays: list[RunningRelay]) -> None:
    settings, engine = relayed
    relays.append(RunningRelay(settings, engine))
    store = new_id()
    with pytest.raises(RuntimeError), engine.begin() as conn:
        pair_events(conn, tenant_id, subjects.PRODUCT_UPDATED, [(store, new_id()) for _ in range(3)])
        raise RuntimeError("the change fails after writing its events")
    committed = write(engine, tenant_id, [(store, new_id())])
    wait_for(lambda: unpublished(engine, tenant_id) == 0, 30, "the committed row published")
    assert event_ids(everything_in(kafka, settings.kafka.topic)) == committed


def test_the_relay_holds_the_rows_while_kafka_is_away(relayed: tuple[Settings, sa.Engine],
                                                      kafka: KafkaBroker, tenant_id: str,  # noqa: F811
                                                      relays: list[RunningRelay],
                                                      caplog: pytest.LogCaptureFixture) -> None:
    settings, engine = relayed
    caplog.set_level(logging.INFO, logger="events.relay")
    relays.append(RunningRelay(settings, engine))
    store = new_id()
    write(engine, tenant_id, [(store, new_id())])
    wait_for(lambda: unpublished(engine, tenant_id) == 0, 30, "the first row published")

    kafka.stop()
    while_away = [event_id for _ in range(4) for event_id in write(engine, tenant_id, [(store, new_id())
                                                                                      for _ in range(3)])]
    wait_for(lambda: "Kafka unavailable" in caplog.text, 30, "the relay to find Kafka away")
    assert unpublished(engine, tenant_id) == 12  # held, none marked published

    # A fresh, empty broker (memory storage). The relay's first send creates the topic again (Tansu creates topics
    # on produce); the test creating it too would race that send, and whichever lost would see a spurious error.
    kafka.start()
    wait_for(lambda: unpublished(engine, tenant_id) == 0, 30, "the held rows published")
    assert sorted(event_ids(everything_in(kafka, settings.kafka.topic))) == while_away  # none lost
    assert caplog.text.count("Kafka unavailable") == 1  # once per outage
    assert "sending again" in caplog.text


@pytest.mark.parametrize("backend", ["postgresql"])  # DuckDB has one relay, in the process owning the file
def test_two_pia_workers_relay_every_row_exactly_once(relayed: tuple[Settings, sa.Engine],
                                                      kafka: KafkaBroker, tenant_id: str) -> None:  # noqa: F811
    settings, engine = relayed
    env = {**os.environ, "PIA_DATABASE_URL": settings.database_url, "PIA_DATA_DIR": str(settings.data_dir),
           "PIA_SECRET_KEY": settings.secret_key.get_secret_value(), "PIA_KAFKA_BOOTSTRAP_SERVERS":
           kafka.bootstrap_servers, "PIA_RELAY_BATCH_SIZE": "4", "PIA_RELAY_POLL_SECONDS": "0.2"}
    workers = [subprocess.Popen([PIA, "worker"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True) for _ in range(2)]
    try:
        wait_for(lambda: listening(engine) == 2, 60, "both workers' relays to listen")
        written = [event_id for _ in range(30)
                   for event_id in write(engine, tenant_id, [(new_id(), new_id()) for _ in range(10)])]
        wait_for(lambda: unpublished(engine, tenant_id) == 0, 60, "every row published")
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        outputs = [worker.communicate(timeout=30)[1] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], outputs  # stopped cleanly, producer flushed
    sent = event_ids(everything_in(kafka, settings.kafka.topic))
    assert len(written) == 300 and sorted(sent) == sorted(written)


@pytest.mark.parametrize("backend", ["duckdb"])
def test_pia_serve_on_duckdb_runs_the_relay(relayed: tuple[Settings, sa.Engine], kafka: KafkaBroker,  # noqa: F811
                                            tenant_id: str) -> None:
    settings, engine = relayed
    port = free_port()
    server = LiveServer(create_app(without_upload_workers(settings), engine, issuer=f"http://127.0.0.1:{port}"), port)
    server.start()
    try:
        written = write(engine, tenant_id, [(new_id(), new_id())])
        wait_for(lambda: unpublished(engine, tenant_id) == 0, 30, "the row published")
    finally:
        server.stop()
    assert not [thread for thread in threading.enumerate() if thread.name == "event-relay"]  # stopped with it
    assert event_ids(everything_in(kafka, settings.kafka.topic)) == written


@pytest.mark.parametrize("backend", ["postgresql"])  # DuckDB's relay polls: nothing can notify it
def test_notify_wakes_the_relay_long_before_its_slow_poll(relayed: tuple[Settings, sa.Engine], tenant_id: str,
                                                          relays: list[RunningRelay]) -> None:
    settings, engine = relayed
    relays.append(RunningRelay(settings.with_changes(relay={"poll_seconds": 3600}), engine))
    wait_for(lambda: listening(engine) == 1, 10, "the relay to listen")
    store = new_id()
    write(engine, tenant_id, [(store, new_id())])
    wait_for(lambda: unpublished(engine, tenant_id) == 0, 10, "the first row published")
    # The relay has had its first round and now waits for an hour unless a commit notifies it.
    write(engine, tenant_id, [(store, new_id())])
    wait_for(lambda: unpublished(engine, tenant_id) == 0, 10, "the second row published")
