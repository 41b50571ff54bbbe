"""Where an eCom store's change events go: an Azure Service Bus queue or topic, or a webhook.

The bridge reads it before each delivery (events/bridge.py). The secret (the shared access key, or the webhook's
signing secret) is sealed with the secret box before it reaches the database, and nothing here returns it.

Events are delivered only to a destination that was set when they were written: removing the destination, and
setting one where none was, discard the store's events still to deliver (NO_DESTINATION) in the same transaction.
Setting a destination anew where one is (a new key, a new address) keeps them: they go to the new settings.
"""

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from db.ids import utc_now
from db.schema import ecom_store_event_destinations as destinations
from db.schema import ecom_stores
from db.secrets import SecretBox
from db.write_turns import transaction_with_retries


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
    row = conn.execute(sa.select(*_COLUMNS).where(_of_store(tenant_id, ecom_store_id))).first()
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

    def attempt(conn: sa.Connection) -> EventDestination | None:
        if conn.scalar(sa.select(ecom_stores.c.id).where(ecom_stores.c.tenant_id == tenant_id,
                                                         ecom_stores.c.id == ecom_store_id)) is None:
            return None
        updated = conn.execute(destinations.update().where(_of_store(tenant_id, ecom_store_id)).values(values))
        if updated.rowcount == 0:
            _discard_backlog(conn, tenant_id, ecom_store_id)  # written while the store had no destination
            conn.execute(destinations.insert().values(tenant_id=tenant_id, ecom_store_id=ecom_store_id,
                                                      **values))
        return _read(conn, tenant_id, ecom_store_id)

    # Discarding may meet the bridge marking the same rows (a conflict on DuckDB), or a concurrent first PUT.
    return transaction_with_retries(engine, attempt)


def remove_destination(engine: sa.Engine, tenant_id: str, ecom_store_id: str) -> bool:
    """Remove the eCom store's destination and discard its events still to deliver; False when it has none."""

    def attempt(conn: sa.Connection) -> bool:
        if not conn.execute(destinations.delete().where(_of_store(tenant_id, ecom_store_id))).rowcount:
            return False
        _discard_backlog(conn, tenant_id, ecom_store_id)
        return True

    return transaction_with_retries(engine, attempt)


def _of_store(tenant_id: str, ecom_store_id: str) -> sa.ColumnElement[bool]:
    return sa.and_(destinations.c.tenant_id == tenant_id, destinations.c.ecom_store_id == ecom_store_id)


def _discard_backlog(conn: sa.Connection, tenant_id: str, ecom_store_id: str) -> None:
    # Imported here: db.event_delivery reads destinations (DestinationSettings) and so imports this module.
    from db.event_delivery import StoreKey, discard_backlog

    discard_backlog(conn, StoreKey(tenant_id, ecom_store_id))
