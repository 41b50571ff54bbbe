"""Where an eCom store's change events go: an Azure Service Bus queue or topic, or a webhook.

Stored now, used by the events relay later. The secret (the shared access key, or the webhook's signing secret)
is sealed with the secret box before it reaches the database, and nothing here returns it.
"""

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from db.ids import utc_now
from db.schema import ecom_store_event_destinations as destinations
from db.schema import ecom_stores
from db.secrets import SecretBox


@dataclass(frozen=True)
class DestinationSettings:
    """What the back office sets; `endpoint` is the Service Bus host name or the webhook URL."""

    kind: str  # SERVICE_BUS or WEBHOOK
    endpoint: str
    entity_path: str | None
    shared_access_key_name: str | None
    secret: str

    def __repr__(self) -> str:  # the secret stays out of logs and tracebacks
        return f"DestinationSettings(kind={self.kind!r}, endpoint={self.endpoint!r}, secret=***)"


@dataclass(frozen=True)
class EventDestination:
    """A stored destination, without its secret."""

    ecom_store_id: str
    kind: str
    endpoint: str
    entity_path: str | None
    shared_access_key_name: str | None
    modified_time: datetime


_COLUMNS = (destinations.c.ecom_store_id, destinations.c.kind, destinations.c.endpoint, destinations.c.entity_path,
            destinations.c.shared_access_key_name, destinations.c.modified_time)


def _read(conn: sa.Connection, tenant_id: str, ecom_store_id: str) -> EventDestination | None:
    row = conn.execute(sa.select(*_COLUMNS).where(destinations.c.tenant_id == tenant_id,
                                                  destinations.c.ecom_store_id == ecom_store_id)).first()
    return EventDestination(*row) if row else None


def get_destination(engine: sa.Engine, tenant_id: str, ecom_store_id: str) -> EventDestination | None:
    with engine.connect() as conn:
        return _read(conn, tenant_id, ecom_store_id)


def set_destination(engine: sa.Engine, box: SecretBox, tenant_id: str, ecom_store_id: str,
                    settings: DestinationSettings) -> EventDestination | None:
    """Replace the eCom store's destination; None when the tenant has no such eCom store."""
    values = {"kind": settings.kind, "endpoint": settings.endpoint, "entity_path": settings.entity_path,
              "shared_access_key_name": settings.shared_access_key_name,
              "sealed_secret": box.seal(settings.secret), "modified_time": utc_now()}
    with engine.begin() as conn:
        if conn.scalar(sa.select(ecom_stores.c.id).where(ecom_stores.c.tenant_id == tenant_id,
                                                         ecom_stores.c.id == ecom_store_id)) is None:
            return None
        updated = conn.execute(destinations.update().where(
            destinations.c.tenant_id == tenant_id, destinations.c.ecom_store_id == ecom_store_id).values(values))
        if updated.rowcount == 0:
            conn.execute(destinations.insert().values(tenant_id=tenant_id, ecom_store_id=ecom_store_id, **values))
        return _read(conn, tenant_id, ecom_store_id)
