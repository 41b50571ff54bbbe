"""An eCom store's webhook: one HTTP POST per event, in order, signed the Standard Webhooks way.

Each POST carries SPEC.md's event message as its body, unchanged, and the headers `webhook-id` (the eventId, so
consumers deduplicate on it), `webhook-timestamp` (when this attempt was signed, Unix seconds), `webhook-signature`
(Standard Webhooks' `v1` HMAC-SHA256, as the `standardwebhooks` package signs), `content-type: application/json`
and `webhook-subject` (the event kind). Standard Webhooks suggests the kind go in the body as `type`; SPEC.md fixes
the body, so the kind travels beside it, as it does in Service Bus's `subject` property. The signature covers the
id, the timestamp and the body, not that header; over HTTPS nothing alters it in flight, and every kind's consumer
action reads the entity anyway.

Signing key: a secret of the Standard Webhooks form `whsec_<base64>` is the key it encodes, as consumers'
Standard Webhooks libraries read it; any other secret is the key as its UTF-8 bytes (the libraries' "raw" key).

Any 2xx is delivery. 401 and 403 mean the receiver refuses our credentials (what a receiver answers when the
signature does not verify); 408, 429, 5xx, timeouts and connection failures may pass; any other answer, a
redirect included, is a refusal of the event itself (permanent: the bridge dead-letters it after that one POST).
Failures name the receiver's host, never its full URL (a query string may hold a token) nor the secret.
"""

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Sequence

import aiohttp
from yarl import URL

from contracts.event_message import OutgoingEvent
from db.destinations import DestinationSettings
from events.delivery import DeliveryFailed

_STANDARD_PREFIX = "whsec_"
_CREDENTIALS_REFUSED = {401, 403}
_TRY_AGAIN = {408, 429}


def signing_key(secret: str) -> bytes:
    """The HMAC key of a webhook secret: `whsec_<base64>` is the key it encodes, any other text its UTF-8 bytes."""
    if secret.startswith(_STANDARD_PREFIX):
        encoded = secret.removeprefix(_STANDARD_PREFIX)
        try:  # padding is optional in the standard form, as the libraries read it
            key = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except binascii.Error:
            key = b""
        if key:
            return key
    return secret.encode()


class WebhookDestination:
    """Posts an eCom store's events to its webhook over kept-alive connections. One `deliver` call posts its
    events one at a time, in order; the bridge may make several calls at once (its lanes), each on a connection of
    the pool."""

    def __init__(self, settings: DestinationSettings, *, timeout: float = 10.0) -> None:
        self._url = URL(settings.endpoint)
        self._host = self._url.host
        # The key's HMAC set up once and copied for each signature: `standardwebhooks.Webhook.sign` sets it up on
        # every call, and took twice the CPU (4.2 against 1.9 µs an event, in the bridge's bound).
        self._keyed = hmac.new(signing_key(settings.secret), digestmod=hashlib.sha256)
        # The timeout bounds each POST whole (waiting for a pooled connection, connecting, sending, the answer), so
        # a receiver that stops answering fails the delivery instead of holding the eCom store's lane.
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None  # made on first use, inside the event loop

    async def deliver(self, events: Sequence[OutgoingEvent]) -> None:
        for delivered, event in enumerate(events):
            try:
                await self._post(event)
            except DeliveryFailed as failure:
                failure.delivered = delivered  # the events before it were accepted: this one is at fault
                raise

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            # aiohttp rather than httpx: a POST costs a fraction of the CPU (the bridge's bound; README "Benchmarks").
            # No cookies, no proxy from the environment: every POST is the same, whatever came before.
            self._session = aiohttp.ClientSession(
                timeout=self._timeout, cookie_jar=aiohttp.DummyCookieJar(),
                headers={"user-agent": "pia-events"}, skip_auto_headers=("accept", "accept-encoding"))
        return self._session

    async def _post(self, event: OutgoingEvent) -> None:
        body = event.body()
        signed_at = str(int(time.time()))
        headers = {"content-type": "application/json", "webhook-id": event.event_id,
                   "webhook-timestamp": signed_at, "webhook-subject": event.subject,
                   "webhook-signature": self.signature(event.event_id, signed_at, body)}
        try:
            try:
                status, reason = await self._send(body, headers)
            except aiohttp.ServerDisconnectedError:
                # A kept-alive connection the receiver closed as the request went out (its idle timeout ran out):
                # once more, on another connection. A duplicate at worst, which consumers drop by webhook-id.
                status, reason = await self._send(body, headers)
        except TimeoutError as error:  # aiohttp's own timeouts are TimeoutErrors too
            raise DeliveryFailed(f"webhook at {self._host} did not answer in time", transient=True,
                                 answer="timeout") from error
        except aiohttp.ClientError as error:
            raise DeliveryFailed(f"webhook at {self._host} unreachable: {error!r}", transient=True,
                                 answer="unreachable") from error
        if 200 <= status < 300:
            return
        message = f"webhook at {self._host} answered {status} {reason} to event {event.event_id}"
        if status in _CREDENTIALS_REFUSED:
            raise DeliveryFailed(message, transient=False, credentials=True, answer=str(status))
        raise DeliveryFailed(message, transient=status in _TRY_AGAIN or status >= 500, answer=str(status))

    def signature(self, message_id: str, timestamp: str, body: bytes) -> str:
        """Standard Webhooks' signature of a message: `v1,` and the base64 HMAC-SHA256 of `id.timestamp.body`."""
        keyed = self._keyed.copy()
        keyed.update(f"{message_id}.{timestamp}.".encode() + body)
        return "v1," + base64.b64encode(keyed.digest()).decode()

    async def _send(self, body: bytes, headers: dict[str, str]) -> tuple[int, str | None]:
        async with self._client().post(self._url, data=body, headers=headers, allow_redirects=False) as response:
            await response.read()  # the rest of the answer, so that the connection goes back to the pool
            return response.status, response.reason

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
