"""What operators see of event delivery, and the one thing they do to it: replay dead letters.

Read from the outbox (event_outbox) and the bridge's own record per eCom store (event_delivery_state). The backlog
is what is still to deliver: rows with neither delivered_time nor dead_letter_time. Replaying a dead letter puts it
back into that backlog as if it had never been tried: in Kafka mode the relay sends it again (published_time is
cleared), in embedded mode the bridge reads it from the outbox.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa

from db.event_delivery import NO_DESTINATION
from db.schema import ecom_stores, event_delivery_state, event_outbox
from db.tenancy import across_tenants
from db.write_turns import transaction_with_retries


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
# When the change behind the store's oldest event still to deliver was made: first in event_id order, as the
# partial index of undelivered rows (PostgreSQL) holds them, so the one row is read, not the backlog.
_OLDEST_UNDELIVERED = (sa.select(event_outbox.c.datetime)
                       .where(event_outbox.c.tenant_id == ecom_stores.c.tenant_id,
                              event_outbox.c.ecom_store_id == ecom_stores.c.id,
                              event_outbox.c.delivered_time.is_(None), event_outbox.c.dead_letter_time.is_(None))
                       .order_by(event_outbox.c.event_id).limit(1).scalar_subquery())
# Dead letters from before answers were recorded (migration 0015) are counted under this answer.
UNRECORDED_ANSWER = "unrecorded"


@dataclass(frozen=True)
class StoreCounts:
    tenant_id: str
    ecom_store_id: str
    backlog: int
    dead_letters: int
    oldest_undelivered: datetime | None


@dataclass(frozen=True)
class DeliveryState:
    ecom_store_id: str
    backlog: int
    dead_letters: int
    oldest_undelivered: datetime | None
    last_delivered_event_id: str | None
    last_delivered_time: datetime | None
    consecutive_failures: int
    last_error: str | None
    last_failure_time: datetime | None
    credentials_refused: bool
    lanes_in_backoff: int  # as of the bridge's last write
    dead_letters_by_answer: dict[str, int]


@dataclass(frozen=True)
class DeadLetter:
    event_id: str
    subject: str
    entity_id: str | None
    datetime: datetime
    attempts: int
    last_error: str | None
    dead_letter_time: datetime


@dataclass(frozen=True)
class FailingEvent:
    """An event still to deliver whose last attempt failed."""

    event_id: str
    subject: str
    entity_id: str | None
    attempts: int
    last_error: str


@dataclass(frozen=True)
class HourOfDelivery:
    hour: datetime  # its start, UTC
    delivered: int
    dead_lettered: int


def _counts() -> sa.Select:
    """Backlog, dead letters and the oldest undelivered event per eCom store, every store listed (refine with a
    where clause)."""
    return (sa.select(ecom_stores.c.tenant_id, ecom_stores.c.id, _BACKLOG, _DEAD_LETTERS, _OLDEST_UNDELIVERED)
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
            event_delivery_state.c.lanes_in_backoff,
        ).where(event_delivery_state.c.tenant_id == tenant_id,
                event_delivery_state.c.ecom_store_id == ecom_store_id)).first()
        answer = sa.func.coalesce(event_outbox.c.last_answer, UNRECORDED_ANSWER)
        by_answer = dict(conn.execute(
            sa.select(answer, sa.func.count())
            .where(event_outbox.c.tenant_id == tenant_id, event_outbox.c.ecom_store_id == ecom_store_id,
                   event_outbox.c.dead_letter_time.is_not(None))
            .group_by(answer).order_by(answer)).all())
    record = state or (None, None, 0, None, None, False, 0)
    return DeliveryState(ecom_store_id, counts[2], counts[3], counts[4], *record, by_answer)


def dead_letters(engine: sa.Engine, tenant_id: str, ecom_store_id: str, *, after: str | None, limit: int,
                 answer: str | None) -> tuple[list[DeadLetter], str | None] | None:
    """A page of the store's dead letters, newest event first (event ids are UUIDv7: in the order written), after
    the event id `after`, those whose last error contains `answer` when given; with the event id to continue after
    when more follow. None: no such eCom store."""
    query = (sa.select(event_outbox.c.event_id, event_outbox.c.subject, event_outbox.c.entity_id,
                       event_outbox.c.datetime, event_outbox.c.attempts, event_outbox.c.last_error,
                       event_outbox.c.dead_letter_time)
             .where(event_outbox.c.tenant_id == tenant_id, event_outbox.c.ecom_store_id == ecom_store_id,
                    event_outbox.c.dead_letter_time.is_not(None))
             .order_by(event_outbox.c.event_id.desc()).limit(limit + 1))  # one more says whether more follow
    if after is not None:
        query = query.where(event_outbox.c.event_id < after)
    if answer is not None:
        query = query.where(event_outbox.c.last_error.contains(answer, autoescape=True))
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

    def replay(conn: sa.Connection) -> int | None:
        if not _store_exists(conn, tenant_id, ecom_store_id):
            return None
        replayed = conn.execute(event_outbox.update().where(*condition).values(
            dead_letter_time=None, attempts=0, last_error=None, last_answer=None, published_time=None))
        return replayed.rowcount

    # The bridge writes the store's rows meanwhile (on DuckDB a concurrent update of a row is a conflict).
    return transaction_with_retries(engine, replay)


def failing_events(engine: sa.Engine, tenant_id: str, ecom_store_id: str, limit: int) -> list[FailingEvent]:
    """The store's events still to deliver that failed at least once, newest first: the answers of the last
    failures (a refusal of the credentials counts no attempt, but leaves its answer)."""
    with engine.connect() as conn:
        return [FailingEvent(*row) for row in conn.execute(
            sa.select(event_outbox.c.event_id, event_outbox.c.subject, event_outbox.c.entity_id,
                      event_outbox.c.attempts, event_outbox.c.last_error)
            .where(event_outbox.c.tenant_id == tenant_id, event_outbox.c.ecom_store_id == ecom_store_id,
                   event_outbox.c.delivered_time.is_(None), event_outbox.c.dead_letter_time.is_(None),
                   event_outbox.c.last_error.is_not(None))
            .order_by(event_outbox.c.event_id.desc()).limit(limit))]


def _hour_of(column: sa.ColumnElement[datetime]) -> sa.ColumnElement[int]:
    """Hours since the epoch: the same bucket on both backends, whatever the session's time zone."""
    return sa.cast(sa.func.floor(sa.extract("epoch", column) / 3600), sa.BigInteger)


def deliveries_per_hour(engine: sa.Engine, tenant_id: str, ecom_store_id: str, since: datetime,
                        now: datetime) -> list[HourOfDelivery]:
    """Per hour from `since` to `now` (every hour listed): the store's events its destination accepted (not those
    discarded for want of one) and those that went to the dead letters. Delivered rows are kept
    PIA_DELIVERED_EVENT_RETENTION_DAYS, so older hours thin out."""
    store = sa.and_(event_outbox.c.tenant_id == tenant_id, event_outbox.c.ecom_store_id == ecom_store_id)
    delivered_hour, dead_hour = _hour_of(event_outbox.c.delivered_time), _hour_of(event_outbox.c.dead_letter_time)
    with engine.connect() as conn:
        delivered = dict(conn.execute(
            sa.select(delivered_hour, sa.func.count()).where(
                store, event_outbox.c.delivered_time >= since,
                sa.func.coalesce(event_outbox.c.last_error, "") != NO_DESTINATION)
            .group_by(delivered_hour)).all())
        dead = dict(conn.execute(
            sa.select(dead_hour, sa.func.count()).where(store, event_outbox.c.dead_letter_time >= since)
            .group_by(dead_hour)).all())
    first, last = int(since.timestamp() // 3600), int(now.timestamp() // 3600)
    return [HourOfDelivery(datetime.fromtimestamp(hour * 3600, UTC), delivered.get(hour, 0), dead.get(hour, 0))
            for hour in range(first, last + 1)]
