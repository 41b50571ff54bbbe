"""What the bridge reads and writes: the outbox rows it delivers, their outcome, and each eCom store's state.

An eCom store's rows are delivered in event_id order (UUIDv7: commit order within a store). A delivered row keeps
its delivered_time; a failed attempt counts on the row (attempts, last_error) and on the store's
event_delivery_state (consecutive failures, whether its credentials were refused, how many of its entities wait
out a backoff), which operators read. Writes
to rows already delivered or dead-lettered change nothing, so a duplicate delivery (Kafka after a rebalance)
never moves a first delivery's time. Each write takes its turn with the process's other writers (DuckDB) and is
tried again after losing to a concurrent one: an operator removing the destination discards the same rows.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY  # DuckDB's dialect is PostgreSQL's, and takes lists alike

from contracts.event_message import OutgoingEvent
from db.destinations import DestinationSettings
from db.engine import is_duckdb
from db.ids import utc_now
from db.schema import ecom_store_event_destinations as destinations
from db.schema import event_delivery_state as states
from db.schema import event_outbox as outbox
from db.secrets import SecretBox
from db.tenancy import across_tenants
from db.write_turns import transaction_with_retries

NO_DESTINATION = "NO_DESTINATION"  # last_error of events discarded because their eCom store has no destination


@dataclass(frozen=True)
class StoreKey:
    tenant_id: str
    ecom_store_id: str


def _open(store: StoreKey) -> sa.ColumnElement[bool]:
    """The store's rows still to deliver."""
    return sa.and_(outbox.c.tenant_id == store.tenant_id, outbox.c.ecom_store_id == store.ecom_store_id,
                   outbox.c.delivered_time.is_(None), outbox.c.dead_letter_time.is_(None))


def stores_with_undelivered(engine: sa.Engine) -> list[StoreKey]:
    """Every eCom store, across tenants, with outbox rows neither delivered nor dead-lettered."""
    with engine.connect() as conn:
        return [StoreKey(*row) for row in conn.execute(across_tenants(
            sa.select(outbox.c.tenant_id, outbox.c.ecom_store_id).distinct()
            .where(outbox.c.delivered_time.is_(None), outbox.c.dead_letter_time.is_(None)),
            "the bridge's poll serves every tenant's eCom stores"))]


def undelivered(engine: sa.Engine, store: StoreKey, limit: int, after: str | None = None) -> list[OutgoingEvent]:
    """The store's next rows to deliver, oldest first (those after the event id `after`, when given): a page."""
    query = (sa.select(outbox.c.event_id, outbox.c.subject, outbox.c.entity_id, outbox.c.datetime, outbox.c.metadata)
             .where(_open(store)).order_by(outbox.c.event_id).limit(limit))
    if after is not None:
        query = query.where(outbox.c.event_id > after)
    with engine.connect() as conn:
        rows = conn.execute(query)
        return [OutgoingEvent.of_outbox_row(row) for row in rows]


def _claim_key(store: StoreKey) -> sa.ColumnElement[int]:
    return sa.func.hashtextextended(f"pia:bridge:{store.tenant_id}:{store.ecom_store_id}", 0)


def claim_store(conn: sa.Connection, store: StoreKey) -> bool:
    """Take the store for as long as `conn`'s session lasts or until released, so that no other bridge process
    delivers its rows at the same time (PostgreSQL: a session advisory lock, not waited for; `conn` in autocommit).
    DuckDB's file has one process."""
    if is_duckdb(conn.engine):
        return True
    return bool(conn.scalar(sa.select(sa.func.pg_try_advisory_lock(_claim_key(store)))))


def release_store(conn: sa.Connection, store: StoreKey) -> None:
    """Let other bridge processes deliver the store again."""
    if not is_duckdb(conn.engine):
        conn.scalar(sa.select(sa.func.pg_advisory_unlock(_claim_key(store))))


def with_ids(event_ids: Sequence[str]) -> sa.ColumnElement[bool]:
    """The outbox rows of these event ids, as one array parameter (`= ANY`): a batch of thousands costs one bound
    value, not one each, to build, send and plan."""
    return outbox.c.event_id == sa.any_(sa.literal(list(event_ids), ARRAY(sa.String)))


def _unsettled(store: StoreKey, event_ids: Sequence[str]) -> sa.ColumnElement[bool]:
    """These rows of the store, unless already delivered or dead-lettered. Found by primary key: written as `_open`
    is, the condition would let PostgreSQL pick the partial index of undelivered rows, which before the table's
    first ANALYZE it takes for tiny and scans whole (a store's entire backlog for every batch marked)."""
    return sa.and_(outbox.c.tenant_id == store.tenant_id, outbox.c.ecom_store_id == store.ecom_store_id,
                   with_ids(event_ids),
                   sa.func.coalesce(outbox.c.delivered_time, outbox.c.dead_letter_time).is_(None))


def still_open(engine: sa.Engine, store: StoreKey, event_ids: Sequence[str]) -> set[str]:
    """Which of these events of the store are still to deliver (not delivered, discarded nor dead-lettered)."""
    with engine.connect() as conn:
        return set(conn.scalars(sa.select(outbox.c.event_id).where(_unsettled(store, event_ids))))


def _set_state(conn: sa.Connection, store: StoreKey, values: dict[str, Any]) -> None:
    """Update the store's delivery state (values may refer to its columns), creating it on first use."""
    update = (states.update().where(states.c.tenant_id == store.tenant_id,
                                    states.c.ecom_store_id == store.ecom_store_id)
              .values({**values, "modified_time": utc_now()}))
    if conn.execute(update).rowcount == 0:
        conn.execute(states.insert().values(tenant_id=store.tenant_id, ecom_store_id=store.ecom_store_id,
                                            modified_time=utc_now()))
        conn.execute(update)


def mark_delivered(engine: sa.Engine, store: StoreKey, event_ids: Sequence[str], *, lanes_in_backoff: int = 0) -> None:
    """The destination accepted these events (in this order): the last is the store's last delivered, and its
    failures are behind it, but for the `lanes_in_backoff` entities still waiting to try again."""
    now = utc_now()

    def write(conn: sa.Connection) -> None:
        conn.execute(outbox.update().where(_unsettled(store, event_ids)).values(delivered_time=now))
        _set_state(conn, store, {"last_delivered_event_id": event_ids[-1], "last_delivered_time": now,
                                 "consecutive_failures": 0, "last_error": None, "credentials_refused": False,
                                 "lanes_in_backoff": lanes_in_backoff})

    transaction_with_retries(engine, write)


def discard(engine: sa.Engine, store: StoreKey, event_ids: Sequence[str]) -> None:
    """The store has no destination: its events are dropped (delivered_time set, last_error NO_DESTINATION)."""
    transaction_with_retries(engine, lambda conn: _discard(conn, store, _unsettled(store, event_ids)))


def discard_backlog(conn: sa.Connection, store: StoreKey) -> None:
    """Drop every event of the store still to deliver, in the caller's transaction (its destination is removed, or
    set anew after none): a destination then gets only the events written after it was set."""
    _discard(conn, store, _open(store))


def _discard(conn: sa.Connection, store: StoreKey, rows: sa.ColumnElement[bool]) -> None:
    if conn.execute(outbox.update().where(rows).values(delivered_time=utc_now(), last_error=NO_DESTINATION)).rowcount:
        _set_state(conn, store, {"last_error": NO_DESTINATION})


def record_failure(engine: sa.Engine, store: StoreKey, event_id: str, error: str, *, answer: str, counted: bool,
                   credentials_refused: bool, lanes_in_backoff: int = 0) -> int:
    """A failed attempt to deliver `event_id`; returns the event's attempts so far. `error` says what happened,
    `answer` is its short form that dead letters are counted by ("410", "timeout"). `counted`: the attempt counts
    towards the dead letter (a refusal of the credentials does not: the event is not at fault)."""
    now = utc_now()
    values: dict[str, Any] = {"last_error": error, "last_answer": answer}
    if counted:
        values["attempts"] = outbox.c.attempts + 1

    def write(conn: sa.Connection) -> int:
        conn.execute(outbox.update().where(_unsettled(store, [event_id])).values(values))
        _set_state(conn, store, {"consecutive_failures": states.c.consecutive_failures + 1, "last_error": error,
                                 "last_failure_time": now, "credentials_refused": credentials_refused,
                                 "lanes_in_backoff": lanes_in_backoff})
        return conn.scalar(sa.select(outbox.c.attempts).where(outbox.c.tenant_id == store.tenant_id,
                                                              outbox.c.ecom_store_id == store.ecom_store_id,
                                                              outbox.c.event_id == event_id)) or 0

    return transaction_with_retries(engine, write)


def dead_letter(engine: sa.Engine, store: StoreKey, event_id: str) -> None:
    """Give up on the event: it joins the dead letters (attempts and last_error stay as the failures left them)."""
    transaction_with_retries(engine, lambda conn: conn.execute(
        outbox.update().where(_unsettled(store, [event_id])).values(dead_letter_time=utc_now())))


def destination_settings(engine: sa.Engine, box: SecretBox,
                         store: StoreKey) -> tuple[DestinationSettings, datetime] | None:
    """The store's destination with its secret opened, and when it was last set; None when it has none."""
    with engine.connect() as conn:
        row = conn.execute(sa.select(destinations).where(destinations.c.tenant_id == store.tenant_id,
                                                         destinations.c.ecom_store_id == store.ecom_store_id)).first()
    if row is None:
        return None
    settings = DestinationSettings(kind=row.kind, endpoint=row.endpoint, entity_path=row.entity_path,
                                   shared_access_key_name=row.shared_access_key_name,
                                   secret=box.open(row.sealed_secret))
    return settings, row.modified_time
