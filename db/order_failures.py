"""The record of orders that failed to open (order_processing_failures): attempts, the last error, the next attempt.

An order whose opening fails is tried again after a backoff (rules/retry.py); once it has failed max_attempts times
it is parked: it stays RECEIVED, no processor tries it again, and operators find it in the admin API's list until
they retry it (db/order_processing.py `retry_order`). Its row goes when the order opens. The poll of waiting orders
passes over parked orders and those whose next attempt is still to come, so failing orders never hold up the others.
"""

import logging
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from db.orders import RECEIVED
from db.schema import order_processing_failures as failures
from db.schema import orders
from db.tenancy import across_tenants
from db.write_turns import transaction_with_retries
from rules.retry import RetryPolicy

log = logging.getLogger(__name__)
MAX_ERROR_LENGTH = 1000
PARKED, RETRYING = "FAILED", "RETRYING"  # the admin list's `processing` values


@dataclass(frozen=True)
class ProcessingState:
    """An order as far as processing goes; attempts 0 and no error when it never failed (or opened since)."""

    order_id: str
    number: str
    ecom_store_id: str
    external_order_id: str
    order_date: datetime
    status: str
    attempts: int
    last_error: str | None
    last_attempt_time: datetime | None
    retry_at: datetime | None

    @property
    def parked(self) -> bool:
        return self.attempts > 0 and self.retry_at is None


def failure_text(error: BaseException) -> str:
    """What went wrong, for an operator: the driver's error name and the first line of its message (no SQL, no
    parameters), control characters replaced so that any database can hold it."""
    cause = getattr(error, "orig", None) or error
    first_line = str(cause).strip().partition("\n")[0]
    text = f"{type(cause).__name__}: {first_line}" if first_line else type(cause).__name__
    return "".join("\ufffd" if unicodedata.category(character) == "Cc" else character
                   for character in text[:MAX_ERROR_LENGTH])


def waiting_for_retry(now: datetime) -> sa.Exists:
    """Whether the (correlated) order is parked or its next attempt is still to come."""
    return sa.exists().where(failures.c.tenant_id == orders.c.tenant_id, failures.c.order_id == orders.c.id,
                             sa.or_(failures.c.retry_at.is_(None), failures.c.retry_at > now))


def next_retry_time(engine: sa.Engine, now: datetime) -> datetime | None:
    """The earliest next attempt still to come, of any tenant's order (of an order opened since, it only wakes a
    processor's poll early): when an idle processor polls again (db.polls)."""
    with engine.connect() as conn:
        return conn.scalar(across_tenants(sa.select(sa.func.min(failures.c.retry_at)).where(failures.c.retry_at > now),
                                          "a processor's poll serves every tenant"))


def record_failures(engine: sa.Engine, tenant_id: str, errors: Mapping[str, str], retry: RetryPolicy,
                    now: datetime) -> None:
    """Count a failed attempt at `now` for each order (id → error text): its next attempt after the backoff, or
    parked at max_attempts. One transaction, three statements for any number of orders."""
    if not errors:
        return
    order_ids = sorted(errors)

    def attempt(conn: sa.Connection) -> None:
        earlier = dict(conn.execute(sa.select(failures.c.order_id, failures.c.attempts).where(
            failures.c.tenant_id == tenant_id, failures.c.order_id.in_(order_ids))).all())
        rows = []
        for order_id in order_ids:
            attempts = earlier.get(order_id, 0) + 1
            parked = attempts >= retry.max_attempts
            rows.append({"tenant_id": tenant_id, "order_id": order_id, "attempts": attempts,
                         "last_error": errors[order_id], "last_attempt_time": now,
                         "retry_at": None if parked else now + retry.delay(attempts)})
            if parked:
                log.error("order %s of tenant %s failed to open %d times (last: %s); parked until an operator "
                          "retries it", order_id, tenant_id, attempts, errors[order_id])
        if earlier:
            conn.execute(failures.delete().where(failures.c.tenant_id == tenant_id,
                                                 failures.c.order_id.in_(sorted(earlier))))
        conn.execute(failures.insert().values(rows))

    transaction_with_retries(engine, attempt)


def forget_failures(conn: sa.Connection, tenant_id: str, order_ids: list[str]) -> None:
    """The orders opened (or are tried afresh): their attempts no longer count."""
    conn.execute(failures.delete().where(failures.c.tenant_id == tenant_id, failures.c.order_id.in_(order_ids)))


def _states() -> sa.Select:
    return (sa.select(orders.c.id, orders.c.number, orders.c.ecom_store_id, orders.c.external_order_id,
                      orders.c.order_date, orders.c.status, sa.func.coalesce(failures.c.attempts, 0),
                      failures.c.last_error, failures.c.last_attempt_time, failures.c.retry_at)
            .outerjoin(failures, sa.and_(failures.c.tenant_id == orders.c.tenant_id,
                                         failures.c.order_id == orders.c.id)))


def processing_state(engine: sa.Engine, tenant_id: str, order_id: str) -> ProcessingState:
    with engine.connect() as conn:
        return ProcessingState(*conn.execute(_states().where(orders.c.tenant_id == tenant_id,
                                                             orders.c.id == order_id)).one())


def failed_orders(engine: sa.Engine, tenant_id: str, processing: str, *, after: str | None,
                  limit: int) -> tuple[list[ProcessingState], str | None]:
    """A page of the tenant's RECEIVED orders that failed to open, by order id (UUIDv7: the order they came in):
    parked ones (FAILED) or those still being tried (RETRYING); with the order id to continue after when more
    follow."""
    parked = failures.c.retry_at.is_(None)
    query = (_states().where(orders.c.tenant_id == tenant_id, orders.c.status == RECEIVED,
                             failures.c.tenant_id == tenant_id, parked if processing == PARKED else ~parked)
             .order_by(orders.c.id).limit(limit + 1))  # one more says whether more follow
    if after is not None:
        query = query.where(orders.c.id > after)
    with engine.connect() as conn:
        rows = [ProcessingState(*row) for row in conn.execute(query)]
    page = rows[:limit]
    return page, page[-1].order_id if len(rows) > limit else None


def failure_counts(engine: sa.Engine, tenant_id: str) -> dict[str, int]:
    """How many of the tenant's RECEIVED orders are parked (FAILED) and how many are still tried again (RETRYING):
    the two lists of failed_orders, counted."""
    processing = sa.case((failures.c.retry_at.is_(None), PARKED), else_=RETRYING)
    query = (sa.select(processing, sa.func.count())
             .join(orders, sa.and_(orders.c.tenant_id == tenant_id, orders.c.id == failures.c.order_id))
             .where(failures.c.tenant_id == tenant_id, orders.c.status == RECEIVED).group_by(processing))
    with engine.connect() as conn:
        return {PARKED: 0, RETRYING: 0, **dict(conn.execute(query).all())}
