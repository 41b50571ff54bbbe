"""What order creation checks requests against, kept per process (issue 19 point 1): each eCom store's context (its
company's currency, base price list and freight VAT rate, its assortments, price list, lead time and default
customer) and its SKUs as priced on a day (price, product name, the campaigns covering them).

An entry holds while its tenant's `catalogue_version` stands. The back-office load (db/backoffice) is the one writer
of what these read, and it counts the version up in its own transaction; a new eCom store or SKU comes the same
way, so a SKU not found is remembered too. Each check reads the version first (one primary-key read) and only then
what it misses, so an entry never holds data older than the version it is filed under: a process whose entries
are behind misses on its next check and reads afresh, whichever process loaded. On DuckDB a check's statements
cost their binding and planning (the SKU lookup about 5 ms whatever its size), which is what this saves.

Entries are per database (the engine's URL) and tenant, for one day at a time (campaigns run by date); a tenant's
SKU entries start afresh beyond `MAX_SKU_ENTRIES`.
"""

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date

import sqlalchemy as sa

from db.catalogue import in_assortment
from db.schema import campaign_skus, campaigns, companies, ecom_stores, prices, products, skus, tenants
from rules.pricing import Campaign, PricedSku

MAX_SKU_ENTRIES = 100_000

# A SKU as a line names it: ("id", its id) or ("number", its number).
SkuKey = tuple[str, str]


@dataclass
class _TenantEntries:
    version: int
    day: date
    stores: dict[str, sa.Row] = field(default_factory=dict)
    # By eCom store and key; None for a SKU the store's assortment does not hold.
    skus: dict[tuple[str, SkuKey], PricedSku | None] = field(default_factory=dict)


_entries: dict[tuple[str, str], _TenantEntries] = {}
_lock = threading.Lock()
_UNKNOWN = object()  # not held, as against held as None (not in the assortment)


def forget_all() -> None:
    """Drop every entry (tests compare against reading afresh)."""
    with _lock:
        _entries.clear()


@dataclass(frozen=True)
class StoreContext:
    """One eCom store as order creation sees it on a day, within the caller's transaction."""

    conn: sa.Connection
    tenant_id: str
    store: sa.Row
    day: date
    entries: _TenantEntries

    def skus(self, keys: Iterable[SkuKey]) -> dict[SkuKey, PricedSku | None]:
        """The SKUs by the keys given: priced, or None when the store's assortment does not hold them."""
        store_id, held = self.store.id, self.entries.skus
        wanted = set(keys)
        # One lookup each (`get`): another thread may empty the entries between a test and a read.
        known = {key: sku for key in wanted if (sku := held.get((store_id, key), _UNKNOWN)) is not _UNKNOWN}
        missing = wanted - known.keys()
        if missing:
            read = _priced_skus(self.conn, self.tenant_id, self.store, missing, self.day)
            with _lock:
                if len(held) + len(read) > MAX_SKU_ENTRIES:
                    held.clear()
                held.update(((store_id, key), sku) for key, sku in read.items())
            known |= read
        return known


def store_context(conn: sa.Connection, tenant_id: str, ecom_store_id: str, day: date) -> StoreContext:
    """The eCom store's context on the day, from this process's entries while the tenant's catalogue version
    stands."""
    version = conn.scalar(_VERSION, {"tenant_id": tenant_id})
    key = (str(conn.engine.url), tenant_id)
    with _lock:
        entries = _entries.get(key)
        if entries is None or (entries.version, entries.day) != (version, day):
            entries = _entries[key] = _TenantEntries(version, day)
        store = entries.stores.get(ecom_store_id)
    if store is None:
        store = conn.execute(_STORE, {"tenant_id": tenant_id, "ecom_store_id": ecom_store_id}).one()
        with _lock:
            entries.stores[ecom_store_id] = store
    return StoreContext(conn, tenant_id, store, day, entries)


_VERSION = sa.select(tenants.c.catalogue_version).where(tenants.c.id == sa.bindparam("tenant_id"))


# The eCom store with its company's currency, base price list and freight VAT rate.
_STORE = (
    sa.select(ecom_stores, companies.c.currency_iso_code, companies.c.base_price_list_id, companies.c.freight_vat_rate)
    .join(companies, sa.and_(companies.c.tenant_id == sa.bindparam("tenant_id"),
                             companies.c.id == ecom_stores.c.company_id))
    .where(ecom_stores.c.tenant_id == sa.bindparam("tenant_id"), ecom_stores.c.id == sa.bindparam("ecom_store_id")))


def _sku_lookup() -> sa.Select:
    """The SKUs (by id or number) in the store's base or local assortment, each with its price from the store's price
    list, else the base one, and a row per released campaign of the company covering it on the day (or one row
    without). Built once, with bound parameters: building and keying it per order cost about a millisecond."""
    tenant, day = sa.bindparam("tenant_id"), sa.bindparam("day", type_=sa.Date)
    own, base = prices.alias("own"), prices.alias("base")

    def price_in(price: sa.FromClause, price_list: str) -> sa.ColumnElement[bool]:
        return sa.and_(price.c.tenant_id == tenant, price.c.price_list_id == sa.bindparam(price_list),
                       price.c.sku_id == skus.c.id)

    covering = campaign_skus.join(campaigns, sa.and_(
        campaigns.c.tenant_id == tenant, campaigns.c.id == campaign_skus.c.campaign_id,
        campaigns.c.company_id == sa.bindparam("company_id"), campaigns.c.released,
        campaigns.c.valid_from <= day, campaigns.c.valid_to >= day))
    return (
        sa.select(skus.c.id, skus.c.number, products.c.name,
                  sa.func.coalesce(own.c.price, base.c.price).label("price"), campaigns.c.id.label("campaign_id"),
                  campaigns.c.code, campaigns.c.campaign_type, campaign_skus.c.campaign_price)
        .join(products, sa.and_(products.c.tenant_id == tenant, products.c.id == skus.c.product_id))
        .outerjoin(own, price_in(own, "price_list_id"))
        .outerjoin(base, price_in(base, "base_price_list_id"))
        .outerjoin(covering, sa.and_(campaign_skus.c.tenant_id == tenant, campaign_skus.c.sku_id == skus.c.id))
        .where(skus.c.tenant_id == tenant,
               sa.or_(skus.c.id.in_(sa.bindparam("ids", expanding=True)),
                      skus.c.number.in_(sa.bindparam("numbers", expanding=True))),
               in_assortment(tenant, [sa.bindparam("base_assortment_id"), sa.bindparam("local_assortment_id")],
                             skus.c.id)))


_SKU_LOOKUP = _sku_lookup()


def _priced_skus(conn: sa.Connection, tenant_id: str, store: sa.Row, keys: set[SkuKey],
                 day: date) -> dict[SkuKey, PricedSku | None]:
    """The SKUs by the keys given, in the eCom store's assortment with their price and campaigns on `day` (one
    statement); None for those it does not hold."""
    rows = conn.execute(_SKU_LOOKUP, {
        "tenant_id": tenant_id, "company_id": store.company_id, "day": day, "price_list_id": store.price_list_id,
        "base_price_list_id": store.base_price_list_id, "base_assortment_id": store.base_assortment_id,
        "local_assortment_id": store.local_assortment_id,
        "ids": sorted(value for kind, value in keys if kind == "id"),
        "numbers": sorted(value for kind, value in keys if kind == "number")})
    skus_by_id: dict[str, sa.Row] = {}
    offers_by_id: dict[str, list[Campaign]] = {}
    for row in rows:  # a row per campaign covering the SKU, or one without
        skus_by_id.setdefault(row.id, row)
        offers = offers_by_id.setdefault(row.id, [])
        if row.campaign_id is not None:
            offers.append(Campaign(row.campaign_id, row.code, row.campaign_type, row.campaign_price))
    # Kept and shared by every thread of the process: immutable, offers included.
    by_id = {sku_id: PricedSku(row.id, row.number, row.name, row.price, tuple(offers_by_id[sku_id]))
             for sku_id, row in skus_by_id.items()}
    found = {**{("id", sku.id): sku for sku in by_id.values()},
             **{("number", sku.number): sku for sku in by_id.values()}}
    return {key: found.get(key) for key in keys}
