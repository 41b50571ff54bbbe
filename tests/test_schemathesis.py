"""Schemathesis over the live server: every operation of every scope (e-commerce, loyalty programs, demand
planning and the back office's admin API), with a valid token of its scope, answers no 5xx, refuses no valid example
(positive data acceptance, schemathesis' ST202) and answers nothing its OpenAPI document does not declare.

Operations are picked by their scope's tag, so routes added later are covered without touching this file. Each
gets a bounded, derandomized run (no shrinking) of valid examples, then of invalid ones (which must be refused
with a declared 4xx, never a 5xx): the same requests every run.

A valid example must be accepted (2xx, or 404/409 about what the server holds), so every rule of a request that
JSON Schema can state must be in the document. A few rules cannot be stated there: they depend on what the server
holds or hands out (a cursor it issued, a customer's e-mail taken by another), on today's date, or on how values
relate (`itemCount` is the length of `items`). `UNSTATABLE` names each of them, with how a valid example is brought
to keep it before it is sent; nothing else is changed.
"""

import time
import zlib
from collections.abc import Callable
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest
import schemathesis
import sqlalchemy as sa
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as examples
from hypothesis.errors import Unsatisfiable
from pydantic import BaseModel, Field
from quart import Blueprint, Response, request
from quart_schema import document_querystring, document_response
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from contracts.models import Error
from contracts.openapi import SCOPES
from db.backoffice.checking import gtin_check_digit
from db.backoffice.document import PRODUCT_REFERENCES, REFERENCE_LISTS, SKU_REFERENCES
from db.clients import update_client
from db.schema import (
    assortments,
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
from serving.demo import seed_demo_tenant
from serving.jsonio import json_response
from serving.protection import protect
from settings import Settings
from tests.conftest import LiveServer, bearer, client_of, get_token
from tests.probes import serving_with

EXAMPLES_PER_OPERATION = 15  # 49 operations × 2 modes × 2 backends: about a minute per backend on a quiet machine
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance, positive_data_acceptance]
Repair = Callable[[schemathesis.Case, dict[str, Any]], None]


# --- the rules JSON Schema cannot state, and how a valid example is brought to keep them -------------------------

def _stable(value: Any, choices: list[Any]) -> Any:
    """One of `choices` picked by the generated value: the same example always maps to the same choice."""
    return choices[zlib.crc32(repr(value).encode()) % len(choices)]


def _opaque_cursor(case: schemathesis.Case, world: dict[str, Any]) -> None:
    """A cursor is a value the server handed out with the previous page: no generated one can be valid."""
    case.query.pop("cursor", None)


def _one_store_filter(case: schemathesis.Case, world: dict[str, Any]) -> None:
    """retailStoreNumber or ecomStoreNumber, not both: query parameters are separate in OpenAPI, so no schema ties
    them."""
    _opaque_cursor(case, world)
    if "retailStoreNumber" in case.query:
        case.query.pop("ecomStoreNumber", None)


def _contact(value: str, kind: str) -> str:
    """A valid e-mail address or phone number for a generated one: email-validator's rules (reserved domains, ...)
    and phonenumbers' validity per country are beyond JSON Schema."""
    number = zlib.crc32(value.encode("utf-8", "surrogatepass"))
    return f"c{number}@example.no" if kind == "email" else f"+4791{number % 1_000_000:06d}"


def _valid_contacts(node: Any) -> None:
    """Every e-mail and phone of a customer body and its addresses made valid; days not after today (`birthDate`,
    `memberSince`: today's date is beyond JSON Schema)."""
    if isinstance(node, list):
        for item in node:
            _valid_contacts(item)
    elif isinstance(node, dict):
        for name, value in node.items():
            if name in ("email", "phone") and isinstance(value, str):
                node[name] = _contact(value, name)
            elif name in ("birthDate", "memberSince") and isinstance(value, str) and value > date.today().isoformat():
                node[name] = date.today().isoformat()
            else:
                _valid_contacts(value)


def _customer(case: schemathesis.Case, world: dict[str, Any]) -> None:
    """Contacts as above; a new customer (the generated id is new) needs its names; memberships name the tenant's
    program (what the tenant holds), once."""
    body = case.body
    _valid_contacts(body)
    body.setdefault("firstName", "Anna")
    body.setdefault("lastName", "Berg")
    if body.get("loyaltyMemberships"):
        program = world["loyaltyPrograms"][0]["id"]
        body["loyaltyMemberships"] = [{**body["loyaltyMemberships"][0], "loyaltyProgramId": program}]


def _addresses(case: schemathesis.Case, world: dict[str, Any]) -> None:
    _valid_contacts(case.body)


def _network_store(case: schemathesis.Case, world: dict[str, Any]) -> None:
    """The retail store must be a released store of the eCom store's company (what the tenant holds)."""
    case.body["retailStoreId"] = world["networkStore"]


def _order(case: schemathesis.Case, world: dict[str, Any]) -> None:
    _valid_contacts(case.body)


_BATCH_INTEGERS = ("batchIndex", "batchTotal", "itemCount")


def _batch(case: schemathesis.Case, world: dict[str, Any]) -> None:
    """An upload: the body is sent as it is (no gzip); JSON Schema calls 2.0 an integer, the upload checker wants
    2; `itemCount` is the number of items and `batchIndex` at most `batchTotal`; a forecast's horizon starts at most
    7 days ago and ends after its quantities; a store and SKU once per batch; a reorder point below its maximum."""
    case.headers.pop("content-encoding", None)
    body = case.body
    for name in _BATCH_INTEGERS:
        if isinstance(body.get(name), float):
            body[name] = int(body[name])
    if "batchIndex" in body:
        body["batchIndex"], body["batchTotal"] = sorted((body["batchIndex"], body["batchTotal"]))
    seen, items = set(), []
    for item in body["items"]:
        key = (item.get("retailStoreNumber"), item.get("ecomStoreNumber"), item["skuNumber"])
        if key not in seen:
            seen.add(key)
            items.append(item)
    for item in items:
        if "quantities" in item:
            start = date.today()
            item["horizonStartDate"] = start.isoformat()
            item["horizonEndDate"] = (start + timedelta(days=len(item["quantities"]) - 1)).isoformat()
        else:
            _reorder_below_maximum(item)
    body["items"], body["itemCount"] = items, len(items)


def _reorder_below_maximum(line: dict[str, Any]) -> None:
    if Decimal(line["reorderPoint"]) >= Decimal(line["maximumInventory"]):
        line["reorderPoint"] = "0"
        if not Decimal(line["maximumInventory"]):
            line["maximumInventory"] = "1"


class HeldKeys:
    """What a back-office document may name in the fuzzed tenant, by kind, each a list of keys."""

    def __init__(self, held: dict[str, Any]) -> None:
        self.held = held

    def __call__(self, kind: str, value: Any, clearable: bool = False) -> Any:
        """The held key a generated one stands for (null where the kind holds none and null is allowed)."""
        keys = self.held.get(kind) or []
        return _stable(value, keys) if keys else None if clearable else value


def _distinct(items: list[dict[str, Any]], key: Callable[[dict[str, Any]], Any]) -> list[dict[str, Any]]:
    """The first item of each key: a document names an entity once."""
    seen: set[Any] = set()
    return [item for item in items if not (key(item) in seen or seen.add(key(item)))]


def _backoffice(case: schemathesis.Case, world: dict[str, Any]) -> None:
    """A back-office document names what the tenant holds (entities, and the references between them), so every
    key is taken as standing for a held one; and it keeps the rules between values: a key once per list, a GTIN's
    check digit, a reorder point below its maximum, validFrom before validTo, membership only with a program, an
    attribute value of the attribute's type, options only on an OPTION attribute, valid and unique contacts, reserved
    stock within on hand."""
    now = world["held"]()
    held, document = HeldKeys(now), case.body
    lists = document.get("referenceLists", {})
    for name, list_name in REFERENCE_LISTS.items():
        if name in lists:
            lists[name] = _distinct([{**entry, "code": held(list_name, entry["code"])} for entry in lists[name]
                                     if now.get(list_name)], lambda entry: entry["code"])
    for attribute in lists.get("dynamicAttributes", []):
        attribute.pop("valueType", None)  # a held attribute keeps its type
        if now["attributeTypes"][attribute["code"]] != "OPTION":
            attribute.pop("options", None)
    options = [option for attribute in lists.get("dynamicAttributes", []) for option in attribute.get("options", [])]
    codes = [option["code"] for option in options]
    for attribute in lists.get("dynamicAttributes", []):
        if "options" in attribute:  # option codes are unique across the tenant's attributes
            attribute["options"] = [option for option in attribute["options"] if codes.count(option["code"]) == 1]
    for name, kind, key in (("vatRates", "vat", "code"), ("companies", "company", "number"),
                            ("priceLists", "priceList", "code"), ("assortments", "assortment", "code"),
                            ("retailStores", "retail", "number"), ("warehouses", "warehouse", "number"),
                            ("ecomStores", "ecom", "number"), ("loyaltyPrograms", "program", "code"),
                            ("campaigns", "campaign", "code"), ("customers", "customer", "id"),
                            ("products", "product", "number")):
        if name in document:
            document[name] = _distinct([{**item, key: held(kind, item[key])} for item in document[name]],
                                       lambda item, key=key: item[key])
    given = {attribute["code"]: [option["code"] for option in attribute["options"]]
             for attribute in lists.get("dynamicAttributes", []) if "options" in attribute}
    moved = {code for codes in given.values() for code in codes}  # an option given under another attribute moves
    options_after = {attribute: [code for code in codes if code not in moved]
                     for attribute, codes in now["options"].items()} | given
    skus = [*document.get("skus", []), *(sku for product in document.get("products", [])
                                        for sku in product.get("skus", []))]
    for sku in skus:
        sku["number"] = held("sku", sku["number"])
    # SKUs with and without a product share one number space: each SKU named once in the whole document.
    firsts = {id(sku) for sku in _distinct(skus, lambda sku: sku["number"])}
    if "skus" in document:
        document["skus"] = [sku for sku in document["skus"] if id(sku) in firsts]
    for product in document.get("products", []):
        for name, list_name in PRODUCT_CODES.items():
            if name in product:
                product[name] = held(list_name, product[name], clearable=True)
        if "images" in product:
            product["images"] = _distinct(product["images"], lambda image: image["sortOrder"])
        if "dynamicAttributes" in product:
            product["dynamicAttributes"] = _distinct([_attribute_value(value, now, options_after)
                                                      for value in product["dynamicAttributes"]
                                                      if now["attributeTypes"]],
                                                     lambda value: value["code"])
            product["dynamicAttributes"] = [value for value in product["dynamicAttributes"]
                                            if value.get("optionCodes") != []]
        if "skus" in product:
            product["skus"] = [sku for sku in product["skus"] if id(sku) in firsts]
            for sku in product["skus"]:
                for name, list_name in SKU_CODES.items():
                    if name in sku:
                        sku[name] = held(list_name, sku[name], clearable=True)
                if "vatRateCode" in sku:
                    sku["vatRateCode"] = held("vat", sku["vatRateCode"])
                if "gtin" in sku and sku["gtin"] is not None:
                    sku["gtin"] = sku["gtin"][:-1] + str(gtin_check_digit(sku["gtin"][:-1]))
    for price_list in document.get("priceLists", []):
        if "prices" in price_list:
            price_list["prices"] = _distinct([{**line, "skuNumber": held("sku", line["skuNumber"])}
                                              for line in price_list["prices"]], lambda line: line["skuNumber"])
    for company in document.get("companies", []):
        if "basePriceListCode" in company:
            company["basePriceListCode"] = held("priceList", company["basePriceListCode"], clearable=True)
    for assortment in document.get("assortments", []):
        assortment.pop("kind", None)  # a held assortment keeps its kind, which the stores' references rely on
        if "lines" in assortment:
            assortment["lines"] = _distinct([{**line, "skuNumber": held("sku", line["skuNumber"])}
                                             for line in assortment["lines"]], lambda line: line["skuNumber"])
            for line in assortment["lines"]:
                if "reorderPoint" in line and "maximumInventory" in line:
                    _reorder_below_maximum(line)
    for store in [*document.get("retailStores", []), *document.get("ecomStores", [])]:
        for name, kind in (("companyNumber", "company"), ("baseAssortmentCode", "BASE"),
                           ("localAssortmentCode", "LOCAL"), ("priceListCode", "priceList"),
                           ("defaultCustomerId", "customer")):
            if name in store:
                store[name] = held(kind, store[name], clearable=name != "companyNumber")
        if "servingWarehouseNumbers" in store:
            store["servingWarehouseNumbers"] = list(dict.fromkeys(
                held("warehouse", number) for number in store["servingWarehouseNumbers"]))
    for warehouse in document.get("warehouses", []):
        if "companyNumber" in warehouse:
            warehouse["companyNumber"] = held("company", warehouse["companyNumber"])
    for program in document.get("loyaltyPrograms", []):
        if "companyNumber" in program:
            program["companyNumber"] = held("company", program["companyNumber"], clearable=True)
        if "retailStoreNumbers" in program:
            program["retailStoreNumbers"] = list(dict.fromkeys(
                held("retail", number) for number in program["retailStoreNumbers"]))
    if "storeAssortmentLines" in document:
        for line in document["storeAssortmentLines"]:
            line["retailStoreNumber"], line["skuNumber"] = held("storeLine", (line["retailStoreNumber"],
                                                                              line["skuNumber"]))
            if "reorderPoint" in line or "maximumInventory" in line:  # both, so the held one cannot clash
                line["reorderPoint"], line["maximumInventory"] = "0", "1"
        document["storeAssortmentLines"] = _distinct(document["storeAssortmentLines"],
                                                     lambda line: (line["retailStoreNumber"], line["skuNumber"]))
    if "stock" in document:
        for level in document["stock"]:
            level["locationNumber"] = held("location", level["locationNumber"])
            level["skuNumber"] = held("sku", level["skuNumber"])
            if "reserved" in level and Decimal(level["reserved"]) > Decimal(level["onHand"]):
                level["reserved"] = level["onHand"]
        document["stock"] = _distinct(document["stock"], lambda level: (level["locationNumber"], level["skuNumber"]))
    for campaign in document.get("campaigns", []):
        _campaign(campaign, held)
    for customer in document.get("customers", []):
        for name in ("email", "phone"):
            if isinstance(customer.get(name), str):
                customer[name] = _contact(f"{customer['id']}:{customer[name]}", name)
        _valid_contacts({name: customer[name] for name in ("deliveryAddress", "invoiceAddress") if name in customer})
        if customer.get("loyaltyMemberships"):
            customer["loyaltyMemberships"] = _distinct([{**membership, "loyaltyProgramCode": held(
                "program", membership["loyaltyProgramCode"])} for membership in customer["loyaltyMemberships"]],
                lambda membership: membership["loyaltyProgramCode"])


def _campaign(campaign: dict[str, Any], held: HeldKeys) -> None:
    if "companyNumber" in campaign:
        campaign["companyNumber"] = held("company", campaign["companyNumber"])
    if campaign.get("loyaltyProgramCode") is not None:
        campaign["loyaltyProgramCode"] = held("program", campaign["loyaltyProgramCode"])
    elif "loyaltyProgramCode" in campaign and "skus" not in campaign:
        del campaign["loyaltyProgramCode"]  # held SKUs may require membership of the program kept
    days = sorted(campaign[name] for name in ("validFrom", "validTo") if name in campaign)
    if days:  # both, so the held one cannot clash
        campaign["validFrom"], campaign["validTo"] = days[0], days[-1]
    if "skus" in campaign:
        with_program = campaign.get("loyaltyProgramCode") is not None
        campaign["skus"] = _distinct([{**line, "skuNumber": held("sku", line["skuNumber"]),
                                       "loyaltyProgramMembershipRequired": with_program
                                       and line["loyaltyProgramMembershipRequired"]}
                                      for line in campaign["skus"]], lambda line: line["skuNumber"])


def _attribute_value(value: dict[str, Any], held: dict[str, Any], options: dict[str, list[str]]) -> dict[str, Any]:
    """A product's value of a held attribute, of that attribute's type (an option it has after the document)."""
    code = _stable(value["code"], sorted(held["attributeTypes"]))
    kind = held["attributeTypes"][code]
    if kind == "OPTION":
        return {"code": code, "optionCodes": options.get(code, [])[:1]}
    return {"code": code, "value": {"NUMBER": "1", "BOOLEAN": "true"}.get(kind, value.get("value", "x"))}


# The document's reference fields of products and their SKUs, each with the store's list name.
PRODUCT_CODES = {name: list_name for name, (_, list_name) in PRODUCT_REFERENCES.items()}
SKU_CODES = {name: list_name for name, (_, list_name) in SKU_REFERENCES.items()}

UNSTATABLE: dict[str, Repair] = {
    "GET /v1/tenants/{tenantId}/ecom_stores/{eComStoreId}/products": _opaque_cursor,
    "GET /v1/tenants/{tenantId}/demand_planning/sales_forecast_batches": _opaque_cursor,
    "GET /v1/tenants/{tenantId}/demand_planning/replenishment_parameter_batches": _opaque_cursor,
    "GET /v1/tenants/{tenantId}/demand_planning/replenishment_parameters": _opaque_cursor,
    "GET /v1/tenants/{tenantId}/demand_planning/sales_forecasts": _one_store_filter,
    "PUT /v1/tenants/{tenantId}/ecom_stores/{eComStoreId}/customers/{customerId}": _customer,
    "PUT /v1/tenants/{tenantId}/ecom_stores/{eComStoreId}/push-customer": _customer,
    "PUT /v1/tenants/{tenantId}/ecom_stores/{eComStoreId}/customers/{customerId}/addresses": _addresses,
    "POST /v1/tenants/{tenantId}/ecom_stores/{eComStoreId}/click_and_collect": _network_store,
    "POST /v1/tenants/{tenantId}/ecom_stores/{eComStoreId}/orders": _order,
    "PUT /v1/tenants/{tenantId}/demand_planning/sales_forecast_batches/{batchId}": _batch,
    "PUT /v1/tenants/{tenantId}/demand_planning/replenishment_parameter_batches/{batchId}": _batch,
    "POST /admin/v1/tenants/{tenantId}/backoffice": _backoffice,
}


@pytest.fixture(scope="module")
def fuzzed_world(engine: sa.Engine, server: LiveServer) -> dict[str, Any]:
    """A tenant of its own (the run writes: customers, events), whose clients the run cannot rate-limit out, with
    the keys it holds (for the rules that depend on them)."""
    world = seed_demo_tenant(engine, "schemathesis tenant", is_test=True)
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for client in world["clients"]:
            update_client(engine, world["id"], client["clientId"], rate_limit_per_minute=1_000_000)
            client["token"] = get_token(http, world, client)
    world["held"] = lambda: _held_keys(engine, world["id"])  # read anew: documents the run loads change them
    with engine.connect() as conn:
        world["networkStore"] = conn.scalar(sa.select(retail_stores.c.id).where(
            retail_stores.c.tenant_id == world["id"], retail_stores.c.released).order_by(retail_stores.c.number))
    return world


def _held_keys(engine: sa.Engine, tenant_id: str) -> dict[str, Any]:
    with engine.connect() as conn:
        def keys(column: sa.Column, *where: sa.ColumnElement[bool]) -> list[Any]:
            return sorted(conn.scalars(sa.select(column).where(column.table.c.tenant_id == tenant_id, *where)))

        kinds = dict(conn.execute(sa.select(assortments.c.code, assortments.c.kind)
                                  .where(assortments.c.tenant_id == tenant_id)).all())
        held = {"vat": keys(vat_rates.c.code), "company": keys(companies.c.number), "sku": keys(skus.c.number),
                "product": keys(products.c.number), "priceList": keys(price_lists.c.code),
                "assortment": sorted(kinds), "BASE": sorted(code for code, kind in kinds.items() if kind == "BASE"),
                "LOCAL": sorted(code for code, kind in kinds.items() if kind == "LOCAL"),
                "retail": keys(retail_stores.c.number), "warehouse": keys(warehouses.c.number),
                "ecom": keys(ecom_stores.c.number), "program": keys(loyalty_programs.c.code),
                "campaign": keys(campaigns.c.code), "customer": keys(customers.c.id)}
        held["location"] = held["retail"] + held["warehouse"]
        held["storeLine"] = sorted(tuple(row) for row in conn.execute(
            sa.select(retail_stores.c.number, skus.c.number).select_from(store_assortment_lines)
            .join(retail_stores, retail_stores.c.id == store_assortment_lines.c.retail_store_id)
            .join(skus, skus.c.id == store_assortment_lines.c.sku_id)
            .where(store_assortment_lines.c.tenant_id == tenant_id)).all())
        for list_name in REFERENCE_LISTS.values():
            held[list_name] = keys(reference_entries.c.code, reference_entries.c.list_name == list_name)
        attribute, option = reference_entries.alias("attribute"), reference_entries.alias("option")
        held["attributeTypes"] = dict(conn.execute(sa.select(attribute.c.code, attribute.c.value_type).where(
            attribute.c.tenant_id == tenant_id, attribute.c.list_name == "dynamic_attributes")).all())
        held["options"] = {}
        for code, owner in conn.execute(
                sa.select(option.c.code, attribute.c.code).join(attribute, sa.and_(
                    attribute.c.tenant_id == tenant_id, attribute.c.id == option.c.dynamic_attribute_id))
                .where(option.c.tenant_id == tenant_id).order_by(option.c.code)):
            held["options"].setdefault(owner, []).append(code)
    return held


def _fixed_path_parameters(world: dict[str, Any]) -> dict[str, str]:
    """The token's own tenant and resources: the run explores the operations, not the 403s."""
    return {"tenantId": world["id"], "eComStoreId": client_of(world, "ecom")["resource"],
            "loyaltyProgramId": client_of(world, "loyalty_programs")["resource"]}


def _failure(operation: Any, path_parameters: dict[str, str], token: str,
             mode: GenerationMode = GenerationMode.POSITIVE, world: dict[str, Any] | None = None) -> str | None:
    """What schemathesis found wrong with the operation (the first failing example's report), or None."""
    fixed = {name: value for name, value in path_parameters.items() if "{" + name + "}" in operation.path}
    cases = operation.as_strategy(mode, path_parameters=fixed, headers=bearer(token))
    if mode is GenerationMode.POSITIVE and (repair := UNSTATABLE.get(operation.label)):
        cases = cases.map(lambda case: repair(case, world or {}) or case)

    @examples(max_examples=EXAMPLES_PER_OPERATION, derandomize=True, database=None, deadline=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=cases)
    def exercise(case: schemathesis.Case) -> None:
        response = case.call(timeout=30)
        case.validate_response(response, checks=CHECKS)

    try:
        exercise()
    except Unsatisfiable:
        if mode is GenerationMode.NEGATIVE:
            return None  # the operation takes nothing that could be made invalid (its path is fixed)
        raise
    except (Exception, BaseExceptionGroup) as failure:  # schemathesis raises a group of its findings
        findings = "\n".join(map(str, getattr(failure, "exceptions", ())))
        return f"{operation.label} ({mode.value}):\n{failure}\n{findings}"
    return None


def test_every_operation_of_every_scope_holds_to_its_schema(server: LiveServer, fuzzed_world: dict[str, Any],
                                                            backend: str) -> None:
    schema = schemathesis.openapi.from_url(f"{server.url}/v1/openapi.json")
    scope_of_tag = {tag: scope for scope, tag in SCOPES.items()}
    path_parameters = _fixed_path_parameters(fuzzed_world)
    started, failures, ran = time.perf_counter(), [], []
    for result in schema.include(tag=list(scope_of_tag)).get_all_operations():
        operation = result.ok()
        scope = next(scope_of_tag[tag] for tag in operation.tags if tag in scope_of_tag)
        ran.append(scope)
        token = client_of(fuzzed_world, scope)["token"]
        failures += filter(None, (_failure(operation, path_parameters, token, mode, fuzzed_world)
                                  for mode in GenerationMode))
    print(f"\nschemathesis ({backend}): {len(ran)} operations × ≤{EXAMPLES_PER_OPERATION} valid and "
          f"≤{EXAMPLES_PER_OPERATION} invalid examples in {time.perf_counter() - started:.1f} s")
    assert set(ran) == set(SCOPES), "an operation of every scope"
    assert not failures, "\n\n".join(failures)


class Answer(BaseModel):
    count: int


class Count(BaseModel):
    count: int = Field(default=1, ge=0, le=1000)


def test_the_run_catches_a_5xx_a_refused_valid_request_and_a_body_that_breaks_its_schema(
        engine: sa.Engine, settings: Settings, fuzzed_world: dict[str, Any]) -> None:
    """The checks are not vacuous: an eCom route that fails, one that answers another shape than it declares, one
    that fails only on input it should refuse (the negative examples), and one that refuses input its document calls
    valid (positive data acceptance) are all reported."""
    probe = Blueprint("ecom_probe", __name__, url_prefix="/v1/tenants/<tenantId>/ecom_stores/<eComStoreId>/probe")
    protect(probe, "ecom", resource_arg="eComStoreId")

    @probe.get("/failing")
    @document_response(Answer, 200)
    async def failing(tenantId: str, eComStoreId: str) -> Response:
        raise RuntimeError("a bug")

    @probe.get("/parses_carelessly")
    @document_querystring(Count)
    @document_response(Answer, 200)
    async def parses_carelessly(tenantId: str, eComStoreId: str) -> Response:
        return json_response({"count": int(request.args.get("count", "1"))})

    @probe.get("/wrong_shape")
    @document_response(Answer, 200)
    async def wrong_shape(tenantId: str, eComStoreId: str) -> Response:
        return json_response({"count": "many"})

    @probe.get("/stricter_than_documented")
    @document_querystring(Count)
    @document_response(Answer, 200)
    @document_response(Error, 400)
    async def stricter_than_documented(tenantId: str, eComStoreId: str) -> Response:
        count = int(request.args.get("count", "1"))
        if count > 10:  # a rule the document does not state
            return json_response({"error": "INVALID_REQUEST", "message": "count is at most 10."}, 400)
        return json_response({"count": count})

    with serving_with(settings, engine, probe) as live:
        with httpx.Client(base_url=live.url, timeout=30) as http:
            token = get_token(http, fuzzed_world, client_of(fuzzed_world, "ecom"))
        schema = schemathesis.openapi.from_url(f"{live.url}/v1/openapi.json").include(path_regex="/probe/")
        found = {(result.ok().path.rsplit("/", 1)[1], mode): _failure(
                     result.ok(), _fixed_path_parameters(fuzzed_world), token, mode)
                 for result in schema.get_all_operations() for mode in GenerationMode}
    positive, negative = GenerationMode.POSITIVE, GenerationMode.NEGATIVE
    assert "Server error" in found["failing", positive]
    assert "Response violates schema" in found["wrong_shape", positive]
    assert found["parses_carelessly", positive] is None
    assert "Server error" in found["parses_carelessly", negative]
    assert "Schema-valid request rejected" in found["stricter_than_documented", positive]
