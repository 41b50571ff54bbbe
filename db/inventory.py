"""Stock of a SKU as one eCom store sees it: its serving warehouses, then the released retail stores of its click
and collect network (the stores of its company) that hold the SKU."""

from dataclasses import dataclass

import sqlalchemy as sa

from db.catalogue import in_assortment, store_settings
from db.schema import ecom_store_warehouses, retail_stores, skus, stock_levels, warehouses

WAREHOUSE, RETAIL_STORE = "WAREHOUSE", "RETAIL_STORE"


@dataclass(frozen=True)
class SkuInventory:
    sku_id: str
    sku_number: str
    # location_id, location_number, location_name, location_type, on_hand, reserved, modified_time; warehouses
    # by priority, then retail stores by number.
    locations: list[sa.Row]


def _stock(tenant_id: str, sku_id: str, location_id: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    return sa.and_(stock_levels.c.tenant_id == tenant_id, stock_levels.c.sku_id == sku_id,
                   stock_levels.c.location_id == location_id)


def _locations(tenant_id: str, ecom_store_id: str, company_id: str, sku_id: str) -> sa.Select:
    serving = ecom_store_warehouses
    # A serving warehouse is listed even without a stock row (nothing there); a retail store only with one.
    from_warehouses = (
        sa.select(warehouses.c.id.label("location_id"), warehouses.c.number.label("location_number"),
                  warehouses.c.name.label("location_name"), sa.literal(WAREHOUSE).label("location_type"),
                  sa.func.coalesce(stock_levels.c.on_hand, 0).label("on_hand"),
                  sa.func.coalesce(stock_levels.c.reserved, 0).label("reserved"), stock_levels.c.modified_time,
                  # Warehouses first, by priority; then retail stores, by number.
                  sa.literal(0).label("kind_order"), serving.c.priority.label("rank"),
                  warehouses.c.number.label("tie"))
        .join(serving, sa.and_(serving.c.tenant_id == tenant_id, serving.c.warehouse_id == warehouses.c.id))
        .outerjoin(stock_levels, _stock(tenant_id, sku_id, warehouses.c.id))
        .where(warehouses.c.tenant_id == tenant_id, serving.c.ecom_store_id == ecom_store_id))
    from_stores = (
        sa.select(retail_stores.c.id, retail_stores.c.number, retail_stores.c.name, sa.literal(RETAIL_STORE),
                  stock_levels.c.on_hand, stock_levels.c.reserved, stock_levels.c.modified_time,
                  sa.literal(1), sa.literal(0), retail_stores.c.number)
        .join(stock_levels, _stock(tenant_id, sku_id, retail_stores.c.id))
        .where(retail_stores.c.tenant_id == tenant_id, retail_stores.c.company_id == company_id,
               retail_stores.c.released))
    both = sa.union_all(from_warehouses, from_stores).subquery("locations")
    return sa.select(both).order_by(both.c.kind_order, both.c.rank, both.c.tie)


def sku_inventory(engine: sa.Engine, tenant_id: str, ecom_store_id: str, sku_id_or_number: str) -> SkuInventory | None:
    """None when no SKU of the store's assortment has this id or number (an id match wins)."""
    with engine.connect() as conn:
        store = store_settings(conn, tenant_id, ecom_store_id)
        if store is None:
            return None
        # The store's settings go in as constants, as for a product read (see db.catalogue).
        candidates = (sa.select(skus.c.id, skus.c.number)
                      .where(skus.c.tenant_id == tenant_id, skus.c.product_id.is_not(None),
                             sa.or_(skus.c.id == sku_id_or_number, skus.c.number == sku_id_or_number),
                             in_assortment(tenant_id, store.assortment_ids, skus.c.id))
                      .order_by((skus.c.id == sku_id_or_number).desc()).limit(1))
        sku = conn.execute(candidates).first()
        if sku is None:
            return None
        locations = _locations(tenant_id, ecom_store_id, store.company_id, sku.id)
        return SkuInventory(sku.id, sku.number, list(conn.execute(locations)))
