"""What a destination (an eCom store's Azure Service Bus entity or webhook) is given and how it fails.

The bridge hands a destination the events of one eCom store in order; `deliver` returns once the destination
accepted every one of them, or raises `DeliveryFailed` saying whether trying again later may help. SPEC.md's
message: the event kind is the message's subject, the body is `{entityId, eventId, datetime, metadata}`.
"""

from collections.abc import Sequence
from typing import Protocol

from contracts.event_message import OutgoingEvent


class DeliveryFailed(Exception):
    """The destination did not accept the events.

    `transient`: worth trying again with backoff (a 5xx, a timeout, an unreachable bus).
    `credentials`: the destination refused the credentials (a wrong key or secret); reported to the operator and
    retried only slowly, as nothing changes until they are fixed. Neither: the destination refuses these events
    for good (a 4xx other than auth, an entity that does not exist); they go to the dead letters after the
    bounded attempts. Messages never include secrets.
    """

    def __init__(self, message: str, *, transient: bool, credentials: bool = False) -> None:
        super().__init__(message)
        self.transient, self.credentials = transient, credentials


class Destination(Protocol):
    async def deliver(self, events: Sequence[OutgoingEvent]) -> None:
        """Hand over every event, in order; return only once all were accepted, else raise DeliveryFailed."""

    async def close(self) -> None:
        """Release connections."""
