"""An eCom store's Azure Service Bus queue or topic as a destination, through the `azure-servicebus` SDK.

Each event becomes one message: `subject` the event kind, `message_id` the eventId (so the customer can turn on
duplicate detection), `content_type` application/json, the body the JSON event message. Events go out in order, in
as few batches as the entity's size limit allows. The SDK never retries and every step has a deadline: the bridge
owns retries and backoff, and a bus that stops answering must not hold up its other eCom stores.

A queue and a topic are addressed alike: the SDK's queue and topic senders differ only in the keyword naming the
entity, and Service Bus resolves the entity path itself, so one sender serves both and the settings need not say
which it is.
"""

import asyncio
import base64
import hashlib
import hmac
from collections.abc import Awaitable, Sequence
from urllib.parse import quote_plus

from azure.core.credentials import AzureNamedKeyCredential
from azure.servicebus import ServiceBusMessage, ServiceBusMessageBatch
from azure.servicebus.aio import ServiceBusClient, ServiceBusSender
from azure.servicebus.exceptions import (
    MessageSizeExceededError,
    MessagingEntityDisabledError,
    MessagingEntityNotFoundError,
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
    ServiceBusError,
)

from contracts.event_message import OutgoingEvent
from db.destinations import DestinationSettings
from events.delivery import DeliveryFailed

SEND_TIMEOUT_SECONDS = 10.0  # one delivery, connecting and signing in included


def sas_signature(resource_uri: str, key: str, expiry: int) -> str:
    """Base64 HMAC-SHA256, keyed with the shared access key's text as UTF-8, of the URL-encoded resource URI, a
    newline and the expiry in seconds since the epoch: Microsoft's documented string-to-sign."""
    string_to_sign = f"{quote_plus(resource_uri)}\n{expiry}"
    digest = hmac.new(key.encode(), string_to_sign.encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def sas_token(resource_uri: str, key_name: str, key: str, expiry: int) -> str:
    """A shared access signature token for `resource_uri` and everything under it, valid until `expiry`."""
    return (f"SharedAccessSignature sr={quote_plus(resource_uri)}"
            f"&sig={quote_plus(sas_signature(resource_uri, key, expiry))}&se={expiry}&skn={quote_plus(key_name)}")


def _message(event: OutgoingEvent) -> ServiceBusMessage:
    return ServiceBusMessage(event.body(), subject=event.subject, message_id=event.event_id,
                             content_type="application/json")


# The bus refuses the event for good, whatever the next try: dead-lettered at once, counted by these answers.
_PERMANENT = {MessagingEntityNotFoundError: "entity not found", MessagingEntityDisabledError: "entity disabled",
              MessageSizeExceededError: "message too large"}


def _failure(error: BaseException) -> DeliveryFailed:
    """How the SDK's error bears on trying again; Service Bus's descriptions name entities, never keys."""
    # A refused put-token surfaces as an authentication error whatever the reason; the SDK keeps Service Bus's
    # status code on the inner error only. 404 is Service Bus answering for a missing entity at sign-in.
    refusal = getattr(error, "inner_exception", None)
    status = getattr(refusal, "status_code", None)
    if isinstance(error, ServiceBusAuthenticationError) and isinstance(status, int):
        description = f"Service Bus refused the sign-in: {status} {_text(refusal.status_description)}"
        if status == 404:
            return DeliveryFailed(description, transient=False, answer="entity not found")
        if status in (401, 403):
            return DeliveryFailed(description, transient=False, credentials=True, answer=f"sign-in {status}")
        return DeliveryFailed(description, transient=True, answer=f"sign-in {status}")
    description = f"Service Bus: {type(error).__name__}: {error}"
    if isinstance(error, ServiceBusAuthenticationError | ServiceBusAuthorizationError):
        return DeliveryFailed(description, transient=False, credentials=True, answer="credentials refused")
    for kind, answer in _PERMANENT.items():
        if isinstance(error, kind):
            return DeliveryFailed(description, transient=False, answer=answer)
    # Connection losses, timeouts, a busy or full entity, and whatever else the bus answered: try again later.
    return DeliveryFailed(description, transient=True,
                          answer="timeout" if isinstance(error, TimeoutError) else type(error).__name__)


def _text(value: str | bytes | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value or ""


class ServiceBusDestination:
    """Sends to one queue or topic; the sender link stays open between deliveries and is dropped after a failure,
    so the next delivery starts on a fresh connection."""

    def __init__(self, client: ServiceBusClient, entity_path: str,
                 timeout_seconds: float = SEND_TIMEOUT_SECONDS) -> None:
        self._client, self._entity_path, self._timeout = client, entity_path, timeout_seconds
        self._sender: ServiceBusSender | None = None

    @classmethod
    def from_settings(cls, settings: DestinationSettings, *, emulator_port: int | None = None,
                      timeout_seconds: float = SEND_TIMEOUT_SECONDS) -> "ServiceBusDestination":
        """The namespace host over TLS (port 5671); with `emulator_port`, plain AMQP to that port of the same host,
        as the SDK does for a connection string with UseDevelopmentEmulator=true (the local emulator, test peers)."""
        if not (settings.entity_path and settings.shared_access_key_name):
            raise ValueError("a Service Bus destination needs an entity path and a shared access key name")
        options = {"retry_total": 0, "try_timeout": timeout_seconds}
        if emulator_port is None:
            credential = AzureNamedKeyCredential(settings.shared_access_key_name, settings.secret)
            client = ServiceBusClient(settings.endpoint, credential, **options)
        else:
            client = ServiceBusClient.from_connection_string(
                f"Endpoint=sb://{settings.endpoint}:{emulator_port};"
                f"SharedAccessKeyName={settings.shared_access_key_name};SharedAccessKey={settings.secret};"
                "UseDevelopmentEmulator=true", **options)
        return cls(client, settings.entity_path, timeout_seconds)

    async def deliver(self, events: Sequence[OutgoingEvent]) -> None:
        if not events:
            return
        try:
            async with asyncio.timeout(self._timeout):  # the SDK's own bounds leave gaps (closing, CBS replies)
                await self._send_in_batches(events)
        except (ServiceBusError, TimeoutError, OSError) as error:
            await self._drop_sender()
            raise _failure(error) from None

    async def _send_in_batches(self, events: Sequence[OutgoingEvent]) -> None:
        if self._sender is None:
            self._sender = self._client.get_queue_sender(self._entity_path)
        for batch in await self._batches(self._sender, events):
            await self._sender.send_messages(batch, timeout=self._timeout)

    @staticmethod
    async def _batches(sender: ServiceBusSender, events: Sequence[OutgoingEvent]) -> list[ServiceBusMessageBatch]:
        """The events in order, in as few batches as the entity's size limit allows (the first call opens the
        link to learn it). An event too large on its own fails here, before anything is sent."""
        batches = [await sender.create_message_batch()]
        for event in events:
            message = _message(event)
            try:
                batches[-1].add_message(message)
            except MessageSizeExceededError:
                if len(batches[-1]) == 0:
                    raise
                batches.append(await sender.create_message_batch())
                batches[-1].add_message(message)
        return batches

    async def _drop_sender(self) -> None:
        sender, self._sender = self._sender, None
        if sender is not None:
            await self._quietly(sender.close())

    async def _quietly(self, closing: Awaitable[None]) -> None:
        """Closing a broken or unanswering connection may fail or hang; it is being thrown away all the same."""
        try:
            async with asyncio.timeout(self._timeout):
                await closing
        except (ServiceBusError, TimeoutError, OSError):
            pass

    async def close(self) -> None:
        await self._drop_sender()
        await self._quietly(self._client.close())
