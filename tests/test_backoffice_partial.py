"""The back-office loader's partial upsert, field by field (ECOMMERCE.md; issue 22 point 3), as a property.

Each example loads the full catalogue document (tests/backoffice_documents.py) into a fresh tenant, then a random
partial document over it: for every kind of entity, some held ones named and sometimes a new one; each field of a
named entity absent, null (where it may be cleared) or given anew; each list an entity owns absent or given whole.
The stored entities, read back in the document's terms, must equal what this test's own model of the rule makes of
the entities held before: an absent field keeps its value, null clears it (a setting with a default goes back to
it), a given owned list replaces the held one (a SKU left out of its product's list leaves the product), a new entity
holds what it was given and nulls (or defaults) elsewhere, and nothing the document does not name changes.
Stock is another change's to make (a document's stock sets on hand only): it is left out here.
"""

import copy
import json
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts.rendering import decimal
from db.backoffice import load_document
from db.backoffice.document import OPTIONS_LIST
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
from db.tenants import create_tenant
from tests.backoffice_documents import VALID_GTIN_8, VALID_GTIN_12, VALID_GTIN_13, catalogue_document, customer_id

pytestmark = pytest.mark.timeout(600)  # a guard: the property takes 20–100 s per backend on a loaded machine

Entities = dict[str, dict[Any, dict[str, Any]]]
SKU_FIELDS = ("name", "product", "gtin", "colorCode", "sizeCode", "unitOfMeasureCode", "vatRateCode", "published")


# --- the stored entities, in the document's terms ---------------------------------------------------------------

def read_back(engine: sa.Engine, tenant_id: str) -> Entities:
    """Every entity the tenant holds (stock aside), keyed as the document keys it, fields named as it names them."""
    with engine.connect() as conn:
        def rows(table: sa.Table) -> list[sa.RowMapping]:
            return list(conn.execute(sa.select(table).where(table.c.tenant_id == tenant_id)).mappings())

        def keys(table: sa.Table, key: str = "number") -> dict[str, str]:
            return {row["id"]: row[key] for row in rows(table)}

        entries = rows(reference_entries)
        code = {row["id"]: row["code"] for row in entries}
        company, price_list, vat = keys(companies), keys(price_lists, "code"), keys(vat_rates, "code")
        sku, product, assortment = keys(skus), keys(products), keys(assortments, "code")
        store, warehouse, program = keys(retail_stores), keys(warehouses), keys(loyalty_programs, "code")
        campaign, ecom_store = keys(campaigns, "code"), keys(ecom_stores)

        def of(value: str | None, names: dict[str, str]) -> str | None:
            return None if value is None else names[value]

        held: Entities = {"options": {}}
        for row in entries:
            if row["list_name"] == OPTIONS_LIST:
                held["options"][row["code"]] = {"name": row["name"], "sortOrder": row["sort_order"],
                                                "attribute": code[row["dynamic_attribute_id"]]}
                continue
            extras = {"product_colors": {"colorCode": row["color_code"]}, "sizes": {"sortOrder": row["sort_order"]},
                      "dynamic_attributes": {"valueType": row["value_type"]}}.get(row["list_name"], {})
            held.setdefault(row["list_name"], {})[row["code"]] = {"name": row["name"], **extras}
        held["vatRates"] = {row["code"]: {"rate": decimal(row["rate"])} for row in rows(vat_rates)}
        held["companies"] = {row["number"]: {
            "name": row["name"], "currencyIsoCode": row["currency_iso_code"],
            "basePriceListCode": of(row["base_price_list_id"], price_list),
            "freightVatRate": decimal(row["freight_vat_rate"])} for row in rows(companies)}
        held["priceLists"] = {row["code"]: {"name": row["name"], "prices": {}} for row in rows(price_lists)}
        for row in rows(prices):
            held["priceLists"][price_list[row["price_list_id"]]]["prices"][sku[row["sku_id"]]] = decimal(row["price"])
        held["skus"] = {row["number"]: {
            "name": row["name"], "product": of(row["product_id"], product), "gtin": row["gtin"],
            "colorCode": of(row["product_color_id"], code), "sizeCode": of(row["size_id"], code),
            "unitOfMeasureCode": of(row["unit_of_measure_id"], code), "vatRateCode": of(row["vat_rate_id"], vat),
            "published": row["published"]} for row in rows(skus)}
        held["products"] = {row["number"]: {
            "name": row["name"], "description": row["description"], "released": row["released"],
            **{name: of(row[column], code) for name, column in PRODUCT_CODES.items()},
            "images": {}, "dynamicAttributes": {}} for row in rows(products)}
        for row in rows(product_images):
            held["products"][product[row["product_id"]]]["images"][row["sort_order"]] = (row["url"], row["alt_text"])
        for row in rows(product_attribute_values):
            value = ("value", row["value"]) if row["option_ids"] is None else \
                ("optionCodes", tuple(code[option] for option in json.loads(row["option_ids"])))
            held["products"][product[row["product_id"]]]["dynamicAttributes"][code[row["dynamic_attribute_id"]]] = value
        held["assortments"] = {row["code"]: {"kind": row["kind"], "name": row["name"], "lines": {}}
                               for row in rows(assortments)}
        for row in rows(assortment_lines):
            held["assortments"][assortment[row["assortment_id"]]]["lines"][sku[row["sku_id"]]] = (
                row["replenishment_type"], decimal(row["reorder_point"]), decimal(row["maximum_inventory"]))
        held["retailStores"] = {row["number"]: {
            "name": row["name"], "companyNumber": company[row["company_id"]], "released": row["released"],
            "visitAddress": {name: row[column] for name, column in VISIT_ADDRESS.items() if row[column] is not None}
            or None,
            "baseAssortmentCode": of(row["base_assortment_id"], assortment),
            "localAssortmentCode": of(row["local_assortment_id"], assortment)} for row in rows(retail_stores)}
        held["warehouses"] = {row["number"]: {"name": row["name"], "companyNumber": company[row["company_id"]]}
                              for row in rows(warehouses)}
        held["ecomStores"] = {row["number"]: {
            "name": row["name"], "companyNumber": company[row["company_id"]], "released": row["released"],
            "baseAssortmentCode": of(row["base_assortment_id"], assortment),
            "localAssortmentCode": of(row["local_assortment_id"], assortment),
            "priceListCode": of(row["price_list_id"], price_list), "leadTimeDays": row["lead_time_days"],
            "paymentCaptureEnabled": row["payment_capture_enabled"], "defaultCustomerId": row["default_customer_id"],
            "servingWarehouseNumbers": []} for row in rows(ecom_stores)}
        for row in sorted(rows(ecom_store_warehouses), key=lambda row: row["priority"]):
            held["ecomStores"][ecom_store[row["ecom_store_id"]]]["servingWarehouseNumbers"].append(
                warehouse[row["warehouse_id"]])
        held["loyaltyPrograms"] = {row["code"]: {"name": row["name"], "companyNumber": of(row["company_id"], company),
                                                 "retailStoreNumbers": frozenset()} for row in rows(loyalty_programs)}
        for row in rows(loyalty_program_stores):
            entity = held["loyaltyPrograms"][program[row["loyalty_program_id"]]]
            entity["retailStoreNumbers"] |= {store[row["retail_store_id"]]}
        held["storeAssortmentLines"] = {(store[row["retail_store_id"]], sku[row["sku_id"]]): {
            "replenishmentType": row["replenishment_type"], "reorderPoint": decimal(row["reorder_point"]),
            "maximumInventory": decimal(row["maximum_inventory"]), "locked": row["locked"]}
            for row in rows(store_assortment_lines)}
        held["campaigns"] = {row["code"]: {
            "name": row["name"], "campaignType": row["campaign_type"], "validFrom": row["valid_from"].isoformat(),
            "validTo": row["valid_to"].isoformat(), "released": row["released"],
            "companyNumber": company[row["company_id"]], "loyaltyProgramCode": of(row["loyalty_program_id"], program),
            "skus": {}} for row in rows(campaigns)}
        for row in rows(campaign_skus):
            held["campaigns"][campaign[row["campaign_id"]]]["skus"][sku[row["sku_id"]]] = (
                decimal(row["campaign_price"]), row["loyalty_membership_required"])
        held["customers"] = {row["id"]: {
            "firstName": row["first_name"], "lastName": row["last_name"], "email": row["email"], "phone": row["phone"],
            "birthDate": row["birth_date"] and row["birth_date"].isoformat(),
            "deliveryAddress": _address(row["delivery_address"]), "invoiceAddress": _address(row["invoice_address"]),
            "loyaltyMemberships": {}} for row in rows(customers)}
        for row in rows(customer_loyalty_memberships):
            held["customers"][row["customer_id"]]["loyaltyMemberships"][program[row["loyalty_program_id"]]] = (
                row["member_number"], row["member_since"].isoformat())
    return held


PRODUCT_CODES = {"brandCode": "brand_id", "productCategoryCode": "product_category_id",
                 "mainProductGroupCode": "main_product_group_id", "subProductGroupCode": "sub_product_group_id",
                 "productConceptCode": "product_concept_id", "exclusivityLevelCode": "exclusivity_level_id",
                 "mainActivityCode": "main_activity_id"}
VISIT_ADDRESS = {"street": "street", "postCode": "post_code", "city": "city", "countryIsoCode": "country_iso_code"}


def _address(text: str | None) -> dict[str, Any] | None:
    return None if text is None else {name: value for name, value in json.loads(text).items() if value is not None}


# --- the rule, as this test reads ECOMMERCE.md ------------------------------------------------------------------

# Each top-level list: how an entry is keyed, and how each list it owns is held.
KEYS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "vatRates": lambda item: item["code"], "companies": lambda item: item["number"],
    "priceLists": lambda item: item["code"], "products": lambda item: item["number"],
    "assortments": lambda item: item["code"], "retailStores": lambda item: item["number"],
    "warehouses": lambda item: item["number"], "ecomStores": lambda item: item["number"],
    "loyaltyPrograms": lambda item: item["code"], "campaigns": lambda item: item["code"],
    "storeAssortmentLines": lambda item: (item["retailStoreNumber"], item["skuNumber"]),
    "customers": lambda item: item["id"].lower(),
}
KEY_FIELDS = {"code", "number", "id", "retailStoreNumber", "skuNumber"}
OWNED: dict[str, Callable[[Any], Any]] = {
    "prices": lambda given: {line["skuNumber"]: line["price"] for line in given},
    "lines": lambda given: {line["skuNumber"]: (line["replenishmentType"], line.get("reorderPoint"),
                                                line.get("maximumInventory")) for line in given},
    "images": lambda given: {image["sortOrder"]: (image["url"], image.get("altText")) for image in given},
    "dynamicAttributes": lambda given: {value["code"]: ("value", value["value"]) if "value" in value
                                        else ("optionCodes", tuple(value["optionCodes"])) for value in given},
    "servingWarehouseNumbers": list,
    "retailStoreNumbers": frozenset,
    "skus": lambda given: {line["skuNumber"]: (line["campaignPrice"], line["loyaltyProgramMembershipRequired"])
                           for line in given},  # a campaign's; a product's SKUs are entities of their own
    "loyaltyMemberships": lambda given: {membership["loyaltyProgramCode"]: (membership["memberNumber"],
                                                                            membership["memberSince"])
                                         for membership in given},
}
# What a new entity holds in the fields it is not given, and what null brings back, where that is not null.
DEFAULTS = {("ecomStores", "leadTimeDays"): 0, ("ecomStores", "paymentCaptureEnabled"): False,
            ("skus", "published"): False}
NEW = {"vatRates": ("rate",), "companies": ("name", "currencyIsoCode", "basePriceListCode", "freightVatRate"),
       "priceLists": ("name",), "assortments": ("kind", "name"), "warehouses": ("name", "companyNumber"),
       "products": ("name", "description", "released", *PRODUCT_CODES),
       "retailStores": ("name", "companyNumber", "released", "visitAddress", "baseAssortmentCode",
                        "localAssortmentCode"),
       "ecomStores": ("name", "companyNumber", "released", "baseAssortmentCode", "localAssortmentCode",
                      "priceListCode", "leadTimeDays", "paymentCaptureEnabled", "defaultCustomerId"),
       "loyaltyPrograms": ("name", "companyNumber"),
       "storeAssortmentLines": ("replenishmentType", "reorderPoint", "maximumInventory", "locked"),
       "campaigns": ("name", "campaignType", "validFrom", "validTo", "released", "companyNumber",
                     "loyaltyProgramCode"),
       "customers": ("firstName", "lastName", "email", "phone", "birthDate", "deliveryAddress", "invoiceAddress")}
NEW_OWNED = {"priceLists": {"prices": {}}, "products": {"images": {}, "dynamicAttributes": {}},
             "assortments": {"lines": {}}, "ecomStores": {"servingWarehouseNumbers": []},
             "loyaltyPrograms": {"retailStoreNumbers": frozenset()}, "campaigns": {"skus": {}},
             "customers": {"loyaltyMemberships": {}}}
REFERENCE_LISTS = {"brands": "brands", "productCategories": "product_categories", "productColors": "product_colors",
                   "sizes": "sizes", "unitOfMeasures": "unit_of_measures", "dynamicAttributes": "dynamic_attributes"}


def merged(kind: str, entity: dict[str, Any], item: dict[str, Any]) -> None:
    """One named entity's fields after the load: absent keeps, null clears (or restores a default), given sets."""
    for name, value in item.items():
        if name in KEY_FIELDS:
            continue
        if name in OWNED:
            entity[name] = OWNED[name](value)
        elif value is None:
            entity[name] = DEFAULTS.get((kind, name))
        elif name == "visitAddress":  # an address is given whole
            entity[name] = {field: text for field, text in value.items()} or None
        elif name == "defaultCustomerId":
            entity[name] = value.lower()
        else:
            entity[name] = value


def expected_after(before: Entities, document: dict[str, Any]) -> Entities:
    after = copy.deepcopy(before)
    for name, list_name in REFERENCE_LISTS.items():
        for item in document.get("referenceLists", {}).get(name, []):
            merged(list_name, after.setdefault(list_name, {}).setdefault(item["code"], {}),
                   {key: value for key, value in item.items() if key != "options"})
            if "options" in item:  # the attribute's options, given whole
                after["options"] = {code: option for code, option in after["options"].items()
                                    if option["attribute"] != item["code"]}
                after["options"] |= {option["code"]: {"name": option["name"], "sortOrder": option["sortOrder"],
                                                      "attribute": item["code"]} for option in item["options"]}
    for kind, key in KEYS.items():
        for item in document.get(kind, []):
            new = {name: DEFAULTS.get((kind, name)) for name in NEW.get(kind, ())} | copy.deepcopy(
                NEW_OWNED.get(kind, {}))
            entity = after[kind].setdefault(key(item), new)
            merged(kind, entity, {name: value for name, value in item.items()
                                  if not (kind == "products" and name == "skus")})
    new_sku = {name: DEFAULTS.get(("skus", name)) for name in SKU_FIELDS}
    for item in document.get("skus", []):
        merged("skus", after["skus"].setdefault(item["number"], dict(new_sku)), item)
    for product in document.get("products", []):
        if "skus" not in product:
            continue
        listed = {sku["number"] for sku in product["skus"]}
        for number, sku in after["skus"].items():  # left out of the list: no longer the product's
            if sku["product"] == product["number"] and number not in listed:
                sku["product"] = None
        for sku in product["skus"]:
            entity = after["skus"].setdefault(sku["number"], dict(new_sku))
            merged("skus", entity, sku)
            entity["product"] = product["number"]
    return after


# --- random partial documents over the full one ----------------------------------------------------------------

ABSENT = object()


def base_document(tenant_id: str) -> dict[str, Any]:
    """The catalogue document, with a retail store's own line for a SKU."""
    document = catalogue_document(tenant_id)
    document["storeAssortmentLines"] = [{"retailStoreNumber": "R1", "skuNumber": "P1-S", "replenishmentType": "AUTO",
                                         "reorderPoint": "2", "maximumInventory": "20", "locked": False}]
    del document["stock"]  # loaded in its own document: stock is another change's (see the docstring)
    return document


names = st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=12)
amounts = st.integers(0, 99_999).map(lambda cents: decimal(Decimal(cents) / 100))
days = st.dates(date(2000, 1, 1), date(2025, 12, 31)).map(date.isoformat)


@st.composite
def fields(draw: st.DrawFn, item: dict[str, Any], values: dict[str, st.SearchStrategy[Any]],
           clearable: set[str] = frozenset()) -> dict[str, Any]:
    """`item` (its key) with each field of `values` absent, null (when clearable) or drawn anew."""
    for name, strategy in values.items():
        choice = draw(st.sampled_from(["absent", "given", "null"] if name in clearable else ["absent", "given"]))
        if choice == "given":
            item[name] = draw(strategy)
        elif choice == "null":
            item[name] = None
    return item


def some(draw: st.DrawFn, held: list[Any]) -> list[Any]:
    """Some of the held entities (in a drawn order), each named once."""
    return draw(st.lists(st.sampled_from(held), unique=True, max_size=len(held))) if held else []


@st.composite
def partial_documents(draw: st.DrawFn, tenant_id: str) -> dict[str, Any]:
    base = base_document(tenant_id)
    sku_numbers = ["P1-S", "P1-M", "P2-S", "DP1"]
    reference = {name: [entry["code"] for entry in base["referenceLists"].get(name, [])] for name in REFERENCE_LISTS}
    customer_ids = [customer["id"] for customer in base["customers"]]
    document: dict[str, Any] = {}

    def include(name: str, items: list[dict[str, Any]]) -> None:
        if items:
            document[name] = items

    def code_of(name: str) -> st.SearchStrategy[str]:
        return st.sampled_from(reference[name])

    # Reference lists: names and each list's own field change; options are given whole (never one a product holds
    # left out: held attribute values would point nowhere); value types stay.
    lists: dict[str, Any] = {}
    for name, extra in (("brands", {}), ("productCategories", {}), ("unitOfMeasures", {}),
                        ("productColors", {"colorCode": st.from_regex(r"#[0-9A-F]{6}", fullmatch=True)}),
                        ("sizes", {"sortOrder": st.integers(0, 99)}), ("dynamicAttributes", {})):
        items = [draw(fields({"code": code}, {"name": names, **extra})) for code in some(draw, reference[name])]
        if name == "brands" and draw(st.booleans()):
            items.append({"code": "NEWBRAND", "name": draw(names)})
        for item in items:
            if item["code"] == "MATERIAL" and draw(st.booleans()):
                item["options"] = [{"code": code, "name": draw(names), "sortOrder": draw(st.integers(0, 9))}
                                   for code in ("WOOL", "COTTON", *(["LINEN"] if draw(st.booleans()) else []))]
        if items:
            lists[name] = items
    if lists:
        document["referenceLists"] = lists

    include("vatRates", [draw(fields({"code": code}, {"rate": amounts})) for code in some(draw, ["STD", "LOW"])])
    price_lists = [draw(fields({"code": code}, {"name": names, "prices": st.lists(
        st.fixed_dictionaries({"skuNumber": st.sampled_from(sku_numbers), "price": amounts}),
        max_size=4, unique_by=lambda line: line["skuNumber"])})) for code in some(draw, ["BASE", "WEB"])]
    include("priceLists", price_lists)
    companies_given = [draw(fields({"number": number}, {
        "name": names, "currencyIsoCode": st.sampled_from(["NOK", "SEK", "EUR"]),
        "basePriceListCode": st.sampled_from(["BASE", "WEB"]), "freightVatRate": amounts},
        clearable={"basePriceListCode", "freightVatRate"})) for number in some(draw, ["C1", "C2"])]
    if draw(st.booleans()):  # a new company: what creating one needs, and perhaps more
        companies_given.append(draw(fields({"number": "C3", "name": draw(names), "currencyIsoCode": "DKK"},
                                           {"freightVatRate": amounts})))
    include("companies", companies_given)
    include("skus", [draw(fields({"number": "DP1"}, {"name": names}))] if draw(st.booleans()) else [])

    sku_values = {"name": names, "gtin": st.sampled_from([VALID_GTIN_8, VALID_GTIN_12, VALID_GTIN_13]),
                  "colorCode": code_of("productColors"), "sizeCode": code_of("sizes"),
                  "unitOfMeasureCode": code_of("unitOfMeasures"), "vatRateCode": st.sampled_from(["STD", "LOW"]),
                  "published": st.booleans()}
    product_values = {"name": names, "description": names, "released": st.booleans(),
                      "brandCode": code_of("brands"), "productCategoryCode": code_of("productCategories"),
                      "images": st.lists(st.fixed_dictionaries(
                          {"url": names.map(lambda name: f"https://img.example/{name}.jpg"),
                           "sortOrder": st.integers(0, 9)}, optional={"altText": names}),
                          max_size=3, unique_by=lambda image: image["sortOrder"]),
                      "dynamicAttributes": st.lists(st.one_of(
                          st.fixed_dictionaries({"code": st.just("MATERIAL"), "optionCodes": st.lists(
                              st.sampled_from(["WOOL", "COTTON"]), min_size=1, max_size=2, unique=True)}),
                          st.fixed_dictionaries({"code": st.just("WASH"), "value": st.integers(20, 90).map(str)})),
                          max_size=2, unique_by=lambda value: value["code"])}
    clearable_product = {"description", "brandCode", "productCategoryCode"}
    products_given = []
    for number, own in some(draw, [("P1", ("P1-S", "P1-M")), ("P2", ("P2-S",))]):
        product = draw(fields({"number": number}, product_values, clearable_product))
        if draw(st.booleans()):  # its SKU list given whole: some of its SKUs, each partial; the rest leave it
            product["skus"] = [draw(fields({"number": sku}, sku_values, {"gtin", "colorCode", "sizeCode",
                                                                         "unitOfMeasureCode"}))
                               for sku in some(draw, list(own))]
        products_given.append(product)
    if draw(st.booleans()):  # a new product with a new SKU: what creating them needs, and perhaps more
        products_given.append(draw(fields(
            {"number": "P3", "name": draw(names), "released": draw(st.booleans()),
             "skus": [draw(fields({"number": "P3-S", "name": draw(names), "vatRateCode": "STD",
                                   "published": draw(st.booleans())}, {"gtin": sku_values["gtin"]}))]},
            {"description": names, "brandCode": code_of("brands")})))
    include("products", products_given)

    line = st.fixed_dictionaries({"skuNumber": st.sampled_from(sku_numbers),
                                  "replenishmentType": st.sampled_from(["AUTO", "MANUAL"])},
                                 optional={"reorderPoint": st.integers(0, 9).map(str),
                                           "maximumInventory": st.integers(10, 99).map(str)})
    include("assortments", [draw(fields({"code": code}, {"name": names, "lines": st.lists(
        line, max_size=4, unique_by=lambda line: line["skuNumber"])})) for code in some(draw, ["WEB", "OTHER"])])
    address = st.fixed_dictionaries({}, optional={"street": names, "postCode": st.from_regex(r"[0-9]{4}",
                                                                                            fullmatch=True),
                                                  "city": names, "countryIsoCode": st.sampled_from(["NO", "SE"])})
    include("retailStores", [draw(fields({"number": number}, {
        "name": names, "companyNumber": st.sampled_from(["C1", "C2"]), "released": st.booleans(),
        "visitAddress": address, "baseAssortmentCode": st.sampled_from(["WEB", "OTHER"])},
        {"visitAddress", "baseAssortmentCode"})) for number in some(draw, ["R1", "R2", "R3"])])
    warehouses_given = [draw(fields({"number": number}, {"name": names,
                                                         "companyNumber": st.sampled_from(["C1", "C2"])}))
                        for number in some(draw, ["W1", "W2"])]
    if draw(st.booleans()):
        warehouses_given.append({"number": "W3", "name": draw(names), "companyNumber": "C2"})
    include("warehouses", warehouses_given)
    include("ecomStores", [draw(fields({"number": number}, {
        "name": names, "companyNumber": st.sampled_from(["C1", "C2"]), "released": st.booleans(),
        "baseAssortmentCode": st.sampled_from(["WEB", "OTHER"]), "priceListCode": st.sampled_from(["BASE", "WEB"]),
        "servingWarehouseNumbers": st.lists(st.sampled_from(["W1", "W2"]), unique=True),
        "leadTimeDays": st.integers(0, 365), "paymentCaptureEnabled": st.booleans(),
        "defaultCustomerId": st.sampled_from(customer_ids)},
        {"baseAssortmentCode", "priceListCode", "leadTimeDays", "paymentCaptureEnabled", "defaultCustomerId"}))
        for number in some(draw, ["E1", "E2"])])
    include("loyaltyPrograms", [draw(fields({"code": "LP"}, {
        "name": names, "companyNumber": st.sampled_from(["C1", "C2"]),
        "retailStoreNumbers": st.lists(st.sampled_from(["R1", "R2", "R3"]), unique=True)},
        {"companyNumber"}))] if draw(st.booleans()) else [])
    store_lines = [draw(fields({"retailStoreNumber": "R1", "skuNumber": "P1-S"}, {
        "replenishmentType": st.sampled_from(["AUTO", "MANUAL"]), "reorderPoint": st.integers(0, 9).map(str),
        "maximumInventory": st.integers(21, 99).map(str), "locked": st.booleans()},
        {"reorderPoint", "maximumInventory"}))] if draw(st.booleans()) else []
    if draw(st.booleans()):  # a new line: what creating one needs, and perhaps its values
        store_lines.append(draw(fields({"retailStoreNumber": "R2", "skuNumber": "P2-S", "replenishmentType": "AUTO",
                                        "locked": draw(st.booleans())}, {"reorderPoint": st.just("1")})))
    include("storeAssortmentLines", store_lines)

    campaigns_given = []
    for code, program in some(draw, [("CAMP1", "LP"), ("CAMP2", None)]):
        campaign = draw(fields({"code": code}, {
            "name": names, "campaignType": st.sampled_from(["NORMAL", "THREE_FOR_TWO"]), "released": st.booleans(),
            "companyNumber": st.sampled_from(["C1", "C2"]),
            # Any drawn day keeps validFrom ≤ validTo, with the other held or drawn.
            "validFrom": st.dates(date(2026, 1, 1), date(2026, 6, 30)).map(date.isoformat),
            "validTo": st.dates(date(2026, 11, 1), date(2026, 12, 31)).map(date.isoformat),
            "loyaltyProgramCode": st.just("LP")}, {"loyaltyProgramCode"}))
        with_program = campaign.get("loyaltyProgramCode", program) is not None
        if draw(st.booleans()) or (program and "loyaltyProgramCode" in campaign and not with_program):
            # Given whole; membership only where the campaign keeps a program (else it must be cleared).
            campaign["skus"] = draw(st.lists(st.fixed_dictionaries({
                "skuNumber": st.sampled_from(sku_numbers), "campaignPrice": amounts,
                "loyaltyProgramMembershipRequired": st.booleans() if with_program else st.just(False)}),
                max_size=3, unique_by=lambda line: line["skuNumber"]))
        campaigns_given.append(campaign)
    include("campaigns", campaigns_given)

    # Each customer draws e-mails and phones from its own range, so no two can meet in the unique keys.
    def contact(number: int) -> dict[str, st.SearchStrategy[Any]]:
        return {"email": st.integers(0, 99).map(lambda n: f"c{number}.{n}@example.no"),
                "phone": st.integers(0, 999_999).map(lambda n: f"+479{number}{n:06d}")}

    delivery = st.fixed_dictionaries({}, optional={"name": names, "street": names, "city": names,
                                                   "countryIsoCode": st.just("NO"), "email": st.just("a@example.no")})
    customers_given = [draw(fields({"id": customer}, {
        "firstName": names, "lastName": names, **contact(number), "birthDate": days, "deliveryAddress": delivery,
        "invoiceAddress": st.fixed_dictionaries({"city": names}),
        "loyaltyMemberships": st.lists(st.fixed_dictionaries({
            "loyaltyProgramCode": st.just("LP"), "memberNumber": names, "memberSince": days}), max_size=1)},
        {"email", "phone", "birthDate", "deliveryAddress", "invoiceAddress"}))
        for number, customer in some(draw, list(enumerate(customer_ids, start=1)))]
    if draw(st.booleans()):
        customers_given.append(draw(fields({"id": customer_id(tenant_id, 3), "firstName": draw(names),
                                            "lastName": draw(names)}, contact(3))))
    include("customers", customers_given)
    return document


# --- the property -----------------------------------------------------------------------------------------------

@pytest.fixture
def full(engine: sa.Engine) -> Callable[[], str]:
    """Makes a fresh tenant holding the full document, and its id."""
    def make() -> str:
        tenant_id = create_tenant(engine, "partial loads", is_test=True)
        load_document(engine, tenant_id, base_document(tenant_id))
        return tenant_id
    return make


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_partial_document_changes_exactly_what_it_names(engine: sa.Engine, full: Callable[[], str],
                                                           data: st.DataObject) -> None:
    tenant_id = full()
    before = read_back(engine, tenant_id)
    document = data.draw(partial_documents(tenant_id), label="partial document")
    load_document(engine, tenant_id, document)
    assert read_back(engine, tenant_id) == expected_after(before, document)


def test_the_issue_s_example_keeps_what_a_product_entry_leaves_out(engine: sa.Engine, full: Callable[[], str]) -> None:
    """A product entry with only number, name and status keeps its description and brand (issue 22)."""
    tenant_id = full()
    load_document(engine, tenant_id, {"products": [{"number": "P1", "name": "Ullgenser II", "released": False}]})
    product = read_back(engine, tenant_id)["products"]["P1"]
    assert (product["name"], product["released"], product["description"], product["brandCode"]) \
        == ("Ullgenser II", False, "Varm genser", "NORDLYS")
    assert len(product["images"]) == 2 and product["dynamicAttributes"]
    load_document(engine, tenant_id, {"products": [{"number": "P1", "description": None, "images": []}]})
    product = read_back(engine, tenant_id)["products"]["P1"]
    assert (product["description"], product["brandCode"], product["images"]) == (None, "NORDLYS", {})
