"""What operators see of event delivery, and the one thing they do to it: replay dead letters.

Read from the outbox (event_outbox) and the bridge's own record per eCom store (event_delivery_state). The backlog
is what is still to deliver: rows with neither delivered_time nor dead_letter_time. Replaying a dead letter puts it
back into that backlog as if it had never been tried: in Kafka mode the relay sends it again (published_time is
cleared), in embedded mode the bridge reads it from the outbox.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from db.schema import ecom_stores, event_delivery_state, event_outbox
from db.tenancy import across_tenants


def _count_of_store_rows(condition: sa.ColumnElement[bool]) -> sa.ScalarSelect[int]:
    """How many of the (correlated) eCom store's outbox rows meet the condition."""
    return (sa.select(sa.func.count()).select_from(event_outbox)
            .where(event_outbox.c.tenant_id == ecom_stores.c.tenant_id,
                   event_outbox.c.ecom_store_id == ecom_stores.c.id, condition)
            .scalar_subquery())


# Each written as one of the outbox's partial indexes is (PostgreSQL), so each count reads only its own rows.
_BACKLOG = _count_of_store_rows(sa.and_(event_outbox.c.delivered_time.is_(None),
                                        event_outbox.c.dead_letter_time.is_(None)))
_DEAD_LETTERS = _count_of_store_rows(event_outbox.c.dead_letter_time.is_not(None))


@dataclass(frozen=True)
class StoreCounts:
    tenant_id: str
    ecom_store_id: str
    backlog: int
    dead_letters: int


@dataclass(frozen=True)
class DeliveryState:
    ecom_store_id: str
    backlog: int
    dead_letters: int
    last_delivered_event_id: str | None
    last_delivered_time: datetime | None
    consecutive_failures: int
    last_error: str | None
    last_failure_time: datetime | None
    credentials_refused: bool


@dataclass(frozen=True)
class DeadLetter:
    event_id: str
    subject: str
    entity_id: str | None
    datetime: datetime
    attempts: int
    last_error: str | None
    dead_letter_time: datetime


def _counts() -> sa.Select:
    """Backlog and dead letters per eCom store, every store listed (refine with a where clause)."""
    return (sa.select(ecom_stores.c.tenant_id, ecom_stores.c.id, _BACKLOG, _DEAD_LETTERS)
            .order_by(ecom_stores.c.tenant_id, ecom_stores.c.id))


def delivery_counts(engine: sa.Engine) -> list[StoreCounts]:
    """Every tenant's eCom stores in one grouped query: the metrics scrape, an operator's view across tenants
    (no request on behalf of a tenant reaches this)."""
    with engine.connect() as conn:
        return [StoreCounts(*row) for row in conn.execute(across_tenants(_counts(), "the metrics scrape"))]


def _store_exists(conn: sa.Connection, tenant_id: str, ecom_store_id: str) -> bool:
    return conn.scalar(sa.select(ecom_stores.c.id).where(ecom_stores.c.tenant_id == tenant_id,
                                                         ecom_stores.c.id == ecom_store_id)) is not None


def delivery_state(engine: sa.Engine, tenant_id: str, ecom_store_id: str) -> DeliveryState | None:
    """None when the tenant has no such eCom store; a store the bridge has not served yet has an empty record."""
    with engine.connect() as conn:
        counts = conn.execute(_counts().where(ecom_stores.c.tenant_id == tenant_id,
                                              ecom_stores.c.id == ecom_store_id)).first()
        if counts is None:
            return None
        state = conn.execute(sa.select(
            event_delivery_state.c.last_delivered_event_id, event_delivery_state.c.last_delivered_time,
            event_delivery_state.c.consecutive_failures, event_delivery_state.c.last_error,
            event_delivery_state.c.last_failure_time, event_delivery_state.c.credentials_refused,
        ).where(event_delivery_state.c.tenant_id == tenant_id,
                event_delivery_state.c.ecom_store_id == ecom_store_id)).first()
    record = state or (None, None, 0, None, None, False)
    return DeliveryState(ecom_store_id, counts[2], counts[3], *record)


def dead_letters(engine: sa.Engine, tenant_id: str, ecom_store_id: str, *, after: str | None,
                 limit: int) -> tuple[list[DeadLetter], str | None] | None:
    """A page of the store's dead letters, newest event first (event ids are UUIDv7: in the order written), after
    the event id `after`; with the event id to continue after when more follow. None: no such eCom store."""
    query = (sa.select(event_outbox.c.event_id, event_outbox.c.subject, event_outbox.c.entity_id,
                       event_outbox.c.datetime, event_outbox.c.attempts, event_outbox.c.last_error,
                       event_outbox.c.dead_letter_time)
             .where(event_outbox.c.tenant_id == tenant_id, event_outbox.c.ecom_store_id == ecom_store_id,
                    event_outbox.c.dead_letter_time.is_not(None))
             .order_by(event_outbox.c.event_id.desc()).limit(limit + 1))  # one more says whether more follow
    if after is not None:
        query = query.where(event_outbox.c.event_id < after)
    with engine.connect() as conn:
        if not _store_exists(conn, tenant_id, ecom_store_id):
            return None
        rows = [DeadLetter(*row) for row in conn.execute(query)]
    page = rows[:limit]
    return page, page[-1].event_id if len(rows) > limit else None


def replay_dead_letters(engine: sa.Engine, tenant_id: str, ecom_store_id: str,
                        event_ids: Sequence[str] | None) -> int | None:
    """Put the named dead letters (all of the store's when `event_ids` is None) back for delivery, in one
    transaction; rows that are not dead letters of this store are left alone. Returns how many were replayed, or
    None when the tenant has no such eCom store."""
    condition = [event_outbox.c.tenant_id == tenant_id, event_outbox.c.ecom_store_id == ecom_store_id,
                 event_outbox.c.dead_letter_time.is_not(None)]
    if event_ids is not None:
        condition.append(event_outbox.c.event_id.in_(sorted(set(event_ids))))
    with engine.begin() as conn:
        if not _store_exists(conn, tenant_id, ecom_store_id):
            return None
        replayed = conn.execute(event_outbox.update().where(*condition).values(
            dead_letter_time=None, attempts=0, last_error=None, published_time=None))
        return replayed.rowcount
