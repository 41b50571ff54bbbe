"""What a destination (an eCom store's Azure Service Bus entity or webhook) is given and how it fails.

The bridge hands a destination the events of one eCom store in order; `deliver` returns once the destination
accepted every one of them, or raises `DeliveryFailed` saying whether trying again later may help. SPEC.md's
message: the event kind is the message's subject, the body is `{entityId, eventId, datetime, metadata}`.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import orjson

from contracts.rendering import instant


@dataclass(frozen=True)
class OutgoingEvent:
    event_id: str
    subject: str
    entity_id: str | None
    datetime: datetime
    metadata: dict[str, Any] | None

    @classmethod
    def of_outbox_row(cls, row: Any) -> "OutgoingEvent":
        """The event of an `event_outbox` row (its metadata is JSON text or null)."""
        return cls(row.event_id, row.subject, row.entity_id, row.datetime,
                   orjson.loads(row.metadata) if row.metadata else None)

    def body(self) -> bytes:
        """The event message of SPEC.md's Events section, as JSON."""
        message: dict[str, Any] = {"entityId": self.entity_id, "eventId": self.event_id,
                                   "datetime": instant(self.datetime)}
        if self.metadata:
            message["metadata"] = self.metadata
        return orjson.dumps(message)


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
