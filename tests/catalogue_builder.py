"""Catalogue test data written straight into the store tables of one tenant (the document loader grows in parallel).

`Builder` inserts single rows and returns their ids; `build_catalogue` lays out the scenario the API tests read,
around a world of `seed_demo_tenant` (its company, retail stores, loyalty program and two eCom stores).
"""

from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import sqlalchemy as sa

from db.ids import new_id, utc_now
from db.schema import (
    assortment_lines,
    assortments,
    campaign_skus,
    campaigns,
    companies,
    ecom_store_warehouses,
    ecom_stores,
    price_lists,
    prices,
    product_attribute_values,
    product_images,
    products,
    reference_entries,
    retail_stores,
    skus,
    stock_levels,
    vat_rates,
    warehouses,
)


class Builder:
    def __init__(self, engine: sa.Engine, tenant_id: str) -> None:
        self.engine, self.tenant_id = engine, tenant_id

    def _add(self, table: sa.Table, **values: Any) -> str:
        values = {"tenant_id": self.tenant_id, **values}
        if "id" in table.c and "id" not in values:
            values["id"] = new_id()
        with self.engine.begin() as conn:
            conn.execute(table.insert().values(**values))
        return values.get("id", "")

    def _update(self, table: sa.Table, row_id: str, **values: Any) -> None:
        with self.engine.begin() as conn:
            conn.execute(table.update().where(table.c.tenant_id == self.tenant_id, table.c.id == row_id)
                         .values(**values))

    def id_of(self, table: sa.Table, number: str) -> str:
        with self.engine.connect() as conn:
            return conn.scalar(sa.select(table.c.id).where(table.c.tenant_id == self.tenant_id,
                                                            table.c.number == number))

    def reference(self, list_name: str, code: str, name: str, **extra: Any) -> str:
        return self._add(reference_entries, list_name=list_name, code=code, name=name, modified_time=utc_now(),
                         **extra)

    def vat_rate(self, code: str, rate: str) -> str:
        return self._add(vat_rates, code=code, rate=Decimal(rate))

    def price_list(self, code: str) -> str:
        return self._add(price_lists, code=code, name=f"Prices {code}")

    def price(self, price_list_id: str, sku_id: str, price: str) -> None:
        self._add(prices, price_list_id=price_list_id, sku_id=sku_id, price=Decimal(price))

    def company(self, number: str, currency: str) -> str:
        return self._add(companies, number=number, name=f"Company {number}", currency_iso_code=currency)

    def set_company(self, company_id: str, **values: Any) -> None:
        self._update(companies, company_id, **values)

    def set_ecom_store(self, ecom_store_id: str, **values: Any) -> None:
        self._update(ecom_stores, ecom_store_id, **values)

    def assortment(self, code: str, kind: str = "BASE") -> str:
        return self._add(assortments, code=code, kind=kind, name=f"Assortment {code}")

    def product(self, number: str, released: bool = True, **values: Any) -> str:
        return self._add(products, number=number, name=f"Product {number}", released=released,
                         modified_time=utc_now(), **values)

    def sku(self, product_id: str | None, number: str, *, published: bool = True, assortment_ids: tuple[str, ...] = (),
            **values: Any) -> str:
        sku_id = self._add(skus, product_id=product_id, number=number, name=f"SKU {number}", published=published,
                           **values)
        for assortment_id in assortment_ids:
            self._add(assortment_lines, assortment_id=assortment_id, sku_id=sku_id, replenishment_type="AUTO",
                      modified_time=utc_now())
        return sku_id

    def image(self, product_id: str, sort_order: int, url: str, alt_text: str | None = None) -> None:
        self._add(product_images, product_id=product_id, sort_order=sort_order, url=url, alt_text=alt_text)

    def attribute_value(self, product_id: str, attribute_id: str, value: str | None = None,
                        option_ids: str | None = None) -> None:
        self._add(product_attribute_values, product_id=product_id, dynamic_attribute_id=attribute_id, value=value,
                  option_ids=option_ids)

    def warehouse(self, company_id: str, number: str) -> str:
        return self._add(warehouses, company_id=company_id, number=number, name=f"Warehouse {number}")

    def serves(self, ecom_store_id: str, warehouse_id: str, priority: int) -> None:
        self._add(ecom_store_warehouses, ecom_store_id=ecom_store_id, warehouse_id=warehouse_id, priority=priority)

    def stock(self, location_id: str, sku_id: str, on_hand: str, reserved: str = "0", at: Any = None) -> None:
        self._add(stock_levels, location_id=location_id, sku_id=sku_id, on_hand=Decimal(on_hand),
                  reserved=Decimal(reserved), modified_time=at or utc_now())

    def campaign(self, company_id: str, code: str, *, valid_from: date, valid_to: date, kind: str = "NORMAL",
                 released: bool = True, loyalty_program_id: str | None = None,
                 sku_prices: tuple[tuple[str, str, bool], ...] = ()) -> str:
        campaign_id = self._add(campaigns, company_id=company_id, code=code, name=f"Campaign {code}",
                                campaign_type=kind, valid_from=valid_from, valid_to=valid_to, released=released,
                                loyalty_program_id=loyalty_program_id, modified_time=utc_now())
        for sku_id, price, membership in sku_prices:
            self._add(campaign_skus, campaign_id=campaign_id, sku_id=sku_id, campaign_price=Decimal(price),
                      loyalty_membership_required=membership)
        return campaign_id


@dataclass
class Catalogue:
    """The ids of the scenario, by the names the tests use."""

    store_a: str  # eCom store 2001: base + local assortment, no price list of its own (company base prices)
    store_b: str  # eCom store 2002: its own assortment and price list
    company: str
    program: str
    refs: dict[str, str] = field(default_factory=dict)
    products: dict[str, str] = field(default_factory=dict)
    skus: dict[str, str] = field(default_factory=dict)
    locations: dict[str, str] = field(default_factory=dict)
    campaigns: dict[str, str] = field(default_factory=dict)
    # Published products of store A besides P1, for paging.
    filler: list[str] = field(default_factory=list)


def build_catalogue(engine: sa.Engine, world: dict[str, Any]) -> Catalogue:
    """Store A sees: P1 (SKUs S, M and the unpublished XL; L only in B), P2 (only an unpublished SKU), P3 (not
    released), six filler products; not P4 (only in B's assortment) and not an orphan SKU without product."""
    b = Builder(engine, world["id"])
    by_number = {store["number"]: store["id"] for store in world["ecomStores"]}
    with engine.connect() as conn:
        company = conn.scalar(sa.select(companies.c.id).where(companies.c.tenant_id == world["id"]))
    cat = Catalogue(store_a=by_number["2001"], store_b=by_number["2002"], company=company,
                    program=world["loyaltyPrograms"][0]["id"])
    refs = cat.refs
    # Inserted out of code order, to see the lists come back by code.
    refs["brand_zeta"] = b.reference("brands", "ZETA", "Zeta Outdoor")
    refs["brand_alfa"] = b.reference("brands", "ALFA", "Alfa Wear")
    refs["category"] = b.reference("product_categories", "JACKETS", "Jackets")
    refs["navy"] = b.reference("product_colors", "NAVY", "Navy", color_code="#1F3A5F")
    refs["size_m"] = b.reference("sizes", "M", "Medium", sort_order=20)
    refs["size_s"] = b.reference("sizes", "S", "Small", sort_order=10)
    refs["pieces"] = b.reference("unit_of_measures", "PCS", "Pieces")
    refs["material"] = b.reference("dynamic_attributes", "MATERIAL", "Material", value_type="TEXT")
    refs["season"] = b.reference("dynamic_attributes", "SEASON", "Season", value_type="OPTION")
    refs["winter"] = b.reference("dynamic_attributes_options", "WINTER", "Winter", dynamic_attribute_id=refs["season"],
                                 sort_order=2)
    refs["autumn"] = b.reference("dynamic_attributes_options", "AUTUMN", "Autumn", dynamic_attribute_id=refs["season"],
                                 sort_order=1)
    vat_high, vat_low = b.vat_rate("HIGH", "25"), b.vat_rate("LOW", "15.5")

    base_prices, b_prices = b.price_list("BASE"), b.price_list("WEB-B")
    b.set_company(company, base_price_list_id=base_prices)
    a_base, a_local, b_base = b.assortment("A-BASE"), b.assortment("A-LOCAL", "LOCAL"), b.assortment("B-BASE")
    b.set_ecom_store(cat.store_a, base_assortment_id=a_base, local_assortment_id=a_local)
    b.set_ecom_store(cat.store_b, base_assortment_id=b_base, price_list_id=b_prices)

    p = cat.products
    p["P1"] = b.product("P1", description="A warm jacket", brand_id=refs["brand_alfa"],
                        product_category_id=refs["category"])
    s = cat.skus
    sku_refs = {"product_color_id": refs["navy"], "unit_of_measure_id": refs["pieces"], "vat_rate_id": vat_high}
    # Created S, M, XL, L; by number store A sees M, S, XL.
    s["P1-S"] = b.sku(p["P1"], "P1-S", assortment_ids=(a_base, b_base), gtin="07311234567890",
                      size_id=refs["size_s"], **sku_refs)
    s["P1-M"] = b.sku(p["P1"], "P1-M", assortment_ids=(a_local,), size_id=refs["size_m"], **sku_refs)
    s["P1-XL"] = b.sku(p["P1"], "P1-XL", published=False, assortment_ids=(a_base, a_local), vat_rate_id=vat_low)
    s["P1-L"] = b.sku(p["P1"], "P1-L", assortment_ids=(b_base,), vat_rate_id=vat_high)
    b.image(p["P1"], 2, "https://img.example/p1-back.jpg")
    b.image(p["P1"], 1, "https://img.example/p1-front.jpg", "Front")
    b.attribute_value(p["P1"], refs["material"], value="Wool")
    b.attribute_value(p["P1"], refs["season"], option_ids=f'["{refs["autumn"]}", "{refs["winter"]}"]')
    b.price(base_prices, s["P1-S"], "499.00")
    b.price(base_prices, s["P1-M"], "519.5")
    b.price(base_prices, s["P1-L"], "539")
    b.price(b_prices, s["P1-S"], "449.90")  # B's own price; P1-L has none there and sells at the base price

    p["P2"] = b.product("P2")
    s["P2-1"] = b.sku(p["P2"], "P2-1", published=False, assortment_ids=(a_base,))
    p["P3"] = b.product("P3", released=False)
    s["P3-1"] = b.sku(p["P3"], "P3-1", assortment_ids=(a_base,))
    p["P4"] = b.product("P4")
    s["P4-1"] = b.sku(p["P4"], "P4-1", assortment_ids=(b_base,))
    s["ORPHAN"] = b.sku(None, "ORPHAN-1", assortment_ids=(a_base,))
    for index in range(6):
        product_id = b.product(f"F{index}")
        b.sku(product_id, f"F{index}-1", assortment_ids=(a_base,))
        cat.filler.append(product_id)

    loc = cat.locations
    loc["W1"], loc["W2"], loc["W3"] = (b.warehouse(company, number) for number in ("W1", "W2", "W3"))
    b.serves(cat.store_a, loc["W1"], priority=2)
    b.serves(cat.store_a, loc["W2"], priority=1)
    b.serves(cat.store_b, loc["W3"], priority=1)
    for number in ("1001", "1002", "1004"):  # 1004 is not released
        loc[number] = b.id_of(retail_stores, number)
    now = utc_now()
    b.stock(loc["W1"], s["P1-S"], "10", "3", at=now - timedelta(hours=2))
    b.stock(loc["W2"], s["P1-S"], "2", "5", at=now - timedelta(hours=3))
    b.stock(loc["W3"], s["P1-S"], "100", at=now)  # serves B only
    b.stock(loc["1001"], s["P1-S"], "4.5", "1", at=now - timedelta(hours=1))
    b.stock(loc["1004"], s["P1-S"], "7", at=now)  # not released: not listed

    today = now.date()
    day = timedelta(days=1)
    c = cat.campaigns
    c["active"] = b.campaign(company, "ACTIVE", valid_from=today - day, valid_to=today + 5 * day,
                             loyalty_program_id=cat.program,
                             sku_prices=((s["P1-S"], "399.9", True), (s["P4-1"], "10", False)))
    c["planned"] = b.campaign(company, "PLANNED", valid_from=today + day, valid_to=today + 10 * day,
                              kind="THREE_FOR_TWO", loyalty_program_id=cat.program,
                              sku_prices=((s["P1-M"], "519.5", False),))
    c["ends_today"] = b.campaign(company, "ENDS-TODAY", valid_from=today - 10 * day, valid_to=today,
                                 sku_prices=((s["P1-XL"], "100", False),))
    c["ended"] = b.campaign(company, "ENDED", valid_from=today - 10 * day, valid_to=today - day,
                            sku_prices=((s["P1-S"], "1", False),))
    c["unreleased"] = b.campaign(company, "UNRELEASED", valid_from=today - day, valid_to=today + day,
                                 released=False, sku_prices=((s["P1-S"], "2", False),))
    c["outside"] = b.campaign(company, "OUTSIDE", valid_from=today - day, valid_to=today + day,
                              sku_prices=((s["P4-1"], "5", False),))
    return cat
