"""The change event message of SPEC.md's Events section, as the outbox holds it and every destination sends it.

The event kind travels as the message's subject, the body is `{entityId, eventId, datetime, metadata}`.
"""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from contracts.rendering import instant


@dataclass(frozen=True)
class OutgoingEvent:
    event_id: str
    subject: str
    entity_id: str | None
    datetime: datetime
    metadata: dict[str, Any] | None
    # The message as received (a Kafka record's value, which the relay rendered with `body`): sent on unchanged,
    # not rendered again (about 3 µs an event, in the bridge's bound).
    received: bytes | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of_outbox_row(cls, row: Any) -> "OutgoingEvent":
        """The event of an `event_outbox` row (its metadata is JSON text or null)."""
        return cls(row.event_id, row.subject, row.entity_id, row.datetime,
                   orjson.loads(row.metadata) if row.metadata else None)

    def body(self) -> bytes:
        """The event message of SPEC.md's Events section, as JSON."""
        if self.received is not None:
            return self.received
        message: dict[str, Any] = {"entityId": self.entity_id, "eventId": self.event_id,
                                   "datetime": instant(self.datetime)}
        if self.metadata:
            message["metadata"] = self.metadata
        return orjson.dumps(message)
