"""Loading the back-office document: upserts by business key, idempotence, all-or-nothing checks, demo."""

from decimal import Decimal
from typing import Any

import pytest
import sqlalchemy as sa

from serving.demo_data import DEMO_RESOLUTION_EXAMPLES, demo_document
from store.backoffice import DocumentInvalid, load_document
from store.schema import (
    assortment_lines,
    assortments,
    companies,
    ecom_stores,
    loyalty_program_stores,
    loyalty_programs,
    retail_stores,
    skus,
    store_assortment_lines,
)
from store.tenants import create_tenant

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
    del document["ecomStores"][0]["released"]
    document["ecomStores"][0]["colour"] = "blue"
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
    assert messages["ecomStores[0].released"] == "required field is missing"
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
