"""The test broker itself: aiokafka produces to it and a consumer group reads back what was acknowledged."""

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

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
