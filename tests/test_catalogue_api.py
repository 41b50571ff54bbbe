"""The e-commerce catalogue over real HTTP, on both backends: reference lists, products, inventory, campaigns,
retail stores, trigger_events, and the loyalty program; all limited to the calling eCom store's assortment."""

from datetime import datetime, timedelta
from typing import Any

import httpx
import jsonschema
import pytest
import sqlalchemy as sa
from pydantic import TypeAdapter
from quart_schema.validation import QUART_SCHEMA_RESPONSE_ATTRIBUTE

from contracts.events import INVENTORY_UPDATED, PRODUCT_UPDATED, REFERENCE_LISTS
from db.ids import new_id, utc_now
from db.schema import event_outbox, loyalty_programs, skus
from serving.demo import seed_demo_tenant
from serving.routes import ecom
from serving.routes import loyalty_programs as loyalty_routes
from tests.catalogue_builder import Builder, Catalogue, build_catalogue
from tests.conftest import bearer, client_of


@pytest.fixture(scope="module")
def scene(engine: sa.Engine) -> tuple[dict[str, Any], Catalogue]:
    """A tenant of its own with the scenario of catalogue_builder; read-only for the tests that use it."""
    world = seed_demo_tenant(engine, f"catalogue {new_id()}", is_test=False, shop=False)
    return world, build_catalogue(engine, world)


class Api:
    """Requests as one eCom store's client."""

    def __init__(self, http: httpx.Client, token: str, tenant_id: str, ecom_store_id: str) -> None:
        self.http, self.headers = http, bearer(token)
        self.prefix = f"/v1/tenants/{tenant_id}/ecom_stores/{ecom_store_id}"

    def get(self, path: str, **params: Any) -> httpx.Response:
        return self.http.get(self.prefix + path, params=params, headers=self.headers)

    def post(self, path: str) -> httpx.Response:
        return self.http.post(self.prefix + path, headers=self.headers)

    def ok(self, path: str, **params: Any) -> Any:
        response = self.get(path, **params)
        assert response.status_code == 200, response.text
        return response.json()


def _api(http: httpx.Client, cached_token, world: dict[str, Any], index: int) -> Api:
    client = client_of(world, "ecom", index=index)
    return Api(http, cached_token(world, client), world["id"], client["resource"])


def _scene_api(http: httpx.Client, cached_token, scene: tuple[dict[str, Any], Catalogue], index: int) -> Api:
    world, cat = scene
    api = _api(http, cached_token, world, index)
    assert api.prefix.endswith((cat.store_a, cat.store_b)[index])  # the demo's clients follow store numbers
    return api


@pytest.fixture
def store_a(http, cached_token, scene) -> Api:
    return _scene_api(http, cached_token, scene, 0)


@pytest.fixture
def store_b(http, cached_token, scene) -> Api:
    return _scene_api(http, cached_token, scene, 1)


# --- reference lists ------------------------------------------------------------------------------------


def test_reference_lists_have_their_shapes_in_code_order(store_a, scene) -> None:
    refs = scene[1].refs
    assert store_a.ok("/product_schema/brands")["items"] == [
        {"id": refs["brand_alfa"], "code": "ALFA", "name": "Alfa Wear"},
        {"id": refs["brand_zeta"], "code": "ZETA", "name": "Zeta Outdoor"}]
    assert store_a.ok("/product_schema/product_colors")["items"] == [
        {"id": refs["navy"], "code": "NAVY", "name": "Navy", "colorCode": "#1F3A5F"}]
    assert store_a.ok("/product_schema/sizes")["items"] == [
        {"id": refs["size_m"], "code": "M", "name": "Medium", "sortOrder": 20},
        {"id": refs["size_s"], "code": "S", "name": "Small", "sortOrder": 10}]
    assert store_a.ok("/product_schema/dynamic_attributes")["items"] == [
        {"id": refs["material"], "code": "MATERIAL", "name": "Material", "valueType": "TEXT"},
        {"id": refs["season"], "code": "SEASON", "name": "Season", "valueType": "OPTION"}]
    assert store_a.ok("/product_schema/dynamic_attributes_options")["items"] == [
        {"id": refs["autumn"], "code": "AUTUMN", "name": "Autumn", "dynamicAttributeId": refs["season"],
         "sortOrder": 1},
        {"id": refs["winter"], "code": "WINTER", "name": "Winter", "dynamicAttributeId": refs["season"],
         "sortOrder": 2}]
    assert store_a.ok("/product_schema/unit_of_measures")["items"] == [
        {"id": refs["pieces"], "code": "PCS", "name": "Pieces"}]


def test_every_reference_list_answers_and_an_unknown_one_is_404(store_a, store_b) -> None:
    for name in REFERENCE_LISTS:
        assert isinstance(store_a.ok(f"/product_schema/{name}")["items"], list), name
    # Lists are tenant-wide: the other eCom store sees the same.
    assert store_b.ok("/product_schema/brands") == store_a.ok("/product_schema/brands")
    response = store_a.get("/product_schema/colours")
    assert response.status_code == 404
    assert response.json()["error"] == "NOT_FOUND"


def test_reference_lists_belong_to_their_tenant(http, cached_token, shared_world) -> None:
    other = _api(http, cached_token, shared_world, 0)
    assert all(entry["code"] not in ("ALFA", "ZETA") for entry in other.ok("/product_schema/brands")["items"])


# --- product ids ----------------------------------------------------------------------------------------


def test_product_ids_are_the_published_visible_products(store_a, scene) -> None:
    cat = scene[1]
    published = sorted([cat.products["P1"], *cat.filler])
    assert store_a.ok("/products") == {"items": published, "nextCursor": None}
    assert store_a.ok("/products", includeUnpublished="false")["items"] == published
    # P2 (no published SKU) and P3 (not released) join; P4 (not in the assortment) never does.
    everything = sorted([*published, cat.products["P2"], cat.products["P3"]])
    assert store_a.ok("/products", includeUnpublished="true")["items"] == everything


def test_another_store_sees_its_own_assortment(store_b, scene) -> None:
    cat = scene[1]
    assert store_b.ok("/products")["items"] == sorted([cat.products["P1"], cat.products["P4"]])


@pytest.mark.parametrize("include_unpublished", ["false", "true"])
def test_paging_walk_equals_the_whole_list(store_a, include_unpublished) -> None:
    whole = store_a.ok("/products", includeUnpublished=include_unpublished)["items"]
    walked, cursor, pages = [], None, 0
    while True:
        params = {"includeUnpublished": include_unpublished, "limit": 3, **({"cursor": cursor} if cursor else {})}
        page = store_a.ok("/products", **params)
        assert len(page["items"]) <= 3
        walked += page["items"]
        pages += 1
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert walked == whole
    assert pages == -(-len(whole) // 3)  # no empty last page: the id after a full page is looked ahead


@pytest.mark.parametrize(("params", "path", "code"), [
    ({"includeUnpublished": "yes"}, "includeUnpublished", "INVALID_BOOLEAN"),
    ({"includeUnpublished": "True"}, "includeUnpublished", "INVALID_BOOLEAN"),
    ({"limit": "0"}, "limit", "OUT_OF_RANGE"),
    ({"limit": "5001"}, "limit", "OUT_OF_RANGE"),
    ({"limit": "ten"}, "limit", "OUT_OF_RANGE"),
    ({"cursor": "not-a-cursor"}, "cursor", "INVALID_CURSOR"),
    ({"cursor": "eyJmb28iOjF9"}, "cursor", "INVALID_CURSOR"),  # {"foo":1}: valid base64 JSON, not our key
])
def test_bad_query_parameters_are_400_with_their_path(store_a, params, path, code) -> None:
    response = store_a.get("/products", **params)
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "INVALID_REQUEST"
    [error] = body["details"]["errors"]
    assert (error["path"], error["code"]) == (path, code)
    assert error["message"]


# --- product record -------------------------------------------------------------------------------------


def test_product_record_shows_visible_skus_with_base_prices(store_a, scene) -> None:
    cat = scene[1]
    refs, s = cat.refs, cat.skus
    product = store_a.ok(f"/products/{cat.products['P1']}")
    modified = product.pop("modifiedTime")
    assert modified.endswith("Z")
    assert product == {
        "id": cat.products["P1"], "number": "P1", "name": "Product P1", "description": "A warm jacket",
        "status": "RELEASED", "published": True,
        "brandId": refs["brand_alfa"], "productCategoryId": refs["category"], "mainProductGroupId": None,
        "subProductGroupId": None, "productConceptId": None, "exclusivityLevelId": None, "mainActivityId": None,
        "dynamicAttributes": sorted([
            {"dynamicAttributeId": refs["material"], "value": "Wool"},
            {"dynamicAttributeId": refs["season"], "optionIds": [refs["autumn"], refs["winter"]]}],
            key=lambda value: value["dynamicAttributeId"]),
        "images": [{"url": "https://img.example/p1-front.jpg", "sortOrder": 1, "altText": "Front"},
                   {"url": "https://img.example/p1-back.jpg", "sortOrder": 2, "altText": None}],
        "currencyIsoCode": "NOK",
        # By number; P1-L is only in store B's assortment. Store A has no price list: the company's base prices.
        "skus": [
            {"id": s["P1-M"], "number": "P1-M", "gtin": None, "name": "SKU P1-M", "published": True,
             "productColorId": refs["navy"], "sizeId": refs["size_m"], "unitOfMeasureId": refs["pieces"],
             "price": "519.5", "vatRate": "25"},
            {"id": s["P1-S"], "number": "P1-S", "gtin": "07311234567890", "name": "SKU P1-S", "published": True,
             "productColorId": refs["navy"], "sizeId": refs["size_s"], "unitOfMeasureId": refs["pieces"],
             "price": "499", "vatRate": "25"},
            {"id": s["P1-XL"], "number": "P1-XL", "gtin": None, "name": "SKU P1-XL", "published": False,
             "productColorId": None, "sizeId": None, "unitOfMeasureId": None, "price": None, "vatRate": "15.5"},
        ],
    }


def test_store_price_list_wins_and_falls_back_to_base_per_sku(store_b, scene) -> None:
    s = scene[1].skus
    shown = {sku["id"]: sku for sku in store_b.ok(f"/products/{scene[1].products['P1']}")["skus"]}
    assert set(shown) == {s["P1-S"], s["P1-L"]}
    assert shown[s["P1-S"]]["price"] == "449.9"  # store B's own list
    assert shown[s["P1-L"]]["price"] == "539"  # not on B's list: the company's base price


def test_published_flag_of_products(store_a, scene) -> None:
    p = scene[1].products
    unpublished_skus_only, not_released = store_a.ok(f"/products/{p['P2']}"), store_a.ok(f"/products/{p['P3']}")
    assert (unpublished_skus_only["status"], unpublished_skus_only["published"]) == ("RELEASED", False)
    assert (not_released["status"], not_released["published"]) == ("NOT_RELEASED", False)
    assert not_released["skus"][0]["published"] is True


@pytest.mark.parametrize("product", ["P4", "unknown", "not-a-uuid", "trigger_events"])
def test_products_outside_the_assortment_are_404(store_a, scene, product) -> None:
    product_id = {"P4": scene[1].products["P4"], "unknown": new_id()}.get(product, product)
    response = store_a.get(f"/products/{product_id}")
    assert response.status_code == 404
    assert response.json()["error"] == "NOT_FOUND"


def test_a_product_id_in_another_case_is_the_same_product(store_a, scene) -> None:
    product_id = scene[1].products["P1"]
    assert store_a.ok(f"/products/{product_id.upper()}")["id"] == product_id


# --- inventory ------------------------------------------------------------------------------------------


def test_inventory_lists_serving_warehouses_then_released_stores(store_a, scene) -> None:
    cat = scene[1]
    loc, sku_id = cat.locations, cat.skus["P1-S"]
    by_id, by_number = store_a.ok(f"/skus/{sku_id}/inventory"), store_a.ok("/skus/P1-S/inventory")
    assert by_id == by_number
    modified = by_id.pop("modifiedTime")
    assert by_id == {
        "skuId": sku_id, "skuNumber": "P1-S",
        # The warehouses only: W1 7 + W2 0 (more reserved than on hand counts as none).
        "available": "7",
        "locations": [
            {"locationId": loc["W2"], "locationNumber": "W2", "locationName": "Warehouse W2",
             "locationType": "WAREHOUSE", "onHand": "2", "reserved": "5", "available": "0"},
            {"locationId": loc["W1"], "locationNumber": "W1", "locationName": "Warehouse W1",
             "locationType": "WAREHOUSE", "onHand": "10", "reserved": "3", "available": "7"},
            {"locationId": loc["1001"], "locationNumber": "1001", "locationName": "Fjordmarked Bergen Sentrum",
             "locationType": "RETAIL_STORE", "onHand": "4.5", "reserved": "1", "available": "3.5"},
        ],
    }
    # The latest change of a listed row (store 1001's, an hour ago), not W3's or store 1004's (now).
    an_hour_ago = utc_now() - timedelta(hours=1)
    assert an_hour_ago - timedelta(minutes=5) < datetime.fromisoformat(modified) < an_hour_ago + timedelta(minutes=5)


def test_inventory_without_stock_lists_the_serving_warehouses_empty(store_a, scene) -> None:
    inventory = store_a.ok("/skus/P1-M/inventory")
    assert [(row["locationNumber"], row["onHand"], row["available"]) for row in inventory["locations"]] == [
        ("W2", "0", "0"), ("W1", "0", "0")]
    assert (inventory["available"], inventory["modifiedTime"]) == ("0", None)


def test_inventory_of_another_store_uses_its_warehouses(store_b, scene) -> None:
    inventory = store_b.ok("/skus/P1-S/inventory")
    assert [row["locationNumber"] for row in inventory["locations"]] == ["W3", "1001"]
    assert inventory["available"] == "100"


@pytest.mark.parametrize("sku", ["P1-L", "P4-1", "ORPHAN-1", "ORPHAN", "NO-SUCH-SKU", "unknown-id"])
def test_inventory_outside_the_assortment_is_sku_not_found(store_a, scene, sku) -> None:
    """P1-L and P4-1 are only in store B's assortment; the orphan SKU (by number and by id) has no product."""
    value = {"ORPHAN": scene[1].skus["ORPHAN"], "unknown-id": new_id()}.get(sku, sku)
    response = store_a.get(f"/skus/{value}/inventory")
    assert response.status_code == 404
    body = response.json()
    assert body["error"] == "SKU_NOT_FOUND"
    assert value in body["message"]


# --- campaigns ------------------------------------------------------------------------------------------


def test_campaigns_by_date_with_skus_of_the_assortment(store_a, scene) -> None:
    cat = scene[1]
    c, s = cat.campaigns, cat.skus
    today = utc_now().date()
    program = {"id": cat.program, "name": scene[0]["loyaltyPrograms"][0]["name"]}
    listed = store_a.ok("/campaigns")["campaigns"]
    # Ended, unreleased and outside-only campaigns are not listed; by validFrom.
    assert [campaign["code"] for campaign in listed] == ["ENDS-TODAY", "ACTIVE", "PLANNED"]
    ends_today, active, planned = listed
    assert active == {
        "id": c["active"], "code": "ACTIVE", "name": "Campaign ACTIVE",
        "validFrom": (today - timedelta(days=1)).isoformat(), "validTo": (today + timedelta(days=5)).isoformat(),
        "currencyIsoCode": "NOK", "status": "ACTIVE", "campaignType": "NORMAL",
        # P4-1 is not in store A's assortment.
        "skus": [{"skuId": s["P1-S"], "campaignPrice": 399.9, "loyaltyProgramMembershipRequired": True}],
        "loyaltyProgram": program,
    }
    assert (planned["status"], planned["campaignType"]) == ("PLANNED", "THREE_FOR_TWO")
    assert planned["skus"] == [{"skuId": s["P1-M"], "campaignPrice": 519.5, "loyaltyProgramMembershipRequired": False}]
    assert planned["loyaltyProgram"] is None  # a program is named, but no SKU requires membership
    assert (ends_today["status"], ends_today["validTo"]) == ("ACTIVE", today.isoformat())


def test_campaigns_of_another_store(store_b, scene) -> None:
    s = scene[1].skus
    listed = {campaign["code"]: campaign for campaign in store_b.ok("/campaigns")["campaigns"]}
    assert sorted(listed) == ["ACTIVE", "OUTSIDE"]
    assert [sku["skuId"] for sku in listed["ACTIVE"]["skus"]] == [s["P1-S"], s["P4-1"]]  # by SKU number
    assert listed["OUTSIDE"]["skus"] == [{"skuId": s["P4-1"], "campaignPrice": 5.0,
                                          "loyaltyProgramMembershipRequired": False}]


# --- retail stores, protection --------------------------------------------------------------------------


def test_retail_stores_keep_their_shape(store_a) -> None:
    items = store_a.ok("/retail_stores")["items"]
    assert [store["number"] for store in items] == ["1001", "1002", "1003", "1004"]
    assert items[0] == {"id": items[0]["id"], "number": "1001", "name": "Fjordmarked Bergen Sentrum",
                        "status": "RELEASED", "visitAddress": {"street": "Torgallmenningen 8", "postCode": "5014",
                                                               "city": "Bergen", "countryIsoCode": "NO"}}
    assert items[3]["status"] == "NOT_RELEASED"


@pytest.mark.parametrize("path", ["/products", "/campaigns", "/product_schema/brands", "/skus/P1-S/inventory"])
def test_a_token_of_another_ecom_store_is_403(http, cached_token, scene, path) -> None:
    world, cat = scene
    intruder = Api(http, cached_token(world, client_of(world, "ecom", index=1)), world["id"], cat.store_a)
    assert intruder.get(path).status_code == 403
    assert intruder.post("/products/trigger_events").status_code == 403


# --- trigger_events -------------------------------------------------------------------------------------


def _outbox(engine: sa.Engine, tenant_id: str, subject: str) -> list[sa.Row]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(event_outbox).where(event_outbox.c.tenant_id == tenant_id,
                                                               event_outbox.c.subject == subject)))


def test_trigger_events_write_one_row_per_product_and_sku_for_this_store(engine, http, cached_token) -> None:
    world = seed_demo_tenant(engine, f"trigger {new_id()}", is_test=False, shop=False)
    cat = build_catalogue(engine, world)
    api = _api(http, cached_token, world, 0)
    started = utc_now()

    response = api.post("/products/trigger_events")
    assert response.status_code == 200, response.text
    expected_products = {cat.products["P1"], cat.products["P2"], cat.products["P3"], *cat.filler}
    assert response.json() == {"eventsTriggered": len(expected_products),
                               "message": f"ProductUpdated queued for {len(expected_products)} product(s) of the "
                                          "assortment."}
    rows = _outbox(engine, world["id"], PRODUCT_UPDATED)
    assert {row.entity_id for row in rows} == expected_products and len(rows) == len(expected_products)
    assert {row.ecom_store_id for row in rows} == {cat.store_a}
    assert all(row.metadata is None and row.published_time is None and row.datetime >= started for row in rows)
    assert len({row.event_id for row in rows}) == len(rows)

    response = api.post("/inventory/trigger_events")
    s = cat.skus
    expected_skus = {s["P1-S"], s["P1-M"], s["P1-XL"], s["P2-1"], s["P3-1"]} | _filler_skus(engine, cat)
    assert response.status_code == 200
    assert response.json()["eventsTriggered"] == len(expected_skus)
    rows = _outbox(engine, world["id"], INVENTORY_UPDATED)
    assert sorted(row.entity_id for row in rows) == sorted(expected_skus)
    assert {row.ecom_store_id for row in rows} == {cat.store_a}


def _filler_skus(engine: sa.Engine, cat: Catalogue) -> set[str]:
    with engine.connect() as conn:
        return set(conn.scalars(sa.select(skus.c.id).where(skus.c.product_id.in_(cat.filler))))


def test_trigger_events_of_an_empty_assortment_write_nothing(engine, http, cached_token) -> None:
    world = seed_demo_tenant(engine, f"no shop {new_id()}", is_test=False, shop=False)
    api = _api(http, cached_token, world, 0)
    for path, subject in (("/products/trigger_events", PRODUCT_UPDATED),
                          ("/inventory/trigger_events", INVENTORY_UPDATED)):
        response = api.post(path)
        assert response.status_code == 200
        assert response.json()["eventsTriggered"] == 0
        assert _outbox(engine, world["id"], subject) == []


# --- the loyalty program --------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["/", ""])
def test_loyalty_program_with_and_without_the_trailing_slash(http, cached_token, world, suffix) -> None:
    client = client_of(world, "loyalty_programs")
    response = http.get(f"/v1/tenants/{world['id']}/loyalty_programs/{client['resource']}{suffix}",
                        headers=bearer(cached_token(world, client)))
    assert response.status_code == 200, response.text
    # The demo program names no company: the currency of the tenant's first company by number.
    assert response.json() == {"id": client["resource"], "code": "FJORDVENN",
                               "name": world["loyaltyPrograms"][0]["name"], "currencyIsoCode": "NOK",
                               "retailStoreCount": 3}


def test_loyalty_program_counts_in_its_company_currency(engine, http, cached_token, world) -> None:
    client = client_of(world, "loyalty_programs")
    company = Builder(engine, world["id"]).company("20", "SEK")
    with engine.begin() as conn:
        conn.execute(loyalty_programs.update().where(loyalty_programs.c.tenant_id == world["id"],
                                                     loyalty_programs.c.id == client["resource"])
                     .values(company_id=company))
    response = http.get(f"/v1/tenants/{world['id']}/loyalty_programs/{client['resource']}/",
                        headers=bearer(cached_token(world, client)))
    assert response.json()["currencyIsoCode"] == "SEK"


def test_loyalty_program_route_is_protected(http, cached_token, world, shared_world) -> None:
    program_id = client_of(world, "loyalty_programs")["resource"]
    path = f"/v1/tenants/{world['id']}/loyalty_programs/{program_id}/"
    assert http.get(path).status_code == 401
    ecom_client = client_of(world, "ecom")
    assert http.get(path, headers=bearer(cached_token(world, ecom_client))).status_code == 403
    other = client_of(shared_world, "loyalty_programs")
    assert http.get(path, headers=bearer(cached_token(shared_world, other))).status_code == 403


# --- documented shapes ----------------------------------------------------------------------------------


def _documented_schema(view: Any, status: int = 200) -> dict[str, Any]:
    """The JSON Schema of the model the route declares with quart-schema's document_response."""
    model, _headers = getattr(view, QUART_SCHEMA_RESPONSE_ATTRIBUTE)[status]
    return TypeAdapter(model).json_schema(mode="serialization")


@pytest.mark.parametrize(("view", "path"), [
    (ecom.product_schema, "/product_schema/{list}"),
    (ecom.product_ids, "/products?includeUnpublished=true&limit=2"),
    (ecom.product, "/products/{P1}"),
    (ecom.product, "/products/{P3}"),
    (ecom.inventory, "/skus/P1-S/inventory"),
    (ecom.inventory, "/skus/P1-M/inventory"),
    (ecom.campaigns, "/campaigns"),
    (ecom.retail_stores, "/retail_stores"),
])
def test_responses_match_their_documented_models(store_a, scene, view, path) -> None:
    schema = _documented_schema(view)
    products = scene[1].products
    paths = ([path.replace("{list}", name) for name in REFERENCE_LISTS] if "{list}" in path
             else [path.replace("{P1}", products["P1"]).replace("{P3}", products["P3"])])
    for each in paths:
        response = store_a.http.get(store_a.prefix + each, headers=store_a.headers)
        assert response.status_code == 200, response.text
        jsonschema.validate(response.json(), schema)


def test_trigger_and_loyalty_answers_match_their_documented_models(http, cached_token, world) -> None:
    api = _api(http, cached_token, world, 0)
    jsonschema.validate(api.post("/inventory/trigger_events").json(), _documented_schema(ecom.trigger_inventory_events))
    client = client_of(world, "loyalty_programs")
    response = http.get(f"/v1/tenants/{world['id']}/loyalty_programs/{client['resource']}/",
                        headers=bearer(cached_token(world, client)))
    jsonschema.validate(response.json(), _documented_schema(loyalty_routes.program))
