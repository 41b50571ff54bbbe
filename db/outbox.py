"""Writing change events into the outbox, in the caller's transaction, one row per eCom store that should hear.

Each `*_events` function takes the connection of the transaction that made the change, works out the audience
with one query, and inserts the rows; if the transaction rolls back, so do its events. Audiences follow
SPEC.md's event list: SKUs go to the eCom stores whose assortment (base or local) holds them, retail stores to
the eCom stores of the same company (the click and collect network), schema events to every eCom store. The
back-office loader works out its own audiences (what each store saw before and sees after) and writes them with
`pair_events`.
"""

from collections.abc import Iterable, Mapping
from datetime import datetime

import orjson
import sqlalchemy as sa

from contracts import events as subjects
from db.bulk import insert_rows
from db.engine import is_duckdb
from db.ids import new_id, numbered_ids, utc_now
from db.schema import (
    assortment_lines,
    ecom_stores,
    event_outbox,
    retail_stores,
    skus,
)

# PostgreSQL's channel the relays LISTEN on (events/relay.py).
OUTBOX_CHANNEL = "pia_outbox"


def _assortment_holds(sku_id: sa.ColumnElement) -> sa.ColumnElement[bool]:
    """True for an eCom store (from `ecom_stores`) whose base or local assortment has a line for the SKU."""
    return sa.exists().where(
        assortment_lines.c.tenant_id == ecom_stores.c.tenant_id,
        assortment_lines.c.sku_id == sku_id,
        assortment_lines.c.assortment_id.in_([ecom_stores.c.base_assortment_id, ecom_stores.c.local_assortment_id]))


def _insert(conn: sa.Connection, tenant_id: str, subject: str, pairs: Iterable[tuple[str, str | None]],
            metadata: Mapping[str, str] | None = None, at: datetime | None = None) -> int:
    """One row per (ecom_store_id, entity_id) pair; returns how many were written."""
    at = at or utc_now()
    encoded = orjson.dumps(dict(metadata)).decode() if metadata else None
    rows = [{"event_id": new_id(), "tenant_id": tenant_id, "ecom_store_id": store_id, "subject": subject,
             "entity_id": entity_id, "datetime": at, "metadata": encoded} for store_id, entity_id in pairs]
    insert_rows(conn, event_outbox, rows)
    if rows:
        _notify(conn)
    return len(rows)


def _notify(conn: sa.Connection) -> None:
    """Wake the relays (PostgreSQL): delivered at commit, to nobody if the transaction rolls back; repeats within
    it are folded into one."""
    if not is_duckdb(conn.engine):
        conn.execute(sa.text(f"NOTIFY {OUTBOX_CHANNEL}"))


def _pairs(conn: sa.Connection, query: sa.Select) -> list[tuple[str, str]]:
    return [(row[0], row[1]) for row in conn.execute(query)]


def sku_events(conn: sa.Connection, tenant_id: str, sku_ids: Iterable[str],
               subject: str = subjects.INVENTORY_UPDATED) -> int:
    """InventoryUpdated (by default) for each SKU, to the eCom stores whose assortment holds it."""
    wanted = sorted(set(sku_ids))
    if not wanted:
        return 0
    query = (sa.select(ecom_stores.c.id, skus.c.id)
             .select_from(ecom_stores.join(skus, skus.c.tenant_id == ecom_stores.c.tenant_id))
             .where(ecom_stores.c.tenant_id == tenant_id, skus.c.id.in_(wanted), _assortment_holds(skus.c.id))
             .order_by(ecom_stores.c.id, skus.c.id))
    return _insert(conn, tenant_id, subject, _pairs(conn, query))


def retail_store_events(conn: sa.Connection, tenant_id: str, retail_store_ids: Iterable[str]) -> int:
    """RetailStoreUpdated for each retail store, to the eCom stores of its company (click and collect)."""
    wanted = sorted(set(retail_store_ids))
    if not wanted:
        return 0
    query = (sa.select(ecom_stores.c.id, retail_stores.c.id)
             .select_from(ecom_stores.join(retail_stores, sa.and_(
                 retail_stores.c.tenant_id == ecom_stores.c.tenant_id,
                 retail_stores.c.company_id == ecom_stores.c.company_id)))
             .where(ecom_stores.c.tenant_id == tenant_id, retail_stores.c.id.in_(wanted))
             .order_by(ecom_stores.c.id, retail_stores.c.id))
    return _insert(conn, tenant_id, subjects.RETAIL_STORE_UPDATED, _pairs(conn, query))


def schema_events(conn: sa.Connection, tenant_id: str, list_names: Iterable[str]) -> int:
    """The schema event of each changed reference list, to every eCom store of the tenant (entityId null)."""
    store_ids = list(conn.scalars(sa.select(ecom_stores.c.id).where(ecom_stores.c.tenant_id == tenant_id)
                                  .order_by(ecom_stores.c.id)))
    return sum(_insert(conn, tenant_id, subjects.REFERENCE_LISTS[name], [(store_id, None) for store_id in store_ids])
               for name in sorted(set(list_names)))


def assortment_events(conn: sa.Connection, tenant_id: str, ecom_store_id: str, subject: str,
                      entity: sa.Select) -> int:
    """One event per entity id that `entity` (one column) selects, to one eCom store (the trigger_events routes)."""
    # A whole assortment at once (100,000 SKUs): one INSERT … SELECT, the ids numbered in SQL, so no row travels
    # to Python and back (fetching, building and sending the rows cost more than writing them).
    entities = entity.order_by(None).subquery("entities")  # events in any order: no sort, a hash join may do
    rows = sa.select(numbered_ids(sa.func.row_number().over()), sa.literal(tenant_id), sa.literal(ecom_store_id),
                     sa.literal(subject), entities.c[0], sa.literal(utc_now(), sa.DateTime(timezone=True)))
    columns = ["event_id", "tenant_id", "ecom_store_id", "subject", "entity_id", "datetime"]
    # SQLAlchemy keeps an INSERT's rowcount only when asked to.
    insert = event_outbox.insert().from_select(columns, rows).execution_options(preserve_rowcount=True)
    count = conn.execute(insert).rowcount
    if count:
        _notify(conn)
    return count


def pair_events(conn: sa.Connection, tenant_id: str, subject: str, pairs: Iterable[tuple[str, str]]) -> int:
    """One event per (eCom store id, entity id) pair, for callers that worked out the audience themselves (the
    back-office loader, which compares what each store saw before and after a load)."""
    return _insert(conn, tenant_id, subject, sorted(set(pairs)))


def order_event(conn: sa.Connection, tenant_id: str, ecom_store_id: str, subject: str, order_id: str,
                metadata: Mapping[str, str] | None = None) -> int:
    """One order event (OrderCreated, OrderFulfilled, ...) to the eCom store that owns the order."""
    return _insert(conn, tenant_id, subject, [(ecom_store_id, order_id)], metadata)
