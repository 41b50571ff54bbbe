"""The change event message of SPEC.md's Events section, as the outbox holds it and every destination sends it.

The event kind travels as the message's subject, the body is `{entityId, eventId, datetime, metadata}`.
"""

from dataclasses import dataclass
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
