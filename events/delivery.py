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
    retried only slowly, as nothing changes until they are fixed. Neither: the destination refuses the event for
    good (a 4xx other than auth, an entity that does not exist); it goes to the dead letters at once.
    `answer`: the failure in short, the same for every event failing alike ("410", "timeout"): operators count
    dead letters by it. `delivered`: how many of the events, from the first, were accepted before the failure
    (the next one is at fault); None when unknown. Messages never include secrets.
    """

    def __init__(self, message: str, *, transient: bool, answer: str, credentials: bool = False,
                 delivered: int | None = None) -> None:
        super().__init__(message)
        self.transient, self.credentials, self.answer, self.delivered = transient, credentials, answer, delivered


class Destination(Protocol):
    async def deliver(self, events: Sequence[OutgoingEvent]) -> None:
        """Hand over every event, in order; return only once all were accepted, else raise DeliveryFailed."""

    async def close(self) -> None:
        """Release connections."""
