"""Applying a checked back-office document: each entity mapped to its rows and synced, in dependency order.

A partial upsert, field by field (ECOMMERCE.md): an entity's row holds only the columns of the fields the document
gives, so an absent field keeps its held value and null clears it; a list an entity owns (a product's images, a
price list's prices, …) is replaced whole when given and kept when absent. Every reference was checked, so lookups
here cannot miss. Ids are created on first insert (customers bring their own). The changes of each sync are kept
for the events (db/backoffice/announcing.py).
"""

from collections.abc import Callable
from datetime import datetime
from typing import Any

import orjson
import sqlalchemy as sa

from contracts.formats import date_value, decimal_value
from db.backoffice.document import (
    ANNOUNCED_RETAIL_STORE_COLUMNS,
    OPTIONS_LIST,
    PRODUCT_REFERENCES,
    REFERENCE_LISTS,
    SKU_REFERENCES,
    Row,
)
from db.backoffice.sync import Changes, LoadReport, Owned, sync
from db.schema import (
    assortment_lines,
    assortments,
    campaign_skus,
    campaigns,
    companies,
    customer_loyalty_memberships,
    customers,
    ecom_store_warehouses,
    ecom_stores,
    loyalty_program_stores,
    loyalty_programs,
    price_lists,
    prices,
    product_attribute_values,
    product_images,
    products,
    reference_entries,
    retail_stores,
    skus,
    store_assortment_lines,
    vat_rates,
    warehouses,
)
from db.stock import set_on_hand

_DELIVERY_ADDRESS = ("name", "street", "postCode", "city", "countryIsoCode", "email", "phone")
_INVOICE_ADDRESS = ("street", "postCode", "city", "countryIsoCode", "email")
_VISIT_ADDRESS = {"street": "street", "postCode": "post_code", "city": "city", "countryIsoCode": "country_iso_code"}
# An eCom store's settings that have a default: document field → (column, default), null brings the default back.
_ECOM_DEFAULTS = {"leadTimeDays": ("lead_time_days", 0), "paymentCaptureEnabled": ("payment_capture_enabled", False)}


class Applier:
    """One document's writes within one transaction; `changes` keeps what each entity's sync did."""

    def __init__(self, conn: sa.Connection, tenant_id: str, now: datetime) -> None:
        self.conn, self.tenant_id, self.now = conn, tenant_id, now
        self.report = LoadReport()
        self.changes: dict[str, Changes] = {}

    def sync(self, entity: str, table: sa.Table, key: tuple[str, ...], rows: list[Row], *,
             within: sa.ColumnElement[bool] | None = None, owned: Owned | None = None, defaults: Row | None = None,
             read: tuple[str, ...] = ()) -> Changes:
        changes = sync(self.conn, self.tenant_id, self.now, table, key, rows, within=within, owned=owned,
                       defaults=defaults, read=read)
        if rows or (owned is not None and owned.owners):  # the report names what the document names
            self.report.record(entity, changes, owned is not None)
        self.changes[entity] = changes
        return changes

    def record(self, entity: str, changes: Changes) -> None:
        """What an entity written another way than `sync` did."""
        self.report.record(entity, changes)
        self.changes[entity] = changes

    def ids(self, table: sa.Table, key: str = "number", *where: sa.ColumnElement[bool]) -> dict[str, str]:
        return dict(self.conn.execute(sa.select(table.c[key], table.c.id)
                                      .where(table.c.tenant_id == self.tenant_id, *where)).all())

    def reference_ids(self, list_name: str) -> dict[str, str]:
        return self.ids(reference_entries, "code", reference_entries.c.list_name == list_name)

    def changed_rows(self, entity: str) -> list[Row]:
        """Every row an entity's sync created, updated (as held and as written) or deleted."""
        changes = self.changes.get(entity)
        if changes is None:
            return []
        return [*changes.created, *(dict(held) for held, _ in changes.updated),
                *({**held, **new} for held, new in changes.updated), *(dict(held) for held in changes.deleted)]

    def changed_products(self) -> set[str]:
        """Products whose record changed: their own row, SKUs, images, attribute values, SKU prices or VAT rates."""
        changed = {row["id"] for row in self.changed_rows("products")}
        for entity in ("productSkus", "productImages", "productAttributeValues"):
            changed |= {row["product_id"] for row in self.changed_rows(entity) if row.get("product_id")}
        # A top-level SKU's new name, a new price or a new VAT rate changes the record of the SKU's product.
        numbers = {row["number"] for row in self.changed_rows("skus")}
        priced = {row["sku_id"] for row in self.changed_rows("prices")}
        taxed = {row["id"] for row in self.changed_rows("vatRates")}
        if numbers or priced or taxed:
            # One read of the tenant's SKUs: thousands of bound ids cost DuckDB more than the rows.
            changed |= {sku.product_id for sku in self.conn.execute(
                sa.select(skus.c.id, skus.c.number, skus.c.product_id, skus.c.vat_rate_id).where(
                    skus.c.tenant_id == self.tenant_id, skus.c.product_id.is_not(None)))
                if sku.number in numbers or sku.id in priced or sku.vat_rate_id in taxed}
        return changed


def apply_document(conn: sa.Connection, tenant_id: str, now: datetime, document: dict[str, Any]) -> Applier:
    applier = Applier(conn, tenant_id, now)
    _reference_lists(applier, document.get("referenceLists", {}))
    applier.sync("vatRates", vat_rates, ("code",),
                 [{"code": item["code"], **_given(item, rate=("rate", _decimal))}
                  for item in document.get("vatRates", [])])
    applier.sync("priceLists", price_lists, ("code",),
                 [{"code": item["code"], **_given(item, name=("name", _same))}
                  for item in document.get("priceLists", [])])
    price_list_ids = applier.ids(price_lists, "code")
    applier.sync("companies", companies, ("number",), [_company_row(item, price_list_ids)
                                                        for item in document.get("companies", [])])
    applier.sync("skus", skus, ("number",), [{"number": item["number"], **_given(item, name=("name", _same))}
                                             for item in document.get("skus", [])])
    _products(applier, document.get("products", []))
    sku_ids, company_ids = applier.ids(skus), applier.ids(companies)

    priced = [item for item in document.get("priceLists", []) if "prices" in item]
    applier.sync("prices", prices, ("price_list_id", "sku_id"),
                 [{"price_list_id": price_list_ids[item["code"]], "sku_id": sku_ids[line["skuNumber"]],
                   "price": _decimal(line["price"])} for item in priced for line in item["prices"]],
                 owned=Owned("price_list_id", {price_list_ids[item["code"]] for item in priced}))

    _assortments(applier, document.get("assortments", []), sku_ids)
    assortment_ids = applier.ids(assortments, "code")
    applier.sync("retailStores", retail_stores, ("number",),
                 [_retail_store_row(item, company_ids, assortment_ids) for item in document.get("retailStores", [])],
                 read=ANNOUNCED_RETAIL_STORE_COLUMNS)
    applier.sync("warehouses", warehouses, ("number",),
                 [{"number": item["number"], **_given(item, name=("name", _same),
                                                      companyNumber=("company_id", company_ids.__getitem__))}
                  for item in document.get("warehouses", [])])
    _ecom_stores(applier, document.get("ecomStores", []), company_ids, assortment_ids, price_list_ids)
    _loyalty_programs(applier, document.get("loyaltyPrograms", []), company_ids)

    store_ids = applier.ids(retail_stores)
    applier.sync("storeAssortmentLines", store_assortment_lines, ("retail_store_id", "sku_id"),
                 [{"retail_store_id": store_ids[line["retailStoreNumber"]], "sku_id": sku_ids[line["skuNumber"]],
                   **_given(line, replenishmentType=("replenishment_type", _same),
                            reorderPoint=("reorder_point", _decimal),
                            maximumInventory=("maximum_inventory", _decimal), locked=("locked", _same))}
                  for line in document.get("storeAssortmentLines", [])])
    _stock(applier, document.get("stock", []), store_ids | applier.ids(warehouses), sku_ids)
    _campaigns(applier, document.get("campaigns", []), company_ids, sku_ids)
    _customers(applier, document.get("customers", []))
    _touch_products(applier)
    return applier


def _stock(applier: Applier, levels: list[dict[str, Any]], location_ids: dict[str, str],
           sku_ids: dict[str, str]) -> None:
    """On hand only, through the locked path of stock counts (db/stock.py): `reserved` is the service's own figure,
    so a document's `reserved` is ignored, and on hand below what is reserved releases the shortfall."""
    counted = {(location_ids[level["locationNumber"]], sku_ids[level["skuNumber"]]): _decimal(level["onHand"])
               for level in levels}
    if not counted:
        return
    changes = set_on_hand(applier.conn, applier.tenant_id, counted, applier.now)
    created = [{"location_id": change.location_id, "sku_id": change.sku_id, "on_hand": change.after}
               for change in changes if change.before is None]
    updated = [({"location_id": change.location_id, "sku_id": change.sku_id, "on_hand": change.before},
                {"on_hand": change.after}) for change in changes if change.before is not None]
    applier.record("stock", Changes(created, updated, unchanged=len(counted) - len(changes)))
    applier.report.released += [item for change in changes for item in change.released]


def _touch_products(applier: Applier) -> None:
    """A product's modified_time covers its SKUs, images, attribute values and prices too."""
    changed = sorted(applier.changed_products() - {row["id"] for row in applier.changed_rows("products")})
    if changed:
        applier.conn.execute(products.update().where(products.c.tenant_id == applier.tenant_id,
                                                     products.c.id.in_(changed)).values(modified_time=applier.now))


def _given(item: dict[str, Any], **fields: tuple[str, Callable[[Any], Any]]) -> Row:
    """The columns of the fields the item gives, each value read by its function: `field=(column, read)`. An
    absent field is left out (the held value stays); null stays null (it clears)."""
    return {column: None if item[name] is None else read(item[name])
            for name, (column, read) in fields.items() if name in item}


def _same(value: Any) -> Any:
    return value


def _decimal(text: str | None) -> Any:
    return None if text is None else decimal_value(text)


def _reference_lists(applier: Applier, lists: dict[str, Any]) -> None:
    for name, list_name in REFERENCE_LISTS.items():
        applier.sync(name, reference_entries, ("list_name", "code"),
                     [{"list_name": list_name, "code": item["code"],
                       **_given(item, name=("name", _same), **_REFERENCE_EXTRAS.get(list_name, {}))}
                      for item in lists.get(name, [])],
                     within=reference_entries.c.list_name == list_name)
    attribute_ids = applier.reference_ids("dynamic_attributes")
    # Options are keyed on their code across attributes (the list route is flat), so one may move between them.
    given = [item for item in lists.get("dynamicAttributes", []) if "options" in item]
    applier.sync("dynamicAttributeOptions", reference_entries, ("list_name", "code"),
                 [{"list_name": OPTIONS_LIST, "code": option["code"], "name": option["name"],
                   "sort_order": option["sortOrder"], "dynamic_attribute_id": attribute_ids[item["code"]]}
                  for item in given for option in item["options"]],
                 within=reference_entries.c.list_name == OPTIONS_LIST,
                 owned=Owned("dynamic_attribute_id", {attribute_ids[item["code"]] for item in given}))


# The columns of a reference list's own fields, beyond code and name.
_REFERENCE_EXTRAS = {"product_colors": {"colorCode": ("color_code", _same)},
                     "sizes": {"sortOrder": ("sort_order", _same)},
                     "dynamic_attributes": {"valueType": ("value_type", _same)}}


def _company_row(item: dict[str, Any], price_list_ids: dict[str, str]) -> Row:
    return {"number": item["number"], **_given(item, name=("name", _same),
                                               currencyIsoCode=("currency_iso_code", _same),
                                               basePriceListCode=("base_price_list_id", price_list_ids.__getitem__),
                                               freightVatRate=("freight_vat_rate", _decimal))}


def _references(item: dict[str, Any], fields: dict[str, tuple[str, str]],
                references: dict[str, dict[str, str]]) -> Row:
    """The given reference fields' columns: each code read as the id of its list's entry."""
    return _given(item, **{name: (column, references[list_name].__getitem__)
                           for name, (column, list_name) in fields.items()})


def _products(applier: Applier, items: list[dict[str, Any]]) -> None:
    references = {list_name: applier.reference_ids(list_name)
                  for list_name in {*(n for _, n in PRODUCT_REFERENCES.values()),
                                    *(n for _, n in SKU_REFERENCES.values())}}
    applier.sync("products", products, ("number",), [
        {"number": item["number"],
         **_given(item, name=("name", _same), description=("description", _same), released=("released", _same)),
         **_references(item, PRODUCT_REFERENCES, references)}
        for item in items])
    product_ids = applier.ids(products)

    def owned(name: str) -> Owned:
        return Owned("product_id", {product_ids[item["number"]] for item in items if name in item})

    with_skus = [item for item in items if "skus" in item]
    vat_ids = applier.ids(vat_rates, "code")
    changes = applier.sync("productSkus", skus, ("number",), [
        {"number": sku["number"], "product_id": product_ids[item["number"]],
         **_given(sku, name=("name", _same), gtin=("gtin", _same), vatRateCode=("vat_rate_id", vat_ids.__getitem__),
                  published=("published", _same)),
         **_references(sku, SKU_REFERENCES, references)}
        for item in with_skus for sku in item["skus"]])
    # A SKU a product's list no longer names leaves the product (and so every eCom store's view) but is kept:
    # stock, prices, assortment lines and demand planning still refer to it.
    named = {sku["number"] for item in with_skus for sku in item["skus"]}
    owners = owned("skus").owners
    leaving = [number for number in applier.conn.scalars(
        sa.select(skus.c.number).where(skus.c.tenant_id == applier.tenant_id, skus.c.product_id.in_(sorted(owners))))
               if number not in named]
    if leaving:
        detached = sync(applier.conn, applier.tenant_id, applier.now, skus, ("number",),
                        [{"number": number, "product_id": None} for number in leaving])
        applier.changes["productSkus"] = Changes(changes.created, changes.updated + detached.updated,
                                                 unchanged=changes.unchanged)
        applier.report.record("productSkus", applier.changes["productSkus"])

    applier.sync("productImages", product_images, ("product_id", "sort_order"), [
        {"product_id": product_ids[item["number"]], "sort_order": image["sortOrder"], "url": image["url"],
         "alt_text": image.get("altText")} for item in items for image in item.get("images", [])],
        owned=owned("images"))
    attribute_ids = applier.reference_ids("dynamic_attributes")
    option_ids = applier.reference_ids(OPTIONS_LIST)
    applier.sync("productAttributeValues", product_attribute_values, ("product_id", "dynamic_attribute_id"), [
        {"product_id": product_ids[item["number"]], "dynamic_attribute_id": attribute_ids[value["code"]],
         "value": value.get("value"),
         "option_ids": (orjson.dumps([option_ids[code] for code in value["optionCodes"]]).decode()
                        if "optionCodes" in value else None)}
        for item in items for value in item.get("dynamicAttributes", [])],
        owned=owned("dynamicAttributes"))


def _assortments(applier: Applier, items: list[dict[str, Any]], sku_ids: dict[str, str]) -> None:
    applier.sync("assortments", assortments, ("code",),
                 [{"code": item["code"], **_given(item, kind=("kind", _same), name=("name", _same))}
                  for item in items])
    assortment_ids = applier.ids(assortments, "code")
    lined = [item for item in items if "lines" in item]
    applier.sync("assortmentLines", assortment_lines, ("assortment_id", "sku_id"),
                 [{"assortment_id": assortment_ids[item["code"]], "sku_id": sku_ids[line["skuNumber"]],
                   **_line_values(line)} for item in lined for line in item["lines"]],
                 owned=Owned("assortment_id", {assortment_ids[item["code"]] for item in lined}))


def _retail_store_row(item: dict[str, Any], company_ids: dict[str, str], assortment_ids: dict[str, str]) -> Row:
    row = {"number": item["number"],
           **_given(item, name=("name", _same), companyNumber=("company_id", company_ids.__getitem__),
                    released=("released", _same), baseAssortmentCode=("base_assortment_id", assortment_ids.__getitem__),
                    localAssortmentCode=("local_assortment_id", assortment_ids.__getitem__))}
    if "visitAddress" in item:  # an address is given whole: what it leaves out, or all of it when null, is cleared
        address = item["visitAddress"] or {}
        row |= {column: address.get(name) for name, column in _VISIT_ADDRESS.items()}
    return row


def _ecom_stores(applier: Applier, items: list[dict[str, Any]], company_ids: dict[str, str],
                 assortment_ids: dict[str, str], price_list_ids: dict[str, str]) -> None:
    # Lead time and payment capture have defaults, which null brings back.
    applier.sync("ecomStores", ecom_stores, ("number",), [
        {"number": item["number"],
         **_given(item, name=("name", _same), companyNumber=("company_id", company_ids.__getitem__),
                  released=("released", _same), baseAssortmentCode=("base_assortment_id", assortment_ids.__getitem__),
                  localAssortmentCode=("local_assortment_id", assortment_ids.__getitem__),
                  priceListCode=("price_list_id", price_list_ids.__getitem__),
                  defaultCustomerId=("default_customer_id", str.lower)),
         **{column: default if item[name] is None else item[name] for name, (column, default) in _ECOM_DEFAULTS.items()
            if name in item}}
        for item in items], defaults={column: default for column, default in _ECOM_DEFAULTS.values()})
    store_ids, warehouse_ids = applier.ids(ecom_stores), applier.ids(warehouses)
    given = [item for item in items if "servingWarehouseNumbers" in item]
    applier.sync("ecomStoreWarehouses", ecom_store_warehouses, ("ecom_store_id", "warehouse_id"), [
        {"ecom_store_id": store_ids[item["number"]], "warehouse_id": warehouse_ids[number], "priority": priority}
        for item in given for priority, number in enumerate(item["servingWarehouseNumbers"], start=1)],
        owned=Owned("ecom_store_id", {store_ids[item["number"]] for item in given}))


def _loyalty_programs(applier: Applier, items: list[dict[str, Any]], company_ids: dict[str, str]) -> None:
    applier.sync("loyaltyPrograms", loyalty_programs, ("code",),
                 [{"code": item["code"],
                   **_given(item, name=("name", _same), companyNumber=("company_id", company_ids.__getitem__))}
                  for item in items])
    program_ids, store_ids = applier.ids(loyalty_programs, "code"), applier.ids(retail_stores)
    given = [item for item in items if "retailStoreNumbers" in item]
    applier.sync("loyaltyProgramStores", loyalty_program_stores, ("loyalty_program_id", "retail_store_id"),
                 [{"loyalty_program_id": program_ids[item["code"]], "retail_store_id": store_ids[number]}
                  for item in given for number in item["retailStoreNumbers"]],
                 owned=Owned("loyalty_program_id", {program_ids[item["code"]] for item in given}))


def _line_values(line: dict[str, Any]) -> Row:
    return {"replenishment_type": line["replenishmentType"],
            "reorder_point": _decimal(line.get("reorderPoint")),
            "maximum_inventory": _decimal(line.get("maximumInventory"))}


def _campaigns(applier: Applier, items: list[dict[str, Any]], company_ids: dict[str, str],
               sku_ids: dict[str, str]) -> None:
    program_ids = applier.ids(loyalty_programs, "code")
    applier.sync("campaigns", campaigns, ("code",), [
        {"code": item["code"],
         **_given(item, name=("name", _same), campaignType=("campaign_type", _same),
                  validFrom=("valid_from", date_value), validTo=("valid_to", date_value), released=("released", _same),
                  companyNumber=("company_id", company_ids.__getitem__),
                  loyaltyProgramCode=("loyalty_program_id", program_ids.__getitem__))}
        for item in items])
    campaign_ids = applier.ids(campaigns, "code")
    given = [item for item in items if "skus" in item]
    applier.sync("campaignSkus", campaign_skus, ("campaign_id", "sku_id"), [
        {"campaign_id": campaign_ids[item["code"]], "sku_id": sku_ids[line["skuNumber"]],
         "campaign_price": _decimal(line["campaignPrice"]),
         "loyalty_membership_required": line["loyaltyProgramMembershipRequired"]}
        for item in given for line in item["skus"]],
        owned=Owned("campaign_id", {campaign_ids[item["code"]] for item in given}))


def _release_moving_contacts(applier: Applier, rows: list[Row]) -> None:
    """Clears the e-mail and phone keys of named customers whose contacts change, so that two customers may trade
    them in one document: row-by-row updates would otherwise meet the unique constraints half way. Only the keys a
    row sets are cleared (it writes them again); the others stay as held."""
    held = {row.id: row for row in applier.conn.execute(
        sa.select(customers.c.id, customers.c.email_key, customers.c.phone)
        .where(customers.c.tenant_id == applier.tenant_id, customers.c.id.in_([row["id"] for row in rows])))}
    for column in ("email_key", "phone"):
        moving = sorted(row["id"] for row in rows
                        if row["id"] in held and column in row and getattr(held[row["id"]], column) != row[column])
        if len(moving) > 1:
            applier.conn.execute(customers.update().where(customers.c.tenant_id == applier.tenant_id,
                                                          customers.c.id.in_(moving)).values({column: None}))


def _address(fields: tuple[str, ...]) -> Callable[[dict[str, Any]], str]:
    """How an address is stored: every field of the shape, absent ones null, in the shape's order (the same address
    is the same text)."""
    return lambda given: orjson.dumps({name: given.get(name) for name in fields}).decode()


def _customers(applier: Applier, items: list[dict[str, Any]]) -> None:
    # ext, which integrators set, is left alone.
    rows = [{"id": item["id"].lower(),
             **_given(item, firstName=("first_name", _same), lastName=("last_name", _same), email=("email", _same),
                      phone=("phone", _same), birthDate=("birth_date", date_value),
                      deliveryAddress=("delivery_address", _address(_DELIVERY_ADDRESS)),
                      invoiceAddress=("invoice_address", _address(_INVOICE_ADDRESS))),
             **_given(item, email=("email_key", str.lower))}
            for item in items]
    _release_moving_contacts(applier, rows)
    applier.sync("customers", customers, ("id",), rows)
    program_ids = applier.ids(loyalty_programs, "code")
    given = [item for item in items if "loyaltyMemberships" in item]
    applier.sync("customerLoyaltyMemberships", customer_loyalty_memberships, ("customer_id", "loyalty_program_id"), [
        {"customer_id": item["id"].lower(), "loyalty_program_id": program_ids[membership["loyaltyProgramCode"]],
         "member_number": membership["memberNumber"], "member_since": date_value(membership["memberSince"])}
        for item in given for membership in item["loyaltyMemberships"]],
        owned=Owned("customer_id", {item["id"].lower() for item in given}))
