"""Loading the back-office document: upserts by business key, idempotence, all-or-nothing checks, demo."""

from datetime import date
from decimal import Decimal
from typing import Any

import orjson
import pytest
import sqlalchemy as sa

from db.backoffice import DocumentInvalid, load_document
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
    stock_levels,
    store_assortment_lines,
    vat_rates,
    warehouses,
)
from db.tenants import create_tenant
from serving.demo_data import DEMO_RESOLUTION_EXAMPLES, demo_document
from tests.backoffice_documents import VALID_GTIN_8, VALID_GTIN_12, VALID_GTIN_13, catalogue_document, customer_id

TABLES = (companies, skus, assortments, assortment_lines, retail_stores, ecom_stores, loyalty_programs,
          loyalty_program_stores, store_assortment_lines)


@pytest.fixture
def tenant(engine: sa.Engine) -> str:
    return create_tenant(engine, "backoffice load test", is_test=True)


def small_document() -> dict[str, Any]:
    line = {"replenishmentType": "AUTO", "reorderPoint": "2", "maximumInventory": "10"}
    return {
        "companies": [{"number": "C1", "name": "Nordlys Mote AS", "currencyIsoCode": "NOK"}],
        "skus": [{"number": f"20000{i}", "name": f"Ullgenser str. {size}"} for i, size in enumerate("SML")],
        "assortments": [
            {"code": "B", "kind": "BASE", "name": "Basis",
             "lines": [{"skuNumber": "200000", **line}, {"skuNumber": "200001", **line}]},
            {"code": "L", "kind": "LOCAL", "name": "Nord",
             "lines": [{"skuNumber": "200002", "replenishmentType": "MANUAL"}]},
        ],
        "retailStores": [
            {"number": "1001", "name": "Nordlys Tromsø", "companyNumber": "C1", "released": True,
             "visitAddress": {"city": "Tromsø", "countryIsoCode": "NO"},
             "baseAssortmentCode": "B", "localAssortmentCode": "L"},
            {"number": "1002", "name": "Nordlys Bodø", "companyNumber": "C1", "released": False,
             "baseAssortmentCode": "B"},
        ],
        "ecomStores": [{"number": "2001", "name": "nordlys.no", "companyNumber": "C1", "released": True}],
        "loyaltyPrograms": [{"code": "NL", "name": "Nordlys Venn", "retailStoreNumbers": ["1001", "1002"]}],
        "storeAssortmentLines": [
            {"retailStoreNumber": "1001", "skuNumber": "200000", "replenishmentType": "AUTO",
             "reorderPoint": "3.5", "maximumInventory": "12", "locked": True},
        ],
    }


def snapshot(engine: sa.Engine, tenant_id: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the tenant, table by table, in a stable order."""
    with engine.connect() as conn:
        return {table.name: sorted(tuple(row) for row in conn.execute(
                    sa.select(table).where(table.c.tenant_id == tenant_id)))
                for table in TABLES}


# Rows per entity in small_document().
SIZES = {"companies": 1, "skus": 3, "assortments": 2, "assortmentLines": 3, "retailStores": 2,
         "ecomStores": 1, "loyaltyPrograms": 1, "loyaltyProgramStores": 2, "storeAssortmentLines": 1}


def all_counted_as(outcome: str) -> dict[str, dict[str, int]]:
    return {name: {"created": 0, "updated": 0, "unchanged": 0, outcome: size} for name, size in SIZES.items()}


def test_valid_document_loads(engine: sa.Engine, tenant: str) -> None:
    report = load_document(engine, tenant, small_document())

    assert report.changed
    assert report.counts == all_counted_as("created")
    assert report.deleted == {"assortmentLines": 0, "loyaltyProgramStores": 0}
    with engine.connect() as conn:
        store = conn.execute(sa.select(retail_stores).where(retail_stores.c.tenant_id == tenant,
                                                            retail_stores.c.number == "1001")).one()
        company_id = conn.scalar(sa.select(companies.c.id).where(companies.c.tenant_id == tenant))
        line = conn.execute(sa.select(store_assortment_lines)
                            .where(store_assortment_lines.c.tenant_id == tenant)).one()
        sku_ids = set(conn.scalars(sa.select(skus.c.id).where(skus.c.tenant_id == tenant)))
    assert len(store.id) == 36 and store.id[14] == "7"  # a UUIDv7
    assert (store.company_id, store.city, store.street, store.released) == (company_id, "Tromsø", None, True)
    assert store.base_assortment_id and store.local_assortment_id
    assert line.sku_id in sku_ids and line.retail_store_id == store.id
    assert (line.reorder_point, line.maximum_inventory, line.locked) == (Decimal("3.5"), Decimal("12"), True)
    assert line.modified_time is not None


def test_loading_twice_changes_nothing(engine: sa.Engine, tenant: str) -> None:
    load_document(engine, tenant, small_document())
    before = snapshot(engine, tenant)

    report = load_document(engine, tenant, small_document())

    assert not report.changed
    assert report.counts == all_counted_as("unchanged")
    assert snapshot(engine, tenant) == before


def test_changed_name_updates_exactly_one_row(engine: sa.Engine, tenant: str) -> None:
    load_document(engine, tenant, small_document())
    before = snapshot(engine, tenant)
    document = small_document()
    document["skus"][1]["name"] = "Ullgenser str. M, marineblå"

    report = load_document(engine, tenant, document)

    assert report.counts["skus"] == {"created": 0, "updated": 1, "unchanged": 2}
    assert all(count["updated"] == count["created"] == 0
               for name, count in report.counts.items() if name != "skus")
    after = snapshot(engine, tenant)
    assert {name for name in after if after[name] != before[name]} == {"skus"}
    assert set(after["skus"]) - set(before["skus"]) == {
        next((*row[:3], "Ullgenser str. M, marineblå", *row[4:]) for row in before["skus"] if row[2] == "200001")}


def test_lists_owned_whole_are_replaced_and_store_lines_kept(engine: sa.Engine, tenant: str) -> None:
    load_document(engine, tenant, small_document())
    before = snapshot(engine, tenant)
    document = small_document()
    base_lines = document["assortments"][0]["lines"]
    base_lines.pop(0)
    base_lines[0]["maximumInventory"] = "11"
    document["loyaltyPrograms"][0]["retailStoreNumbers"] = ["1002"]
    document["storeAssortmentLines"] = []

    report = load_document(engine, tenant, document)

    assert report.deleted == {"assortmentLines": 1, "loyaltyProgramStores": 1}
    assert report.counts["assortmentLines"] == {"created": 0, "updated": 1, "unchanged": 1}
    after = snapshot(engine, tenant)
    assert len(after["assortment_lines"]) == 2 and len(after["loyalty_program_stores"]) == 1
    assert after["store_assortment_lines"] == before["store_assortment_lines"]
    with engine.connect() as conn:
        times = dict(conn.execute(sa.select(assortment_lines.c.maximum_inventory,
                                            assortment_lines.c.modified_time)
                                  .where(assortment_lines.c.tenant_id == tenant)).all())
    assert times[Decimal("11")] > times[None]  # only the changed line got a new modified_time


def invalid_document() -> dict[str, Any]:
    document = small_document()
    document["skus"][2]["name"] = ""  # too short
    document["skus"].append({"number": "200000", "name": "Ullgenser str. XL"})  # duplicate number
    document["ecomStores"][0]["released"] = None  # may not be cleared
    document["ecomStores"][0]["colour"] = "blue"
    document["ecomStores"].append({"number": "2009", "name": "nordlys.dk"})  # new: needs companyNumber, released
    document["retailStores"][1]["companyNumber"] = "C9"
    document["retailStores"][1]["localAssortmentCode"] = "B"  # a BASE assortment
    document["assortments"][0]["lines"][1]["reorderPoint"] = "10"  # equals maximumInventory
    document["loyaltyPrograms"][0]["retailStoreNumbers"].append("1099")
    document["storeAssortmentLines"].append(dict(document["storeAssortmentLines"][0]))
    return document


def test_invalid_document_lists_every_problem_and_writes_nothing(engine: sa.Engine, tenant: str) -> None:
    load_document(engine, tenant, small_document())
    before = snapshot(engine, tenant)

    with pytest.raises(DocumentInvalid) as raised:
        load_document(engine, tenant, invalid_document())

    assert [error.path for error in raised.value.errors] == [
        "assortments[0].lines[1].reorderPoint",
        "ecomStores[0].colour",
        "ecomStores[0].released",
        "ecomStores[1].companyNumber",
        "ecomStores[1].released",
        "loyaltyPrograms[0].retailStoreNumbers[2]",
        "retailStores[1].companyNumber",
        "retailStores[1].localAssortmentCode",
        "skus[2].name",
        "skus[3].number",
        "storeAssortmentLines[1].skuNumber",
    ]
    messages = {error.path: error.message for error in raised.value.errors}
    assert "'C9' names no company" in messages["retailStores[1].companyNumber"]
    assert "'B' names no LOCAL assortment" in messages["retailStores[1].localAssortmentCode"]
    assert "first at skus[0]" in messages["skus[3].number"]
    assert messages["ecomStores[0].released"] == "None is not of type 'boolean'"
    assert messages["ecomStores[1].released"] == "required to create eCom store '2009', which the tenant does not hold"
    assert snapshot(engine, tenant) == before


def test_format_rules_are_the_uploads(engine: sa.Engine, tenant: str) -> None:
    """Decimals may have leading zeros; keys may not have white space at an end or a control character anywhere,
    and no free text may hold a control character (PostgreSQL cannot store a NUL)."""
    document = small_document()
    document["storeAssortmentLines"][0] |= {"reorderPoint": "003.50", "maximumInventory": "0012"}
    load_document(engine, tenant, document)
    with engine.connect() as conn:
        line = store_assortment_lines.c
        assert conn.execute(sa.select(line.reorder_point, line.maximum_inventory)
                            .where(line.tenant_id == tenant)).one() == (Decimal("3.5"), 12)
    before = snapshot(engine, tenant)
    broken = small_document()
    broken["skus"][0]["number"] = "200000 "
    broken["skus"][1]["number"] = "2000\x0001"
    broken["companies"][0]["name"] = "Nordlys\x00"
    broken["retailStores"][0]["visitAddress"]["city"] = "Troms\nø"
    with pytest.raises(DocumentInvalid) as raised:
        load_document(engine, tenant, broken)
    assert [error.path for error in raised.value.errors if "names no" not in error.message] == [
        "companies[0].name", "retailStores[0].visitAddress.city", "skus[0].number", "skus[1].number"]
    assert snapshot(engine, tenant) == before


def test_references_may_name_rows_already_held(engine: sa.Engine, tenant: str) -> None:
    load_document(engine, tenant, small_document())
    later = {"retailStores": [{"number": "1003", "name": "Nordlys Alta", "companyNumber": "C1",
                               "released": True, "baseAssortmentCode": "B"}],
             "storeAssortmentLines": [{"retailStoreNumber": "1003", "skuNumber": "200001",
                                       "replenishmentType": "MANUAL", "locked": False}]}

    report = load_document(engine, tenant, later)

    assert report.counts["retailStores"]["created"] == report.counts["storeAssortmentLines"]["created"] == 1
    assert len(snapshot(engine, tenant)["retail_stores"]) == 3


def test_root_problems_use_the_root_path(engine: sa.Engine, tenant: str) -> None:
    with pytest.raises(DocumentInvalid) as raised:
        load_document(engine, tenant, {"skus": "none", "stores": []})
    assert [(error.path, error.message) for error in raised.value.errors] == [
        ("skus", "'none' is not of type 'array'"), ("stores", "unknown field")]
    with pytest.raises(DocumentInvalid) as raised:
        load_document(engine, tenant, [])  # type: ignore[arg-type]
    assert [error.path for error in raised.value.errors] == ["$"]


def test_tenants_are_isolated(engine: sa.Engine) -> None:
    first = create_tenant(engine, "backoffice tenant A", is_test=True)
    second = create_tenant(engine, "backoffice tenant B", is_test=True)

    reports = [load_document(engine, tenant, small_document()) for tenant in (first, second)]

    assert reports[0].counts == reports[1].counts
    one, two = snapshot(engine, first), snapshot(engine, second)
    for table in TABLES:
        assert len(one[table.name]) == len(two[table.name]) > 0
        if "id" in table.c:
            assert not {row[0] for row in one[table.name]} & {row[0] for row in two[table.name]}


# --- demo data ---------------------------------------------------------------------------------------

@pytest.fixture
def demo_tenant(engine: sa.Engine, tenant: str) -> str:
    load_document(engine, tenant, demo_document("test"))
    return tenant


def test_demo_document_loads_and_is_labelled(engine: sa.Engine, tenant: str) -> None:
    report = load_document(engine, tenant, demo_document("test"))

    assert report.counts["skus"]["created"] >= 50
    assert demo_document("demo") != demo_document("test") == demo_document("test")
    with engine.connect() as conn:
        assert "test" in conn.scalar(sa.select(companies.c.name).where(companies.c.tenant_id == tenant))
    assert not load_document(engine, tenant, demo_document("test")).changed


def test_demo_has_unreleased_stores_and_partial_loyalty(engine: sa.Engine, demo_tenant: str) -> None:
    with engine.connect() as conn:
        retail = dict(conn.execute(sa.select(retail_stores.c.id, retail_stores.c.released)
                                   .where(retail_stores.c.tenant_id == demo_tenant)).all())
        ecom = list(conn.scalars(sa.select(ecom_stores.c.released)
                                 .where(ecom_stores.c.tenant_id == demo_tenant)))
        members = set(conn.scalars(sa.select(loyalty_program_stores.c.retail_store_id)
                                   .where(loyalty_program_stores.c.tenant_id == demo_tenant)))
        company_count = conn.scalar(sa.select(sa.func.count()).where(companies.c.tenant_id == demo_tenant))
    assert company_count == 1
    assert len(retail) >= 3 and False in retail.values() and True in retail.values()
    assert len(ecom) >= 2 and False in ecom and True in ecom
    assert members and members < set(retail)


def store_assortments(conn: sa.Connection, tenant_id: str) -> dict[str, set[str]]:
    """SKU numbers in each retail store's assortment (its base and local assortment lines)."""
    query = (sa.select(retail_stores.c.number, skus.c.number)
             .join(assortment_lines, assortment_lines.c.assortment_id.in_(
                 [retail_stores.c.base_assortment_id, retail_stores.c.local_assortment_id]))
             .join(skus, skus.c.id == assortment_lines.c.sku_id)
             .where(retail_stores.c.tenant_id == tenant_id))
    result: dict[str, set[str]] = {}
    for store, sku in conn.execute(query):
        result.setdefault(store, set()).add(sku)
    return result


def resolution_sources(conn: sa.Connection, tenant_id: str) -> dict[tuple[str, str], str]:
    """Where each (store, SKU) of the stores' assortments takes its replenishment values from."""
    keys = sa.select(retail_stores.c.number, skus.c.number).where(retail_stores.c.tenant_id == tenant_id)
    store_specific = {tuple(row) for row in conn.execute(
        keys.join(store_assortment_lines, store_assortment_lines.c.retail_store_id == retail_stores.c.id)
        .join(skus, skus.c.id == store_assortment_lines.c.sku_id))}
    local = {tuple(row) for row in conn.execute(
        keys.join(assortment_lines, assortment_lines.c.assortment_id == retail_stores.c.local_assortment_id)
        .join(skus, skus.c.id == assortment_lines.c.sku_id))}
    return {(store, sku): "RETAIL_STORE_SPECIFIC" if (store, sku) in store_specific
            else "LOCAL_ASSORTMENT" if (store, sku) in local else "BASE_ASSORTMENT"
            for store, numbers in store_assortments(conn, tenant_id).items() for sku in numbers}


def test_demo_assortments_differ_between_stores(engine: sa.Engine, demo_tenant: str) -> None:
    with engine.connect() as conn:
        by_store = store_assortments(conn, demo_tenant)
    assert any(by_store[one] - by_store[other] for one in by_store for other in by_store)


def test_demo_has_manual_and_locked_lines(engine: sa.Engine, demo_tenant: str) -> None:
    with engine.connect() as conn:
        types = set(conn.scalars(sa.select(assortment_lines.c.replenishment_type)
                                 .where(assortment_lines.c.tenant_id == demo_tenant)))
        locked = list(conn.scalars(sa.select(store_assortment_lines.c.locked)
                                   .where(store_assortment_lines.c.tenant_id == demo_tenant)))
    assert types == {"AUTO", "MANUAL"}
    assert True in locked and False in locked


def test_demo_values_come_from_each_source(engine: sa.Engine, demo_tenant: str) -> None:
    with engine.connect() as conn:
        sources = resolution_sources(conn, demo_tenant)
    assert set(sources.values()) == {"RETAIL_STORE_SPECIFIC", "LOCAL_ASSORTMENT", "BASE_ASSORTMENT"}
    assert {key: sources[key] for key in DEMO_RESOLUTION_EXAMPLES} == DEMO_RESOLUTION_EXAMPLES


# --- the e-commerce model -------------------------------------------------------------------------------

ALL_TABLES = (*TABLES, reference_entries, vat_rates, price_lists, prices, products, product_images,
              product_attribute_values, warehouses, stock_levels, ecom_store_warehouses, campaigns, campaign_skus,
              customers, customer_loyalty_memberships)


def full_snapshot(engine: sa.Engine, tenant_id: str) -> dict[str, list[tuple[Any, ...]]]:
    with engine.connect() as conn:
        return {table.name: sorted(tuple(row) for row in conn.execute(
                    sa.select(table).where(table.c.tenant_id == tenant_id)))
                for table in ALL_TABLES}


def one(conn: sa.Connection, table: sa.Table, tenant_id: str, **where: Any) -> sa.Row:
    return conn.execute(sa.select(table).where(table.c.tenant_id == tenant_id,
                                               *(table.c[name] == value for name, value in where.items()))).one()


def test_the_whole_model_loads(engine: sa.Engine, tenant: str) -> None:
    report = load_document(engine, tenant, catalogue_document(tenant))

    assert report.counts["productSkus"]["created"] == 3 and report.counts["skus"]["created"] == 1
    assert report.counts["dynamicAttributeOptions"]["created"] == 2
    with engine.connect() as conn:
        navy = one(conn, reference_entries, tenant, list_name="product_colors", code="NAVY")
        material = one(conn, reference_entries, tenant, list_name="dynamic_attributes", code="MATERIAL")
        wool = one(conn, reference_entries, tenant, list_name="dynamic_attributes_options", code="WOOL")
        small = one(conn, reference_entries, tenant, list_name="sizes", code="S")
        assert (navy.color_code, small.sort_order, material.value_type) == ("#1F3A5F", 1, "OPTION")
        assert (wool.dynamic_attribute_id, wool.sort_order) == (material.id, 1)

        product = one(conn, products, tenant, number="P1")
        brand = one(conn, reference_entries, tenant, list_name="brands", code="NORDLYS")
        assert (product.brand_id, product.description, product.released) == (brand.id, "Varm genser", True)
        assert product.main_activity_id is None
        sku = one(conn, skus, tenant, number="P1-S")
        standard = one(conn, vat_rates, tenant, code="STD")
        assert (sku.product_id, sku.gtin, sku.product_color_id, sku.size_id, sku.vat_rate_id, sku.published) == (
            product.id, VALID_GTIN_13, navy.id, small.id, standard.id, True)
        assert standard.rate == Decimal("25")
        assert one(conn, skus, tenant, number="DP1").product_id is None
        images = conn.execute(sa.select(product_images.c.sort_order, product_images.c.url, product_images.c.alt_text)
                              .where(product_images.c.product_id == product.id)
                              .order_by(product_images.c.sort_order)).all()
        assert images == [(1, "https://img.example/p1-a.jpg", "Forfra"), (2, "https://img.example/p1-b.jpg", None)]
        values = dict(conn.execute(sa.select(product_attribute_values.c.dynamic_attribute_id,
                                             sa.func.coalesce(product_attribute_values.c.value,
                                                              product_attribute_values.c.option_ids))
                                   .where(product_attribute_values.c.product_id == product.id)).all())
        assert values[material.id] == f'["{wool.id}"]' and "30" in values.values()

        base, web = one(conn, price_lists, tenant, code="BASE"), one(conn, price_lists, tenant, code="WEB")
        company = one(conn, companies, tenant, number="C1")
        assert (company.base_price_list_id, company.freight_vat_rate) == (base.id, Decimal("25"))
        assert one(conn, prices, tenant, price_list_id=base.id, sku_id=one(conn, skus, tenant, number="P2-S").id
                   ).price == Decimal("299.5")

        store = one(conn, ecom_stores, tenant, number="E1")
        assert (store.base_assortment_id, store.local_assortment_id, store.price_list_id, store.lead_time_days,
                store.payment_capture_enabled, store.default_customer_id) == (
            one(conn, assortments, tenant, code="WEB").id, None, web.id, 2, True, customer_id(tenant, 1))
        serving = conn.execute(sa.select(warehouses.c.number).join(
            ecom_store_warehouses, ecom_store_warehouses.c.warehouse_id == warehouses.c.id)
            .where(ecom_store_warehouses.c.ecom_store_id == store.id).order_by(ecom_store_warehouses.c.priority))
        assert list(serving.scalars()) == ["W1", "W2"]
        other = one(conn, ecom_stores, tenant, number="E2")
        assert (other.price_list_id, other.lead_time_days, other.payment_capture_enabled) == (None, 0, False)

        level = one(conn, stock_levels, tenant, location_id=one(conn, warehouses, tenant, number="W1").id,
                    sku_id=sku.id)
        # The document's reserved (2) is ignored: reserved is the service's own figure, and nothing is reserved yet.
        assert (level.on_hand, level.reserved) == (Decimal("10"), Decimal("0"))
        assert one(conn, stock_levels, tenant, location_id=one(conn, retail_stores, tenant, number="R1").id,
                   sku_id=one(conn, skus, tenant, number="P1-M").id).on_hand == 3

        campaign = one(conn, campaigns, tenant, code="CAMP1")
        program = one(conn, loyalty_programs, tenant, code="LP")
        assert (campaign.campaign_type, campaign.valid_from, campaign.valid_to, campaign.loyalty_program_id,
                campaign.company_id) == ("NORMAL", date(2026, 11, 1), date(2026, 12, 31), program.id, company.id)
        line = one(conn, campaign_skus, tenant, campaign_id=campaign.id)
        assert (line.sku_id, line.campaign_price, line.loyalty_membership_required) == (sku.id, 399, True)
        assert program.company_id == company.id

        kari = one(conn, customers, tenant, id=customer_id(tenant, 1))
        assert (kari.email, kari.email_key, kari.phone, kari.birth_date) == (
            "Kari+web@Example.NO", "kari+web@example.no", "+4791234567", date(1980, 2, 29))
        assert orjson.loads(kari.delivery_address) == {
            "name": "Kari Nordmann", "street": "Storgata 2", "postCode": "9008", "city": "Tromsø",
            "countryIsoCode": "NO", "email": None, "phone": None}
        assert kari.invoice_address is None and kari.created_time == kari.modified_time
        membership = one(conn, customer_loyalty_memberships, tenant, customer_id=kari.id)
        assert (membership.loyalty_program_id, membership.member_number, membership.member_since) == (
            program.id, "M-1", date(2024, 1, 15))


def test_the_whole_model_loads_twice_without_a_change(engine: sa.Engine, tenant: str) -> None:
    load_document(engine, tenant, catalogue_document(tenant))
    before = full_snapshot(engine, tenant)

    report = load_document(engine, tenant, catalogue_document(tenant))

    assert not report.changed
    assert all(count["created"] == count["updated"] == 0 for count in report.counts.values())
    assert full_snapshot(engine, tenant) == before


def test_nested_lists_are_owned_whole_per_item(engine: sa.Engine, tenant: str) -> None:
    load_document(engine, tenant, catalogue_document(tenant))
    document = catalogue_document(tenant)
    document["products"][0]["images"].pop()
    document["products"][0]["skus"].pop()  # P1-M leaves P1
    document["referenceLists"]["dynamicAttributes"][0]["options"].pop()
    document["priceLists"][0]["prices"].pop()
    document["ecomStores"][0]["servingWarehouseNumbers"] = ["W2"]
    document["customers"][0]["loyaltyMemberships"] = []
    document["campaigns"][1]["skus"] = []
    del document["products"][1]["skus"]  # not given: P2 keeps its SKU

    report = load_document(engine, tenant, document)

    assert {name: count for name, count in report.deleted.items() if count} == {
        "productImages": 1, "dynamicAttributeOptions": 1, "prices": 1, "ecomStoreWarehouses": 1,
        "customerLoyaltyMemberships": 1, "campaignSkus": 1}
    with engine.connect() as conn:
        # A SKU that leaves its product is kept (stock, prices and planning refer to it), without a product.
        assert one(conn, skus, tenant, number="P1-M").product_id is None
        assert one(conn, skus, tenant, number="P2-S").product_id == one(conn, products, tenant, number="P2").id
        assert one(conn, ecom_store_warehouses, tenant).priority == 1


def test_a_held_customer_s_contact_details_change(engine: sa.Engine, tenant: str) -> None:
    """E-mail and phone are unique columns: DuckDB must take their update too, and a trade of them too."""
    load_document(engine, tenant, catalogue_document(tenant))
    document = catalogue_document(tenant)
    document["customers"][0] |= {"email": "kari@example.no", "phone": "+4798765432"}
    document["customers"][1]["email"] = "Kari+web@example.no"  # the address Kari just gave up

    report = load_document(engine, tenant, document)

    assert report.counts["customers"] == {"created": 0, "updated": 2, "unchanged": 0}
    with engine.connect() as conn:
        assert one(conn, customers, tenant, id=customer_id(tenant, 2)).email_key == "kari+web@example.no"

    # Two customers trade phone numbers in one document.
    kari, ola = document["customers"]
    kari["phone"], ola["phone"] = ola["phone"], kari["phone"]
    load_document(engine, tenant, document)
    with engine.connect() as conn:
        assert one(conn, customers, tenant, id=customer_id(tenant, 1)).phone == "+46701234567"
        assert one(conn, customers, tenant, id=customer_id(tenant, 2)).phone == "+4798765432"


def test_whole_model_problems_are_listed_with_their_paths(engine: sa.Engine, tenant: str) -> None:
    load_document(engine, tenant, catalogue_document(tenant))
    before = full_snapshot(engine, tenant)
    document = catalogue_document(tenant)
    lists = document["referenceLists"]
    lists["dynamicAttributes"][1]["options"] = [{"code": "HOT", "name": "Varm", "sortOrder": 1}]
    lists["productColors"][1]["colorCode"] = "red"
    p1, p2 = document["products"]
    p1["skus"][0]["gtin"] = "4006381333932"  # wrong check digit
    p1["skus"][1] |= {"gtin": "40063813", "sizeCode": "XL"}  # 8 digits, wrong check digit; unknown size
    p1["dynamicAttributes"] = [{"code": "MATERIAL", "optionCodes": ["WOOL", "SILK"]}, {"code": "WASH", "value": "hot"},
                               {"code": "FIT", "value": "slim"}]
    p2["skus"].append({"number": "P1-S", "name": "Dobbel", "vatRateCode": "ZERO", "published": True})
    p2["images"] = [{"url": "ftp://img.example/p2.jpg", "sortOrder": 1}]
    document["stock"][0]["onHand"] = "-1"
    document["stock"].append({"locationNumber": "W9", "skuNumber": "P1-S", "onHand": "1", "reserved": "0"})
    document["warehouses"].append({"number": "R2", "name": "Lager med butikknummer", "companyNumber": "C2"})
    document["ecomStores"][0] |= {"leadTimeDays": 366, "localAssortmentCode": "WEB", "priceListCode": "OUTLET"}
    document["ecomStores"][1]["defaultCustomerId"] = "0190a5f4-3c2e-7a1b-9f00-0000000000ff"
    document["campaigns"][0] |= {"validFrom": "2027-01-01", "validTo": "2026-12-31"}
    del document["campaigns"][1]["skus"][0]["loyaltyProgramMembershipRequired"]
    document["campaigns"].append({
        "code": "CAMP3", "name": "Uten program", "campaignType": "NORMAL", "validFrom": "2026-02-30",
        "validTo": "2026-03-01", "released": False, "companyNumber": "C1",
        "skus": [{"skuNumber": "P2-S", "campaignPrice": "1", "loyaltyProgramMembershipRequired": True}]})
    kari, ola = document["customers"]
    kari |= {"email": "kari@", "birthDate": "1981-02-29"}
    ola |= {"phone": "+4712345", "email": "OLA@example.no"}
    document["customers"].append({"id": customer_id(tenant, 3), "firstName": "Per", "lastName": "Hansen",
                                  "email": "ola@EXAMPLE.no", "phone": "+4791234567"})

    with pytest.raises(DocumentInvalid) as raised:
        load_document(engine, tenant, document)

    assert [error.path for error in raised.value.errors] == [
        "campaigns[0].validTo",
        "campaigns[1].skus[0].loyaltyProgramMembershipRequired",
        "campaigns[2].skus[0].loyaltyProgramMembershipRequired",
        "campaigns[2].validFrom",
        "customers[0].birthDate",
        "customers[0].email",
        "customers[1].phone",
        "customers[2].email",
        "customers[2].phone",
        "ecomStores[0].leadTimeDays",
        "ecomStores[0].localAssortmentCode",
        "ecomStores[0].priceListCode",
        "ecomStores[1].defaultCustomerId",
        "products[0].dynamicAttributes[0].optionCodes[1]",
        "products[0].dynamicAttributes[1].value",
        "products[0].dynamicAttributes[2].code",
        "products[0].skus[0].gtin",
        "products[0].skus[1].gtin",
        "products[0].skus[1].sizeCode",
        "products[1].images[0].url",
        "products[1].skus[1].number",
        "products[1].skus[1].vatRateCode",
        "referenceLists.dynamicAttributes[1].options",
        "referenceLists.productColors[1].colorCode",
        "stock[0].onHand",
        "stock[4].locationNumber",
        "warehouses[2].number",
    ]
    messages = {error.path: error.message for error in raised.value.errors}
    assert "check digit" in messages["products[0].skus[0].gtin"]
    assert "first at products[0].skus[0]" in messages["products[1].skus[1].number"]
    assert "the email of customers[1] too" in messages["customers[2].email"]
    assert "the phone of customers[0] too" in messages["customers[2].phone"]
    assert messages["customers[0].email"] == "'kari@': There must be something after the @-sign."
    assert messages["products[0].skus[1].sizeCode"] == "'XL' names no sizes entry in the document or the tenant"
    assert "'SILK' names no option of attribute 'MATERIAL'" in messages[
        "products[0].dynamicAttributes[0].optionCodes[1]"]
    assert full_snapshot(engine, tenant) == before


@pytest.mark.parametrize("gtin", [VALID_GTIN_8, VALID_GTIN_12, VALID_GTIN_13, "0" + VALID_GTIN_13])
def test_gtins_of_every_length_with_a_valid_check_digit_load(engine: sa.Engine, tenant: str, gtin: str) -> None:
    document = catalogue_document(tenant)
    document["products"][0]["skus"][0]["gtin"] = gtin
    load_document(engine, tenant, document)
    with engine.connect() as conn:
        assert one(conn, skus, tenant, number="P1-S").gtin == gtin


def test_customer_ids_and_contacts_belong_to_one_tenant(engine: sa.Engine, tenant: str) -> None:
    load_document(engine, tenant, catalogue_document(tenant))
    other = create_tenant(engine, "backoffice other tenant", is_test=True)
    document = {"customers": [catalogue_document(tenant)["customers"][0]]}  # same e-mail and phone: fine elsewhere
    document["customers"][0] = {**document["customers"][0], "id": customer_id(other, 1)}
    del document["customers"][0]["loyaltyMemberships"]
    assert load_document(engine, other, document).counts["customers"]["created"] == 1

    taken = {"customers": [{"id": customer_id(tenant, 2).upper(), "firstName": "Ola", "lastName": "Nordmann"}]}
    with pytest.raises(DocumentInvalid) as raised:
        load_document(engine, other, taken)
    assert [(error.path, "is taken" in error.message) for error in raised.value.errors] == [("customers[0].id", True)]
