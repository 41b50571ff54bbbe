"""The change events of one load, written into the outbox in the load's transaction.

Rules (one row per eCom store that should hear; unchanged rows write nothing):
- ProductUpdated to a store for a product when the product, one of its SKUs (name, GTIN, references, published),
  images, attribute values or one of its SKUs' prices changed and the store sees the product after the load;
  when the set of the product's SKUs the store sees changed (assortment lines, the store's assortments, SKUs
  joining or leaving the product), including to a store that no longer sees it (its GET answers 404, which tells
  it to drop the product); and for every product a store sees when its prices came from another list (the
  store's price list, its company's base price list or currency changed; a new store hears of everything it
  sees). A new VAT rate changes the record of every product with a SKU at that rate.
  Prices are announced to every store that sees the product, whichever list it sells from.
- InventoryUpdated for every SKU whose stock row (on hand or reserved) changed, to the stores whose assortment
  holds it; and for the SKUs stocked at a location that joined or left a store's inventory (a serving warehouse
  added or removed; a retail store of its company released or withdrawn), to that store when it sees them.
- CampaignUpdated to a store when the campaign or its SKUs changed and the store sees one of its SKUs before or
  after the load, or when the store's view of the campaign's SKUs changed with its assortment.
- RetailStoreUpdated for a retail store created or changed in name, number, status, visit address or company, to
  the eCom stores of its company; and for every released store of the company to an eCom store that is new or
  newly moved to that company (click and collect connected).
- The schema event of every reference list with an entry added, modified or removed, to every eCom store.
"""

from collections import defaultdict
from dataclasses import dataclass

import sqlalchemy as sa

from contracts import events as subjects
from db.backoffice.applying import Applier
from db.backoffice.document import ANNOUNCED_RETAIL_STORE_COLUMNS, OPTIONS_LIST, REFERENCE_LISTS
from db.outbox import pair_events, schema_events
from db.schema import (
    assortment_lines,
    campaign_skus,
    companies,
    ecom_stores,
    retail_stores,
    skus,
    stock_levels,
)

_LIST_NAMES = {**REFERENCE_LISTS, "dynamicAttributeOptions": OPTIONS_LIST}

Pair = tuple[str, str]


@dataclass(frozen=True)
class View:
    """What the eCom stores of a tenant see, taken before and after a load."""

    visible: set[tuple[str, str, str]]  # (eCom store, product, SKU) for every SKU of a product in its assortment
    # store → (company, price list, company's base list, company's currency)
    pricing: dict[str, tuple[str, str | None, str | None, str | None]]
    campaign_skus: dict[str, set[str]]  # campaign → SKUs


def take_view(conn: sa.Connection, tenant_id: str) -> View:
    lines = (sa.select(ecom_stores.c.id, skus.c.product_id, skus.c.id)
             .join(assortment_lines, sa.and_(
                 assortment_lines.c.tenant_id == tenant_id,
                 assortment_lines.c.assortment_id.in_([ecom_stores.c.base_assortment_id,
                                                       ecom_stores.c.local_assortment_id])))
             .join(skus, sa.and_(skus.c.tenant_id == tenant_id, skus.c.id == assortment_lines.c.sku_id))
             .where(ecom_stores.c.tenant_id == tenant_id, skus.c.product_id.is_not(None)))
    pricing = (sa.select(ecom_stores.c.id, ecom_stores.c.company_id, ecom_stores.c.price_list_id,
                         companies.c.base_price_list_id, companies.c.currency_iso_code)
               .outerjoin(companies, sa.and_(companies.c.tenant_id == tenant_id,
                                             companies.c.id == ecom_stores.c.company_id))
               .where(ecom_stores.c.tenant_id == tenant_id))
    campaigns: dict[str, set[str]] = defaultdict(set)
    for campaign_id, sku_id in conn.execute(sa.select(campaign_skus.c.campaign_id, campaign_skus.c.sku_id)
                                            .where(campaign_skus.c.tenant_id == tenant_id)).all():
        campaigns[campaign_id].add(sku_id)
    return View(visible={tuple(row) for row in conn.execute(lines).all()},
                pricing={row[0]: tuple(row[1:]) for row in conn.execute(pricing)},
                campaign_skus=dict(campaigns))


def announce(applier: Applier, before: View) -> None:
    conn, tenant_id = applier.conn, applier.tenant_id
    after = take_view(conn, tenant_id)
    pair_events(conn, tenant_id, subjects.PRODUCT_UPDATED, _product_pairs(applier, before, after))
    pair_events(conn, tenant_id, subjects.INVENTORY_UPDATED, _inventory_pairs(applier, after))
    pair_events(conn, tenant_id, subjects.CAMPAIGN_UPDATED, _campaign_pairs(applier, before, after))
    pair_events(conn, tenant_id, subjects.RETAIL_STORE_UPDATED, _retail_store_pairs(applier, before, after))
    schema_events(conn, tenant_id, {list_name for entity, list_name in _LIST_NAMES.items()
                                    if entity in applier.changes and applier.changes[entity].any})


def _inventory_pairs(applier: Applier, after: View) -> set[Pair]:
    # The view already knows which stores see each SKU: no need for sku_events' query of the same.
    stocked = {row["sku_id"] for row in applier.changed_rows("stock")}
    pairs = {(store, sku) for store, _, sku in after.visible if sku in stocked}
    moved = _moved_locations(applier, after)
    if moved:
        held = applier.conn.execute(sa.select(stock_levels.c.location_id, stock_levels.c.sku_id).where(
            stock_levels.c.tenant_id == applier.tenant_id,
            stock_levels.c.location_id.in_(sorted(set().union(*moved.values()))))).all()
        seen = {(store, sku) for store, _, sku in after.visible}
        pairs |= {(store, sku) for store, locations in moved.items() for location, sku in held
                  if location in locations and (store, sku) in seen}
    return pairs


def _moved_locations(applier: Applier, after: View) -> dict[str, set[str]]:
    """eCom store → the locations that joined or left its inventory in this load."""
    moved: dict[str, set[str]] = defaultdict(set)
    serving = applier.changes.get("ecomStoreWarehouses")
    if serving:
        for row in [*serving.created, *serving.deleted]:
            moved[row["ecom_store_id"]].add(row["warehouse_id"])
    stores = applier.changes.get("retailStores")
    released = [(held["id"], held["company_id"]) for held, new in stores.updated
                if held["released"] != new.get("released", held["released"])] if stores else []
    for ecom_store, (company, *_) in after.pricing.items():
        moved[ecom_store] |= {store for store, store_company in released if store_company == company}
    return {store: locations for store, locations in moved.items() if locations}


def _product_pairs(applier: Applier, before: View, after: View) -> set[Pair]:
    changed = applier.changed_products()
    repriced = {store for store, pricing in after.pricing.items() if before.pricing.get(store) != pricing}
    seen_after = {(store, product) for store, product, _ in after.visible}
    return ({(store, product) for store, product, _ in before.visible ^ after.visible}
            | {(store, product) for store, product in seen_after if product in changed or store in repriced})


def _campaign_pairs(applier: Applier, before: View, after: View) -> set[Pair]:
    changed = {row["id"] for row in applier.changed_rows("campaigns")}
    changed |= {row["campaign_id"] for row in applier.changed_rows("campaignSkus")}

    def views(view: View) -> dict[Pair, frozenset[str]]:
        by_store: dict[str, set[str]] = defaultdict(set)
        for store, _, sku in view.visible:
            by_store[store].add(sku)
        return {(store, campaign): frozenset(seen & campaign_skus)
                for store, seen in by_store.items() for campaign, campaign_skus in view.campaign_skus.items()
                if seen & campaign_skus}

    old, new = views(before), views(after)
    return {pair for pair in old.keys() | new.keys()
            if pair[1] in changed or old.get(pair) != new.get(pair)}


def _retail_store_pairs(applier: Applier, before: View, after: View) -> set[Pair]:
    changes = applier.changes.get("retailStores")
    changed = {row["id"] for row in changes.created} if changes else set()
    if changes:
        changed |= {held["id"] for held, new in changes.updated
                    if any(held[name] != new.get(name, held[name]) for name in ANNOUNCED_RETAIL_STORE_COLUMNS)}
    company_of = {store: pricing[0] for store, pricing in after.pricing.items()}
    # eCom stores whose click and collect network is new to them: every released store of the company.
    connected = {store for store, company in company_of.items()
                 if store not in before.pricing or before.pricing[store][0] != company}
    if not changed and not connected:
        return set()
    stores = applier.conn.execute(sa.select(retail_stores.c.id, retail_stores.c.company_id, retail_stores.c.released)
                                  .where(retail_stores.c.tenant_id == applier.tenant_id)).all()
    return {(ecom_store, store_id) for ecom_store, company in company_of.items()
            for store_id, store_company, released in stores
            if store_company == company and (store_id in changed or (released and ecom_store in connected))}
