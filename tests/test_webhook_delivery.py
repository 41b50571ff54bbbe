"""Webhook delivery over real sockets: events/webhook.py posts to a receiver that verifies every signature with
`standardwebhooks`, the way a consumer would; failures are classified for the bridge."""

import asyncio
import base64
import secrets
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks import Webhook

from contracts import events as subjects
from contracts.event_message import OutgoingEvent
from db.destinations import DestinationSettings
from db.ids import new_id
from events.delivery import DeliveryFailed
from events.webhook import WebhookDestination, signing_key
from tests.conftest import free_port
from tests.webhook_receiver import WebhookReceiver

pytestmark = pytest.mark.timeout(20)  # a guard: each test takes about a second at most

SECRET = "correct horse battery staple ☃"  # plain text, not ASCII only
TIMEOUT = 0.5


def webhook(url: str, secret: str = SECRET) -> WebhookDestination:
    return WebhookDestination(DestinationSettings(kind="WEBHOOK", endpoint=url, entity_path=None,
                                                  shared_access_key_name=None, secret=secret), timeout=TIMEOUT)


def some_events(count: int) -> list[OutgoingEvent]:
    return [OutgoingEvent(event_id=new_id(), subject=subjects.INVENTORY_UPDATED, entity_id=new_id(),
                          datetime=datetime.now(UTC), metadata=None) for _ in range(count)]


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    """A consumer that was given SECRET and uses it as the raw key, as the module documents."""
    with WebhookReceiver(SECRET.encode()) as running:
        yield running


@pytest.fixture
async def destination(receiver: WebhookReceiver) -> AsyncIterator[WebhookDestination]:
    sender = webhook(receiver.url)
    yield sender
    await sender.close()


async def refusal(destination: WebhookDestination, events: list[OutgoingEvent]) -> DeliveryFailed:
    with pytest.raises(DeliveryFailed) as failure:
        await destination.deliver(events)
    assert SECRET not in str(failure.value)
    return failure.value


async def test_events_arrive_in_order_signed_with_their_kind_and_spec_body(
        receiver: WebhookReceiver, destination: WebhookDestination) -> None:
    at = datetime(2026, 11, 21, 2, 0, tzinfo=UTC)
    capture = OutgoingEvent(new_id(), subjects.ORDER_READY_FOR_PAYMENT_CAPTURE, new_id(), at, {"captureId": new_id()})
    brands = OutgoingEvent(new_id(), subjects.REFERENCE_LISTS["brands"], None, at, None)
    events = [*some_events(30), capture, brands]
    await destination.deliver(events)
    await destination.deliver(some_events(3))  # a later call reuses the kept-alive connection too

    arrived = receiver.deliveries
    assert receiver.rejections == []
    assert [d.webhook_id for d in arrived[:len(events)]] == [e.event_id for e in events]
    assert [d.subject for d in arrived[:len(events)]] == [e.subject for e in events]
    assert [d.body for d in arrived[:len(events)]] == [orjson.loads(e.body()) for e in events]
    assert arrived[len(events) - 2].body == {"entityId": capture.entity_id, "eventId": capture.event_id,
                                             "datetime": "2026-11-21T02:00:00Z", "metadata": capture.metadata}
    assert arrived[len(events) - 1].body == {"entityId": None, "eventId": brands.event_id,
                                             "datetime": "2026-11-21T02:00:00Z"}
    assert {d.content_type for d in arrived} == {"application/json"}
    assert len({d.connection for d in arrived}) == 1
    assert receiver.attempts == len(arrived) == len(events) + 3


async def test_a_standard_whsec_secret_signs_with_the_key_it_encodes() -> None:
    key = secrets.token_bytes(24)
    standard = "whsec_" + base64.b64encode(key).decode()
    with WebhookReceiver(standard) as receiver:  # the consumer passes the string to its library as it is
        sender = webhook(receiver.url, standard)
        try:
            await sender.deliver(some_events(2))
        finally:
            await sender.close()
        assert len(receiver.deliveries) == 2 and receiver.rejections == []


@pytest.mark.parametrize("secret, key", [
    ("whsec_" + base64.b64encode(b"sixteen byte key").decode(), b"sixteen byte key"),
    ("whsec_" + base64.b64encode(b"sixteen byte key!").decode().rstrip("="), b"sixteen byte key!"),
    ("whsec_ is not base64 at all", b"whsec_ is not base64 at all"),
    ("plain secret, any text ☃", "plain secret, any text ☃".encode()),
])
def test_signing_key(secret: str, key: bytes) -> None:
    assert signing_key(secret) == key


STANDARD_SECRETS = st.binary(min_size=1).map(lambda key: "whsec_" + base64.b64encode(key).decode())


@given(secret=st.one_of(st.text(min_size=1), STANDARD_SECRETS), message_id=st.text(),
       timestamp=st.integers(min_value=0, max_value=2**37), body=st.text())  # to the year 6325
def test_the_signature_is_the_one_standardwebhooks_makes(secret: str, message_id: str, timestamp: int,
                                                         body: str) -> None:
    """The destination signs with its key set up once (cheaper than the library's call per event); whatever the
    secret, id, time and body, the header is the one `standardwebhooks.Webhook.sign` gives for the same key."""
    expected = Webhook(signing_key(secret)).sign(message_id, datetime.fromtimestamp(timestamp, UTC), body)
    sender = webhook("http://127.0.0.1:9/hooks", secret)
    assert sender.signature(message_id, str(timestamp), body.encode()) == expected


async def test_a_receiver_holding_another_secret_refuses_it_as_credentials(receiver: WebhookReceiver) -> None:
    sender = webhook(receiver.url, SECRET + "!")  # one character off: the signature must not verify
    try:
        failure = await refusal(sender, some_events(2))
    finally:
        await sender.close()
    assert (failure.credentials, failure.transient) == (True, False)
    assert receiver.deliveries == [] and receiver.rejections == ["No matching signature found"]


@pytest.mark.parametrize("status, credentials, transient", [
    (401, True, False), (403, True, False),
    (500, False, True), (502, False, True), (503, False, True), (408, False, True), (429, False, True),
    (400, False, False), (404, False, False), (410, False, False), (413, False, False), (308, False, False),
])
async def test_failing_answers_are_classified_and_stop_the_sequence(
        receiver: WebhookReceiver, destination: WebhookDestination,
        status: int, credentials: bool, transient: bool) -> None:
    receiver.fail_with(status)
    event = some_events(3)
    failure = await refusal(destination, event)
    assert (failure.credentials, failure.transient, failure.answer, failure.delivered) == (
        credentials, transient, str(status), 0)
    assert str(status) in str(failure) and event[0].event_id in str(failure)
    assert receiver.attempts == 1  # the events after the refused one were not sent out of order


async def test_a_failure_says_how_many_events_were_accepted_before_it(
        receiver: WebhookReceiver, destination: WebhookDestination) -> None:
    events = some_events(4)
    receiver.refuse({events[2].event_id}, 410)
    failure = await refusal(destination, events)
    assert (failure.delivered, failure.answer, failure.transient) == (2, "410", False)
    assert [d.webhook_id for d in receiver.deliveries] == [e.event_id for e in events[:2]]


async def test_a_retry_after_a_transient_failure_delivers_the_same_event_ids(
        receiver: WebhookReceiver, destination: WebhookDestination) -> None:
    events = some_events(3)
    receiver.fail_with(503)
    assert (await refusal(destination, events)).transient
    receiver.behave()
    await destination.deliver(events)
    assert [d.webhook_id for d in receiver.deliveries] == [e.event_id for e in events]


async def test_a_receiver_slower_than_the_timeout_is_transient(
        receiver: WebhookReceiver, destination: WebhookDestination) -> None:
    receiver.slow_down(TIMEOUT * 10)
    failure = await refusal(destination, some_events(2))
    assert failure.transient and not failure.credentials
    assert "in time" in str(failure) and failure.answer == "timeout"


async def test_nobody_listening_is_transient() -> None:
    sender = webhook(f"http://127.0.0.1:{free_port()}/hooks")
    try:
        failure = await refusal(sender, some_events(1))
    finally:
        await sender.close()
    assert failure.transient and not failure.credentials and failure.answer == "unreachable"


async def test_a_kept_connection_the_server_drops_unanswered_is_replaced_and_the_post_goes_once_more() -> None:
    """A server that answers the first request of each connection and drops the connection at the second, unanswered
    (as one does whose idle timeout passes as the request arrives): each event still gets through, in order, the
    dropped ones sent again on a fresh connection."""
    answered: list[str] = []

    async def answer_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for turn in range(2):
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            body = await reader.readexactly(length)
            if turn == 1:
                break
            answered.append(orjson.loads(body)["eventId"])
            writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")  # keep-alive, as HTTP/1.1 is by default
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer_once, "127.0.0.1", 0)
    sender = webhook(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hooks")
    try:
        events = some_events(4)
        await sender.deliver(events)
    finally:
        await sender.close()
        server.close()
        await server.wait_closed()
    assert answered == [event.event_id for event in events]
