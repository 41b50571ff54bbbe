"""The test broker itself: aiokafka produces to it and a consumer group reads back what was acknowledged."""

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from tests.kafka_broker import KafkaBroker, kafka  # noqa: F401 - the fixture


def test_messages_acknowledged_by_the_broker_are_consumed_by_a_group(kafka: KafkaBroker) -> None:  # noqa: F811
    kafka.create_topic("pia.test", partitions=3)

    async def round_trip() -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
        producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap_servers, acks="all",
                                    enable_idempotence=False, request_timeout_ms=10_000)
        await producer.start()
        try:
            for n in range(10):
                await producer.send_and_wait("pia.test", f"value {n}".encode(), key=f"key {n % 4}".encode(),
                                             headers=[("subject", b"ProductUpdated")])
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer("pia.test", bootstrap_servers=kafka.bootstrap_servers, group_id="test",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        received = []
        try:
            async with asyncio.timeout(30):
                while len(received) < 10:
                    for messages in (await consumer.getmany(timeout_ms=500)).values():
                        received += [(m.key, m.value, list(m.headers)) for m in messages]
        finally:
            await consumer.stop()
        return received

    received = asyncio.run(round_trip())
    assert sorted(value for _, value, _ in received) == sorted(f"value {n}".encode() for n in range(10))
    assert all(headers == [("subject", b"ProductUpdated")] for _, _, headers in received)
    # One key's messages keep their order (one partition per key).
    for key in {key for key, _, _ in received}:
        values = [value for k, value, _ in received if k == key]
        assert values == sorted(values, key=lambda value: int(value.split()[1]))


def test_a_position_beyond_the_log_end_is_kept_not_reset(kafka: KafkaBroker) -> None:  # noqa: F811
    """Unlike Kafka, the test broker answers a fetch beyond its log end with nothing rather than OFFSET_OUT_OF_RANGE,
    so a consumer keeps that position (auto_offset_reset never applies) and, once the log grows past it, reads from
    there on. With the log numbered from 0 again after a restart (memory storage), a consumer that lived through the
    restart would skip what lies below its old position: why tests/test_event_faults.py replaces the bridges with
    the broker (the 31 events one run lost)."""
    kafka.create_topic("pia.test", partitions=1)
    partition = TopicPartition("pia.test", 0)

    async def read_after_seeking_past_the_end() -> tuple[int, list[int]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap_servers, auto_offset_reset="earliest",
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([partition])
            consumer.seek(partition, 5)  # a position from before a restart, say
            await consumer.getmany(timeout_ms=1000)
            kept = await consumer.position(partition)
            producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap_servers, acks="all",
                                        enable_idempotence=False)
            await producer.start()
            try:
                for n in range(8):
                    await producer.send_and_wait("pia.test", f"value {n}".encode(), partition=0)
            finally:
                await producer.stop()
            offsets: list[int] = []
            async with asyncio.timeout(30):
                while len(offsets) < 3:
                    for messages in (await consumer.getmany(timeout_ms=500)).values():
                        offsets += [message.offset for message in messages]
            return kept, offsets
        finally:
            await consumer.stop()

    kept, offsets = asyncio.run(read_after_seeking_past_the_end())
    assert kept == 5
    assert offsets == [5, 6, 7]  # offsets 0 to 4 are never read
