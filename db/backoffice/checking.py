"""Checking a back-office document whole before anything is written: schema, duplicate keys, references, rules.

Every check reads defensively (malformed parts are the schema check's to report), so one run lists every problem.
References may name rows the document brings or rows the tenant already holds.
"""

import re
from collections.abc import Callable, Iterator
from datetime import date
from decimal import Decimal
from typing import Any

import jsonschema_rs
import sqlalchemy as sa
from jsonschema import Draft202012Validator, ValidationError

from contracts import backoffice_schema
from contracts.customers import e164_phone, email_problem
from contracts.formats import (
    DATE,
    DATE_SHAPE,
    DECIMAL,
    DECIMAL_SHAPE,
    KEY,
    TEXT,
    date_value,
    decimal_value,
    key_problem,
)
from db.backoffice.document import (
    OPTIONS_LIST,
    PRODUCT_REFERENCES,
    REFERENCE_LISTS,
    SKU_REFERENCES,
    DocumentError,
    Entry,
    Parts,
    entries,
    keys_of,
    nested,
    path,
    product_skus,
    reference_lists,
)
from db.schema import (
    assortments,
    campaign_skus,
    campaigns,
    companies,
    customers,
    ecom_stores,
    loyalty_programs,
    price_lists,
    products,
    reference_entries,
    retail_stores,
    skus,
    store_assortment_lines,
    vat_rates,
    warehouses,
)
from db.tenancy import across_tenants

_VALIDATOR = Draft202012Validator(backoffice_schema.schema())
# The same schema checked in Rust: 50x faster on a large valid document (20 ms against 1 s for the demo's), so
# it decides whether there is anything to report; jsonschema then says what, in the words the loader reports.
_GATE = jsonschema_rs.validator_for(backoffice_schema.schema())
# A format rule's own words instead of jsonschema's, which quote the whole pattern.
_PATTERN_PROBLEMS = {
    KEY.json_schema: key_problem,
    TEXT.json_schema: lambda text: "must not contain control characters.",
    DECIMAL.json_schema: lambda text: f"must be {DECIMAL_SHAPE}.",
    DATE.json_schema: lambda text: f"is not {DATE_SHAPE} of a real day.",
}
_LIST_NAMES = {*REFERENCE_LISTS.values(), OPTIONS_LIST}
_NULL = {"type": "null"}  # the branch that lets a field be cleared
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")
_BOOLEANS = ("true", "false")


def document_errors(conn: sa.Connection, tenant_id: str, document: Any) -> Iterator[DocumentError]:
    yield from schema_errors(document)
    yield from _duplicate_errors(document)
    held = _held_keys(conn, tenant_id)
    yield from _creation_errors(document, held)
    known = _known_keys(conn, tenant_id, document, held)
    yield from _reference_errors(document, known)
    yield from _rule_errors(document, known, _held_settings(conn, tenant_id, document))
    yield from _customer_errors(conn, tenant_id, document)


def schema_errors(document: Any) -> Iterator[DocumentError]:
    if _GATE.is_valid(document):
        return
    for error in _VALIDATOR.iter_errors(document):
        yield from _described(error)


def _described(error: ValidationError) -> Iterator[DocumentError]:
    """A schema error in the loader's words, at the path of the field at fault."""
    if error.validator == "anyOf" and _NULL in error.validator_value:
        # A field that may be cleared: it is not null, so what is wrong is what the other branch says.
        for branch_error in error.context or ():
            if error.validator_value[branch_error.relative_schema_path[0]] != _NULL:
                yield from _described(branch_error)
        return
    parts = tuple(error.absolute_path)
    # Point at the missing or unknown field itself rather than at the object holding it.
    if error.validator == "required":
        for name in error.validator_value:
            if name not in error.instance:
                yield DocumentError(path((*parts, name)), "required field is missing")
    elif error.validator == "additionalProperties":
        for name in sorted(set(error.instance) - set(error.schema.get("properties", {}))):
            yield DocumentError(path((*parts, name)), "unknown field")
    elif error.validator == "pattern" and error.validator_value in _PATTERN_PROBLEMS:
        problem = _PATTERN_PROBLEMS[error.validator_value](error.instance)
        yield DocumentError(path(parts), f"{error.instance!r} {problem}")
    elif error.validator == "oneOf":
        yield DocumentError(path(parts), "must hold either code and value, or code and optionCodes")
    else:
        yield DocumentError(path(parts), error.message)


# --- duplicate keys -------------------------------------------------------------------------------------------

def _keyed_lists(document: Any) -> Iterator[tuple[list[Entry], tuple[str, ...]]]:
    """Every list whose entries must differ in their key, with that key."""
    for name, key in (("companies", ("number",)), ("assortments", ("code",)), ("retailStores", ("number",)),
                      ("ecomStores", ("number",)), ("loyaltyPrograms", ("code",)), ("vatRates", ("code",)),
                      ("priceLists", ("code",)), ("products", ("number",)), ("warehouses", ("number",)),
                      ("campaigns", ("code",)), ("customers", ("id",)),
                      ("storeAssortmentLines", ("retailStoreNumber", "skuNumber")),
                      ("stock", ("locationNumber", "skuNumber"))):
        yield entries(document, name), key
    # SKUs with and without a product share one number space.
    yield entries(document, "skus") + product_skus(document), ("number",)
    for _, items in reference_lists(document):  # option codes are unique across attributes
        yield items, ("code",)
    for outer, inner, key in (("assortments", "lines", "skuNumber"), ("priceLists", "prices", "skuNumber"),
                              ("products", "images", "sortOrder"), ("products", "dynamicAttributes", "code"),
                              ("campaigns", "skus", "skuNumber"),
                              ("customers", "loyaltyMemberships", "loyaltyProgramCode")):
        for parts, item in entries(document, outer):
            yield entries(item, inner, parts), (key,)


def _duplicate_errors(document: Any) -> Iterator[DocumentError]:
    for items, key in _keyed_lists(document):
        first: dict[tuple[Any, ...], Parts] = {}
        for parts, item in items:
            values = tuple(item.get(name) for name in key)
            if not all(isinstance(value, str) or type(value) is int for value in values):
                continue
            if values in first:
                shown = ", ".join(str(value) for value in values)
                yield DocumentError(path((*parts, key[-1])), f"duplicate key {shown}; first at {path(first[values])}")
            else:
                first[values] = parts


# --- references -----------------------------------------------------------------------------------------------

def _references(document: Any) -> Iterator[tuple[Parts, Any, str]]:
    """Every reference in the document: where it is, the key it holds, and what that key must name."""
    for name in ("retailStores", "ecomStores", "warehouses", "campaigns", "loyaltyPrograms"):
        for parts, item in entries(document, name):
            yield (*parts, "companyNumber"), item.get("companyNumber"), "company"
    for name in ("retailStores", "ecomStores"):
        for parts, store in entries(document, name):
            yield (*parts, "baseAssortmentCode"), store.get("baseAssortmentCode"), "BASE assortment"
            yield (*parts, "localAssortmentCode"), store.get("localAssortmentCode"), "LOCAL assortment"
    for parts, store in entries(document, "ecomStores"):
        yield (*parts, "priceListCode"), store.get("priceListCode"), "price list"
        customer = store.get("defaultCustomerId")
        yield (*parts, "defaultCustomerId"), customer.lower() if isinstance(customer, str) else customer, "customer"
        numbers = store.get("servingWarehouseNumbers")
        for i, number in enumerate(numbers if isinstance(numbers, list) else []):
            yield (*parts, "servingWarehouseNumbers", i), number, "warehouse"
    for parts, company in entries(document, "companies"):
        yield (*parts, "basePriceListCode"), company.get("basePriceListCode"), "price list"
    for parts, line in (nested(document, "assortments", "lines") + nested(document, "priceLists", "prices")
                        + nested(document, "campaigns", "skus") + entries(document, "stock")):
        yield (*parts, "skuNumber"), line.get("skuNumber"), "SKU"
    for parts, line in entries(document, "storeAssortmentLines"):
        yield (*parts, "retailStoreNumber"), line.get("retailStoreNumber"), "retail store"
        yield (*parts, "skuNumber"), line.get("skuNumber"), "SKU"
    for parts, line in entries(document, "stock"):
        yield (*parts, "locationNumber"), line.get("locationNumber"), "warehouse or retail store"
    for parts, program in entries(document, "loyaltyPrograms"):
        numbers = program.get("retailStoreNumbers")
        for i, number in enumerate(numbers if isinstance(numbers, list) else []):
            yield (*parts, "retailStoreNumbers", i), number, "retail store"
    for parts, campaign in entries(document, "campaigns"):
        yield (*parts, "loyaltyProgramCode"), campaign.get("loyaltyProgramCode"), "loyalty program"
    for parts, membership in nested(document, "customers", "loyaltyMemberships"):
        yield (*parts, "loyaltyProgramCode"), membership.get("loyaltyProgramCode"), "loyalty program"
    for parts, product in entries(document, "products"):
        for name, (_, list_name) in PRODUCT_REFERENCES.items():
            yield (*parts, name), product.get(name), list_name
    for parts, sku in product_skus(document):
        for name, (_, list_name) in SKU_REFERENCES.items():
            yield (*parts, name), sku.get(name), list_name
        yield (*parts, "vatRateCode"), sku.get("vatRateCode"), "VAT rate"
    for parts, value in nested(document, "products", "dynamicAttributes"):
        yield (*parts, "code"), value.get("code"), "dynamic_attributes"


def _reference_errors(document: Any, known: dict[str, Any]) -> Iterator[DocumentError]:
    for parts, key, kind in _references(document):
        # Absent or non-string keys are the schema check's to report.
        if isinstance(key, str) and key not in known[kind]:
            what = f"{kind} entry" if kind in _LIST_NAMES else kind
            yield DocumentError(path(parts), f"{key!r} names no {what} in the document or the tenant")


# --- what the tenant holds, and what a new entity needs ---------------------------------------------------------

# Each kind of entity a document names: the entity's words, its key fields, its entries and its item schema (whose
# x-requiredToCreate lists what creating one needs).
_NAMED: tuple[tuple[str, tuple[str, ...], Callable[[Any], list[Entry]], tuple[str, ...]], ...] = (
    ("VAT rate", ("code",), lambda d: entries(d, "vatRates"), ("properties", "vatRates", "items")),
    ("company", ("number",), lambda d: entries(d, "companies"), ("properties", "companies", "items")),
    ("SKU", ("number",), lambda d: entries(d, "skus"), ("properties", "skus", "items")),
    ("SKU", ("number",), product_skus, ("properties", "products", "items", "properties", "skus", "items")),
    ("product", ("number",), lambda d: entries(d, "products"), ("properties", "products", "items")),
    ("price list", ("code",), lambda d: entries(d, "priceLists"), ("properties", "priceLists", "items")),
    ("assortment", ("code",), lambda d: entries(d, "assortments"), ("properties", "assortments", "items")),
    ("retail store", ("number",), lambda d: entries(d, "retailStores"), ("properties", "retailStores", "items")),
    ("warehouse", ("number",), lambda d: entries(d, "warehouses"), ("properties", "warehouses", "items")),
    ("eCom store", ("number",), lambda d: entries(d, "ecomStores"), ("properties", "ecomStores", "items")),
    ("loyalty program", ("code",), lambda d: entries(d, "loyaltyPrograms"),
     ("properties", "loyaltyPrograms", "items")),
    ("store assortment line", ("retailStoreNumber", "skuNumber"), lambda d: entries(d, "storeAssortmentLines"),
     ("properties", "storeAssortmentLines", "items")),
    ("campaign", ("code",), lambda d: entries(d, "campaigns"), ("properties", "campaigns", "items")),
    ("customer", ("id",), lambda d: entries(d, "customers"), ("properties", "customers", "items")),
    *((list_name, ("code",), lambda d, name=name: entries(_lists(d), name, ("referenceLists",)),
       ("properties", "referenceLists", "properties", name, "items")) for name, list_name in REFERENCE_LISTS.items()),
)


def _lists(document: Any) -> Any:
    return document.get("referenceLists") if isinstance(document, dict) else None


def _required_to_create(pointer: tuple[str, ...]) -> list[str]:
    node: Any = _VALIDATOR.schema
    for part in pointer:
        node = node[part]
    if "$ref" in node:
        node = _VALIDATOR.schema["$defs"][node["$ref"].removeprefix("#/$defs/")]
    return node["x-requiredToCreate"]


def _held_keys(conn: sa.Connection, tenant_id: str) -> dict[str, set[Any]]:
    """The keys of every entity the tenant holds, by kind (store assortment lines: store and SKU numbers)."""
    def held(column: sa.Column, *where: sa.ColumnElement[bool]) -> set[Any]:
        return set(conn.scalars(sa.select(column).where(column.table.c.tenant_id == tenant_id, *where)))

    keys = {kind: held(column) for kind, column in (
        ("VAT rate", vat_rates.c.code), ("company", companies.c.number), ("SKU", skus.c.number),
        ("product", products.c.number), ("price list", price_lists.c.code), ("assortment", assortments.c.code),
        ("retail store", retail_stores.c.number), ("warehouse", warehouses.c.number),
        ("eCom store", ecom_stores.c.number), ("loyalty program", loyalty_programs.c.code),
        ("campaign", campaigns.c.code), ("customer", customers.c.id))}
    keys["store assortment line"] = {tuple(row) for row in conn.execute(
        sa.select(retail_stores.c.number, skus.c.number).select_from(store_assortment_lines)
        .join(retail_stores, sa.and_(retail_stores.c.tenant_id == tenant_id,
                                     retail_stores.c.id == store_assortment_lines.c.retail_store_id))
        .join(skus, sa.and_(skus.c.tenant_id == tenant_id, skus.c.id == store_assortment_lines.c.sku_id))
        .where(store_assortment_lines.c.tenant_id == tenant_id))}
    for list_name in (*REFERENCE_LISTS.values(), OPTIONS_LIST):
        keys[list_name] = held(reference_entries.c.code, reference_entries.c.list_name == list_name)
    return keys


def _creation_errors(document: Any, held: dict[str, set[Any]]) -> Iterator[DocumentError]:
    """A named entity the tenant does not hold is created: it needs its x-requiredToCreate fields."""
    for kind, key, named, pointer in _NAMED:
        required = _required_to_create(pointer)
        for parts, item in named(document):
            values = tuple(item.get(name) for name in key)
            if not all(isinstance(value, str) for value in values):
                continue  # the schema check reports it
            held_key = values[0].lower() if kind == "customer" else values[0] if len(key) == 1 else values
            if held_key in held[kind]:
                continue
            shown = " ".join(values)
            for name in required:
                if name not in item:
                    yield DocumentError(path((*parts, name)),
                                        f"required to create {kind} {shown!r}, which the tenant does not hold")


def _known_keys(conn: sa.Connection, tenant_id: str, document: Any, held: dict[str, set[Any]]) -> dict[str, Any]:
    """The keys references may name: those in the document and those already held for the tenant."""
    def both(kind: str, name: str, key: str = "number") -> set[str]:
        return held[kind] | keys_of(entries(document, name), key)

    # The document's kind wins: loading it changes the held kind.
    kinds = dict(conn.execute(sa.select(assortments.c.code, assortments.c.kind)
                              .where(assortments.c.tenant_id == tenant_id)).all())
    kinds |= {item["code"]: item["kind"] for _, item in entries(document, "assortments")
              if isinstance(item.get("code"), str) and "kind" in item}
    warehouse_numbers, store_numbers = both("warehouse", "warehouses"), both("retail store", "retailStores")
    known: dict[str, Any] = {
        "company": both("company", "companies"),
        "SKU": held["SKU"] | keys_of(entries(document, "skus") + product_skus(document), "number"),
        "retail store": store_numbers,
        "warehouse": warehouse_numbers,
        "warehouse or retail store": warehouse_numbers | store_numbers,
        "BASE assortment": {code for code, kind in kinds.items() if kind == "BASE"},
        "LOCAL assortment": {code for code, kind in kinds.items() if kind == "LOCAL"},
        "price list": both("price list", "priceLists", "code"),
        "VAT rate": both("VAT rate", "vatRates", "code"),
        "loyalty program": both("loyalty program", "loyaltyPrograms", "code"),
        "customer": {value.lower() for value in both("customer", "customers", "id")},
    }
    for list_name, items in reference_lists(document):
        known[list_name] = held[list_name] | keys_of(items, "code")
    known["attribute types"], known["attribute options"] = _attributes(conn, tenant_id, document)
    return known


def _held_settings(conn: sa.Connection, tenant_id: str, document: Any) -> dict[str, dict[Any, sa.Row]]:
    """The held values the document's rules compare with what it sends (absent fields keep them): the named
    campaigns' dates, program and SKUs that require membership, and the named store lines' values."""
    codes = sorted(keys_of(entries(document, "campaigns"), "code"))
    required = (sa.select(sa.func.count()).select_from(campaign_skus)
                .where(campaign_skus.c.tenant_id == tenant_id, campaign_skus.c.campaign_id == campaigns.c.id,
                       campaign_skus.c.loyalty_membership_required).scalar_subquery())
    held_campaigns = {row.code: row for row in conn.execute(
        sa.select(campaigns.c.code, campaigns.c.valid_from, campaigns.c.valid_to, campaigns.c.loyalty_program_id,
                  required.label("requiring_membership"))
        .where(campaigns.c.tenant_id == tenant_id, campaigns.c.code.in_(codes)))}
    stores = sorted(keys_of(entries(document, "storeAssortmentLines"), "retailStoreNumber"))
    held_lines = {(row.store, row.sku): row for row in conn.execute(
        sa.select(retail_stores.c.number.label("store"), skus.c.number.label("sku"),
                  store_assortment_lines.c.reorder_point, store_assortment_lines.c.maximum_inventory)
        .join(retail_stores, sa.and_(retail_stores.c.tenant_id == tenant_id,
                                     retail_stores.c.id == store_assortment_lines.c.retail_store_id))
        .join(skus, sa.and_(skus.c.tenant_id == tenant_id, skus.c.id == store_assortment_lines.c.sku_id))
        .where(store_assortment_lines.c.tenant_id == tenant_id, retail_stores.c.number.in_(stores)))}
    return {"campaigns": held_campaigns, "storeAssortmentLines": held_lines}


def _attributes(conn: sa.Connection, tenant_id: str, document: Any) -> tuple[dict[str, str], dict[str, str]]:
    """Dynamic attribute code → value type, and option code → its attribute's code; the document's win."""
    attribute, option = reference_entries.alias("attribute"), reference_entries.alias("option")
    types = dict(conn.execute(sa.select(attribute.c.code, attribute.c.value_type).where(
        attribute.c.tenant_id == tenant_id, attribute.c.list_name == "dynamic_attributes")).all())
    owners = dict(conn.execute(
        sa.select(option.c.code, attribute.c.code)
        .join(attribute, sa.and_(attribute.c.tenant_id == tenant_id, attribute.c.id == option.c.dynamic_attribute_id))
        .where(option.c.tenant_id == tenant_id, option.c.list_name == OPTIONS_LIST)).all())
    for _, item in entries(_lists(document), "dynamicAttributes"):
        code = item.get("code")
        if isinstance(code, str):
            if "valueType" in item:
                types[code] = item["valueType"]
            owners.update(dict.fromkeys(keys_of(entries(item, "options"), "code"), code))
    return types, owners


# --- rules ----------------------------------------------------------------------------------------------------

def _decimal(value: Any) -> Decimal | None:
    return decimal_value(value) if isinstance(value, str) else None


def _day(value: Any) -> date | None:
    return date_value(value) if isinstance(value, str) else None


def gtin_check_digit(body: str) -> int:
    """GS1 check digit of a GTIN without it: weights 3 and 1 alternate from the rightmost digit."""
    total = sum(int(digit) * (3 if i % 2 == 0 else 1) for i, digit in enumerate(reversed(body)))
    return (10 - total % 10) % 10


def gtin_is_valid(gtin: str) -> bool:
    if not gtin.isascii() or not gtin.isdigit() or len(gtin) not in (8, 12, 13, 14):
        return False
    return gtin_check_digit(gtin[:-1]) == int(gtin[-1])


def _given_or_held(item: dict[str, Any], name: str, held: Any, read: Callable[[Any], Any]) -> Any:
    """What the field will hold after the load: the value given (null included), else the held one."""
    return read(item[name]) if name in item else held


def _rule_errors(document: Any, known: dict[str, Any],
                 settings: dict[str, dict[Any, sa.Row]]) -> Iterator[DocumentError]:
    held_lines = settings["storeAssortmentLines"]
    lines = [(parts, line, None) for parts, line in nested(document, "assortments", "lines")]
    lines += [(parts, line, held_lines.get((line.get("retailStoreNumber"), line.get("skuNumber"))))
              for parts, line in entries(document, "storeAssortmentLines")]
    for parts, line, held in lines:  # assortment lines come whole; a store's line keeps what it does not give
        low = _given_or_held(line, "reorderPoint", held and held.reorder_point, _decimal)
        high = _given_or_held(line, "maximumInventory", held and held.maximum_inventory, _decimal)
        if low is not None and high is not None and low >= high:
            yield DocumentError(path((*parts, "reorderPoint")),
                                f"reorderPoint {low} must be less than maximumInventory {high}")
    for parts, sku in product_skus(document):
        gtin = sku.get("gtin")
        if isinstance(gtin, str) and re.fullmatch(r"[0-9]{8}|[0-9]{12,14}", gtin) and not gtin_is_valid(gtin):
            yield DocumentError(path((*parts, "gtin")), f"{gtin!r} has a wrong check digit")
    yield from _campaign_errors(document, settings["campaigns"])
    yield from _attribute_errors(document, known)
    for parts, warehouse in entries(document, "warehouses"):
        if warehouse.get("number") in known["retail store"]:
            yield DocumentError(path((*parts, "number")),
                                f"{warehouse['number']!r} is a retail store's number; stock names locations by number")


def _campaign_errors(document: Any, held_campaigns: dict[Any, sa.Row]) -> Iterator[DocumentError]:
    for parts, campaign in entries(document, "campaigns"):
        held = held_campaigns.get(campaign.get("code"))
        start = _given_or_held(campaign, "validFrom", held and held.valid_from, _day)
        end = _given_or_held(campaign, "validTo", held and held.valid_to, _day)
        if start and end and start > end:
            yield DocumentError(path((*parts, "validTo" if "validTo" in campaign else "validFrom")),
                                f"validTo {end} is before validFrom {start}")
        if _given_or_held(campaign, "loyaltyProgramCode", held and held.loyalty_program_id, lambda code: code):
            continue
        if "skus" not in campaign and held and held.requiring_membership:
            yield DocumentError(path((*parts, "loyaltyProgramCode")), "the campaign's SKUs require membership of its "
                                "loyalty program: clear that with skus, or keep the program")
        for sku_parts, sku in entries(campaign, "skus", parts):
            if sku.get("loyaltyProgramMembershipRequired") is True:
                yield DocumentError(path((*sku_parts, "loyaltyProgramMembershipRequired")),
                                    "membership can only be required on a campaign with a loyaltyProgramCode")


def _attribute_errors(document: Any, known: dict[str, Any]) -> Iterator[DocumentError]:
    types, owners = known["attribute types"], known["attribute options"]
    for parts, attribute in entries(_lists(document), "dynamicAttributes", ("referenceLists",)):
        if "options" in attribute and types.get(attribute.get("code")) != "OPTION":
            yield DocumentError(path((*parts, "options")), "only an OPTION attribute has options")
    for parts, value in nested(document, "products", "dynamicAttributes"):
        code = value.get("code")
        if code not in types:
            continue  # unknown attributes are reported as references
        value_type = types[code]
        if value_type == "OPTION":
            if "value" in value:
                yield DocumentError(path((*parts, "value")), f"attribute {code!r} is OPTION: give optionCodes")
            codes = value.get("optionCodes")
            for i, option in enumerate(codes if isinstance(codes, list) else []):
                if isinstance(option, str) and owners.get(option) != code:
                    yield DocumentError(path((*parts, "optionCodes", i)),
                                        f"{option!r} names no option of attribute {code!r}")
        elif "optionCodes" in value:
            yield DocumentError(path((*parts, "optionCodes")), f"attribute {code!r} is {value_type}: give a value")
        elif isinstance(text := value.get("value"), str):
            if value_type == "NUMBER" and not _NUMBER.fullmatch(text):
                yield DocumentError(path((*parts, "value")), f"{text!r} is not a number such as \"12.5\"")
            elif value_type == "BOOLEAN" and text not in _BOOLEANS:
                yield DocumentError(path((*parts, "value")), f"{text!r} must be \"true\" or \"false\"")


# --- customers ------------------------------------------------------------------------------------------------

def phone_problem(phone: str) -> str | None:
    """The back office writes numbers as they are kept: the API's phone rule, in E.164 form already."""
    number = e164_phone(phone)
    if number is None:
        return "is not a valid phone number"
    return None if number == phone else "must be written in E.164 form"


def _customer_errors(conn: sa.Connection, tenant_id: str, document: Any) -> Iterator[DocumentError]:
    contacts: list[tuple[Parts, str, str, Any]] = []  # where, field, value, owning customer id or None
    for parts, customer in entries(document, "customers"):
        owner = customer.get("id").lower() if isinstance(customer.get("id"), str) else None
        contacts += [(parts, name, customer[name], owner) for name in ("email", "phone")
                     if isinstance(customer.get(name), str)]
        for address in ("deliveryAddress", "invoiceAddress"):
            held = customer.get(address)
            if isinstance(held, dict):
                contacts += [((*parts, address), name, held[name], None) for name in ("email", "phone")
                             if isinstance(held.get(name), str)]
    held = {(name, value): owner for owner, email_key, phone in conn.execute(
        sa.select(customers.c.id, customers.c.email_key, customers.c.phone).where(customers.c.tenant_id == tenant_id))
        for name, value in (("email", email_key), ("phone", phone)) if value is not None}
    named = {item["id"].lower() for _, item in entries(document, "customers") if isinstance(item.get("id"), str)}
    # A held customer the document names gives up its e-mail or phone only when the document sets that field.
    resetting = {(item["id"].lower(), name) for _, item in entries(document, "customers")
                 if isinstance(item.get("id"), str) for name in ("email", "phone") if name in item}
    # Customer ids are chosen by their creators and unique across tenants (the table's primary key).
    taken = set(conn.scalars(across_tenants(
        sa.select(customers.c.id).where(customers.c.id.in_(sorted(named)), customers.c.tenant_id != tenant_id),
        "customer ids a document chooses are unique across tenants")))
    for parts, customer in entries(document, "customers"):
        if isinstance(customer.get("id"), str) and customer["id"].lower() in taken:
            yield DocumentError(path((*parts, "id")), f"{customer['id']!r} is taken; choose another id")
    first: dict[tuple[str, str], tuple[Parts, str]] = {}
    for parts, name, value, owner in contacts:
        problem = email_problem(value) if name == "email" else phone_problem(value)
        if problem:
            yield DocumentError(path((*parts, name)), f"{value!r}: {problem}")
            continue
        if owner is None:
            continue  # an address's contact details need not be unique
        key = (name, value.lower() if name == "email" else value)
        holder = held.get(key)
        if key in first and first[key][1] != owner:
            yield DocumentError(path((*parts, name)), f"the {name} of {path(first[key][0])} too; it must be unique")
        # A held customer whose field the document sets gives up its value, or keeps it and clashes in the document.
        elif holder is not None and holder != owner and (holder, name) not in resetting:
            yield DocumentError(path((*parts, name)), f"customer {holder} already has this {name}")
        first.setdefault(key, (parts, owner))
