"""The Service Bus destination: the real azure-servicebus SDK, through events/servicebus.py, to a Service Bus peer.

The peer (tests/servicebus_peer.py) is a real AMQP 1.0 endpoint on a localhost socket that signs clients in the way
Service Bus does (a SAS token put on `$cbs`, verified with the shared key); no local broker speaks that sign-in.
"""

import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import orjson
import pytest
from proton import Message
from proton.utils import BlockingConnection, LinkDetached

from contracts import events as subjects
from contracts.event_message import OutgoingEvent
from db.destinations import DestinationSettings
from events.delivery import DeliveryFailed
from events.servicebus import ServiceBusDestination, sas_signature, sas_token
from tests.conftest import free_port
from tests.servicebus_peer import MAX_MESSAGE_SIZE, ServiceBusPeer

pytestmark = pytest.mark.timeout(30)

KEY_NAME = "pia-send"
KEY = "c2VjcmV0LWtleS1mb3ItcGlhLXRlc3Rz+/8="  # a shared access key is base64 text, signed with as it is
TIMEOUT = 3.0


@pytest.fixture
def peer() -> Iterator[ServiceBusPeer]:
    with ServiceBusPeer(KEY_NAME, KEY, entities=("events", "orders")) as started:
        yield started


def destination(peer: ServiceBusPeer, entity: str = "events", *, key_name: str = KEY_NAME, key: str = KEY,
                timeout: float = TIMEOUT, port: int | None = None) -> ServiceBusDestination:
    settings = DestinationSettings("SERVICE_BUS", "127.0.0.1", entity, key_name, key)
    return ServiceBusDestination.from_settings(settings, emulator_port=port or peer.port, timeout_seconds=timeout)


def event(number: int, subject: str = subjects.PRODUCT_UPDATED, metadata: dict | None = None) -> OutgoingEvent:
    return OutgoingEvent(f"0190a0c0-0000-7000-8000-{number:012d}", subject, f"entity-{number}",
                         datetime(2026, 11, 24, 8, 0, number % 60, tzinfo=UTC), metadata)


def schema_event(number: int) -> OutgoingEvent:
    return OutgoingEvent(f"0190a0c0-0000-7000-8000-{number:012d}", subjects.REFERENCE_LISTS["brands"], None,
                         datetime(2026, 11, 24, 8, 0, tzinfo=UTC), None)


def assert_arrived(peer: ServiceBusPeer, entity: str, events: list[OutgoingEvent]) -> None:
    received = peer.received(entity)
    assert [message.message_id for message in received] == [sent.event_id for sent in events]
    for message, sent in zip(received, events, strict=True):
        assert (message.subject, message.content_type) == (sent.subject, "application/json")
        assert orjson.loads(message.body) == orjson.loads(sent.body())


async def test_events_arrive_in_order_with_subject_id_content_type_and_body(peer: ServiceBusPeer) -> None:
    first = [event(n) for n in range(20)] + [schema_event(20)] + [
        event(21, subjects.ORDER_READY_FOR_PAYMENT_CAPTURE, {"captureId": "capture-1"})]
    second = [event(n, subjects.INVENTORY_UPDATED) for n in range(22, 30)]
    sink = destination(peer)
    try:
        await sink.deliver(first)
        await sink.deliver(second)
    finally:
        await sink.close()

    assert_arrived(peer, "events", first + second)
    bodies = [orjson.loads(message.body) for message in peer.received("events")]
    assert bodies[20]["entityId"] is None and "metadata" not in bodies[20]
    assert bodies[21]["metadata"] == {"captureId": "capture-1"}
    transfers = [message.transfer for message in peer.received("events")]
    assert len(set(transfers[:22])) == 1 and len(set(transfers[22:])) == 1  # one batch per delivery
    assert peer.statuses() == [202]  # signed in once, the link kept open
    assert peer.received("orders") == []


async def test_events_beyond_the_entity_size_limit_go_in_several_batches_in_order(peer: ServiceBusPeer) -> None:
    bulky = {"note": "x" * 20_000}
    events = [event(n, metadata=bulky) for n in range(40)]  # about 800 KB: several of the peer's 256 KiB
    sink = destination(peer)
    try:
        await sink.deliver(events)
    finally:
        await sink.close()

    assert_arrived(peer, "events", events)
    transfers = [message.transfer for message in peer.received("events")]
    assert len(set(transfers)) >= 3 and transfers == sorted(transfers)


async def test_an_event_larger_than_the_entity_takes_fails_for_good_before_anything_is_sent(
        peer: ServiceBusPeer) -> None:
    sink = destination(peer)
    try:
        with pytest.raises(DeliveryFailed) as failure:
            await sink.deliver([event(1), event(2, metadata={"note": "x" * MAX_MESSAGE_SIZE})])
    finally:
        await sink.close()
    assert not failure.value.transient and not failure.value.credentials
    assert failure.value.answer == "message too large"
    assert peer.received("events") == []


@pytest.mark.parametrize(("key_name", "key"), [(KEY_NAME, "d3Jvbmcta2V5LWZvci1waWEtdGVzdHMrLzg="),
                                               ("RootManageSharedAccessKey", KEY)],
                         ids=["wrong key", "wrong key name"])
async def test_refused_credentials_fail_as_credentials_and_deliver_nothing(peer: ServiceBusPeer, key_name: str,
                                                                          key: str) -> None:
    sink = destination(peer, key_name=key_name, key=key)
    try:
        with pytest.raises(DeliveryFailed) as failure:
            await sink.deliver([event(1)])
    finally:
        await sink.close()
    assert failure.value.credentials and not failure.value.transient
    assert "401" in str(failure.value) and key not in str(failure.value)
    assert peer.statuses() == [401]
    assert peer.received("events") == []


async def test_an_unknown_entity_fails_for_good(peer: ServiceBusPeer) -> None:
    sink = destination(peer, "no-such-queue")
    try:
        with pytest.raises(DeliveryFailed) as failure:
            await sink.deliver([event(1)])
    finally:
        await sink.close()
    assert not failure.value.transient and not failure.value.credentials
    assert failure.value.answer == "entity not found" and "no-such-queue" in str(failure.value)
    assert peer.statuses() == [404]  # Service Bus answers for a missing entity at sign-in
    assert peer.received("events") == [] and peer.received("orders") == []


async def test_a_bus_that_goes_away_fails_transiently(peer: ServiceBusPeer) -> None:
    sink = destination(peer)
    try:
        await sink.deliver([event(1)])
        peer.stop()
        with pytest.raises(DeliveryFailed) as dropped:  # the open connection is closed under the sender
            await sink.deliver([event(2)])
        with pytest.raises(DeliveryFailed) as refused:  # nothing listens any more
            await sink.deliver([event(2)])
    finally:
        await sink.close()
    assert dropped.value.transient and not dropped.value.credentials
    assert refused.value.transient and not refused.value.credentials
    assert [message.message_id for message in peer.received("events")] == [event(1).event_id]


async def test_a_peer_that_never_answers_fails_transiently_within_the_timeout() -> None:
    """A listener that accepts and says nothing: without the destination's own deadline the SDK waits on it."""
    port = free_port()
    silent, accepted = socket.create_server(("127.0.0.1", port)), []
    listening = threading.Thread(target=lambda: accepted.append(silent.accept()), daemon=True)
    listening.start()
    settings = DestinationSettings("SERVICE_BUS", "127.0.0.1", "events", KEY_NAME, KEY)
    sink = ServiceBusDestination.from_settings(settings, emulator_port=port, timeout_seconds=1.0)
    try:
        with pytest.raises(DeliveryFailed) as failure:
            await sink.deliver([event(1)])
    finally:
        await sink.close()
        for connection, _ in accepted:
            connection.close()
        silent.close()
    assert failure.value.transient and not failure.value.credentials


def test_settings_without_an_entity_path_or_key_name_are_refused() -> None:
    for entity_path, key_name in [(None, KEY_NAME), ("events", None)]:
        settings = DestinationSettings("SERVICE_BUS", "pia-test.servicebus.windows.net", entity_path, key_name, KEY)
        with pytest.raises(ValueError, match="entity path and a shared access key name"):
            ServiceBusDestination.from_settings(settings)


async def test_nothing_to_deliver_opens_no_connection(peer: ServiceBusPeer) -> None:
    sink = destination(peer)
    await sink.deliver([])
    await sink.close()
    assert peer.statuses() == []


# Fixed vectors of Microsoft's documented algorithm (service-bus-sas, "Generate a SAS token"): HMAC-SHA256 keyed with
# the key's UTF-8 text over quote_plus(resource URI) + "\n" + expiry, base64, then URL-encoded into the token. The
# signatures were computed with openssl, not with this code:
#   printf 'sb%3A%2F%2Fpia-test.servicebus.windows.net%2Fevents\n1700000000' \
#     | openssl dgst -sha256 -hmac 'c2VjcmV0LWtleS1mb3ItcGlhLXRlc3Rz+/8=' -binary | base64
# Signing the raw URI, lower-casing it, decoding the key from base64 or swapping the URI and expiry all give other
# signatures; the second vector's capitals, space and '/' in the key text catch the encodings.
SAS_VECTORS = [
    ("sb://pia-test.servicebus.windows.net/events", "RootManageSharedAccessKey", KEY, 1_700_000_000,
     "OeMu7RtKt/cbk4P8pQvT/eNxiDC9kFJ4UjylCf+dJvM=",
     "SharedAccessSignature sr=sb%3A%2F%2Fpia-test.servicebus.windows.net%2Fevents"
     "&sig=OeMu7RtKt%2Fcbk4P8pQvT%2FeNxiDC9kFJ4UjylCf%2BdJvM%3D&se=1700000000&skn=RootManageSharedAccessKey"),
    ("https://Pia-Test.servicebus.windows.net/Orders Queue/messages", "pia send", "k3y with spaces & symbols=",
     4_102_444_800, "cTwOvuAo4m+etUDCdJrp0TBgysEpuDcdc5jJjTKkqY8=",
     "SharedAccessSignature sr=https%3A%2F%2FPia-Test.servicebus.windows.net%2FOrders+Queue%2Fmessages"
     "&sig=cTwOvuAo4m%2BetUDCdJrp0TBgysEpuDcdc5jJjTKkqY8%3D&se=4102444800&skn=pia+send"),
]


@pytest.mark.parametrize(("uri", "key_name", "key", "expiry", "signature", "token"), SAS_VECTORS)
def test_sas_token_matches_fixed_vectors(uri: str, key_name: str, key: str, expiry: int, signature: str,
                                         token: str) -> None:
    assert sas_signature(uri, key, expiry) == signature
    assert sas_token(uri, key_name, key, expiry) == token


def test_the_peer_refuses_expired_tokens_and_tokens_for_another_entity() -> None:
    peer = ServiceBusPeer(KEY_NAME, KEY, entities=("events", "orders"))
    audience = f"sb://127.0.0.1:{peer.port}/events"
    later = int(time.time()) + 600
    assert peer.check_token(sas_token(audience, KEY_NAME, KEY, later), audience)[0] == 202
    assert peer.check_token(sas_token(audience, KEY_NAME, KEY, int(time.time()) - 1), audience) == (
        401, "ExpiredToken: The token is expired.")
    orders = f"sb://127.0.0.1:{peer.port}/orders"
    assert peer.check_token(sas_token(audience, KEY_NAME, KEY, later), orders)[0] == 401
    assert peer.check_token(sas_token(audience, KEY_NAME, KEY, later), audience + "-archive")[0] == 401
    namespace = f"sb://127.0.0.1:{peer.port}/"  # a namespace-wide token covers every entity
    assert peer.check_token(sas_token(namespace, KEY_NAME, KEY, later), orders)[0] == 202


@pytest.mark.parametrize(("entity", "condition"), [("events", "amqp:unauthorized-access"),
                                                   ("no-such-queue", "amqp:not-found")])
def test_the_peer_refuses_a_send_link_without_a_token_or_to_an_unknown_entity(peer: ServiceBusPeer, entity: str,
                                                                              condition: str) -> None:
    """A plain AMQP client (proton's) that skips the put-token, as Service Bus would see it."""
    connection = BlockingConnection(f"127.0.0.1:{peer.port}", timeout=TIMEOUT, allowed_mechs="ANONYMOUS")
    try:
        with pytest.raises(LinkDetached) as refused:
            connection.create_sender(entity).send(Message(body=b"{}"))
    finally:
        connection.close()
    assert refused.value.condition == condition
    assert peer.received("events") == []
