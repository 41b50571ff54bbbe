"""The back-office loader's change events: exactly the right outbox rows, in the load's transaction."""

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

import db.backoffice
from db.backoffice import DocumentInvalid, load_document
from db.ids import new_id, numbered_ids
from db.schema import campaigns, ecom_stores, event_outbox, products, retail_stores, skus
from db.tenants import create_tenant
from serving.demo_data import TEST_PRODUCTS, demo_document
from tests.backoffice_documents import catalogue_document

Event = tuple[str, str, str | None]  # (eCom store number, subject, entity's business key or None)


@pytest.fixture
def tenant(engine: sa.Engine) -> str:
    return create_tenant(engine, "outbox test", is_test=True)


@pytest.fixture
def loaded(engine: sa.Engine, tenant: str) -> str:
    """The catalogue loaded, its first events taken out of the outbox."""
    load_document(engine, tenant, catalogue_document(tenant))
    drain(engine, tenant)
    return tenant


def drain(engine: sa.Engine, tenant_id: str) -> set[Event]:
    """The tenant's outbox rows, with ids replaced by business keys; the rows are removed."""
    keys: dict[str, str] = {}
    with engine.begin() as conn:
        for table, key in ((ecom_stores, "number"), (products, "number"), (skus, "number"),
                           (campaigns, "code"), (retail_stores, "number")):
            keys |= dict(conn.execute(sa.select(table.c.id, table.c[key]).where(table.c.tenant_id == tenant_id)).all())
        rows = conn.execute(sa.select(event_outbox).where(event_outbox.c.tenant_id == tenant_id)).all()
        conn.execute(event_outbox.delete().where(event_outbox.c.tenant_id == tenant_id))
    events = [(keys[row.ecom_store_id], row.subject, keys.get(row.entity_id) if row.entity_id else None)
              for row in rows]
    assert len(events) == len(set(events)), "an event was written twice"
    return set(events)


def load(engine: sa.Engine, tenant_id: str, document: dict[str, Any]) -> set[Event]:
    load_document(engine, tenant_id, document)
    return drain(engine, tenant_id)


SCHEMA_LISTS = ("BrandsUpdated", "ProductCategoriesUpdated", "ProductColorsUpdated", "SizesUpdated",
                "UnitOfMeasuresUpdated", "DynamicAttributesUpdated", "DynamicAttributeOptionsUpdated")


def test_first_load_announces_everything_to_the_stores_that_see_it(engine: sa.Engine, tenant: str) -> None:
    started = datetime.now(UTC)
    load_document(engine, tenant, catalogue_document(tenant))
    with engine.connect() as conn:
        rows = conn.execute(sa.select(event_outbox).where(event_outbox.c.tenant_id == tenant)).all()
    for row in rows:
        assert uuid.UUID(row.event_id).version == 7
        assert started - timedelta(seconds=1) <= row.datetime.replace(tzinfo=UTC) <= datetime.now(UTC)
        assert row.metadata is None and row.published_time is None

    assert drain(engine, tenant) == {
        # E1 sells P1 (both SKUs), E2 sells P2; stock of DP1 (no store holds it) is announced to nobody.
        ("E1", "ProductUpdated", "P1"), ("E2", "ProductUpdated", "P2"),
        ("E1", "InventoryUpdated", "P1-S"), ("E1", "InventoryUpdated", "P1-M"), ("E2", "InventoryUpdated", "P2-S"),
        ("E1", "CampaignUpdated", "CAMP1"), ("E2", "CampaignUpdated", "CAMP2"),
        # Retail stores reach the eCom stores of their own company only.
        ("E1", "RetailStoreUpdated", "R1"), ("E2", "RetailStoreUpdated", "R2"), ("E2", "RetailStoreUpdated", "R3"),
        *((store, subject, None) for store in ("E1", "E2") for subject in SCHEMA_LISTS),
    }


def test_an_identical_load_writes_no_event(engine: sa.Engine, loaded: str) -> None:
    assert load(engine, loaded, catalogue_document(loaded)) == set()


def test_product_changes_reach_the_stores_that_see_the_product(engine: sa.Engine, loaded: str) -> None:
    document = catalogue_document(loaded)
    document["products"][0]["images"][1]["altText"] = "Bakfra"  # P1, seen by E1
    assert load(engine, loaded, document) == {("E1", "ProductUpdated", "P1")}

    document["products"][1]["skus"][0]["published"] = False  # P2's SKU, seen by E2
    assert load(engine, loaded, document) == {("E2", "ProductUpdated", "P2")}

    document["priceLists"][0]["prices"][2]["price"] = "279"  # P2-S in the base list
    document["products"][0]["dynamicAttributes"][1]["value"] = "40"
    assert load(engine, loaded, document) == {("E2", "ProductUpdated", "P2"), ("E1", "ProductUpdated", "P1")}

    document["skus"][0]["name"] = "Planlegging"  # DP1 has no product
    document["products"][0]["released"] = False
    assert load(engine, loaded, document) == {("E1", "ProductUpdated", "P1")}


def test_a_product_s_modified_time_follows_its_images_and_prices(engine: sa.Engine, loaded: str) -> None:
    def modified() -> datetime:
        with engine.connect() as conn:
            return conn.scalar(sa.select(products.c.modified_time).where(products.c.tenant_id == loaded,
                                                                         products.c.number == "P1"))
    document = catalogue_document(loaded)
    first = modified()
    document["products"][0]["images"].pop()
    load(engine, loaded, document)
    second = modified()
    document["priceLists"][1]["prices"][0]["price"] = "429"
    load(engine, loaded, document)
    assert first < second < modified()


def test_stock_changes_reach_only_stores_whose_assortment_holds_the_sku(engine: sa.Engine, loaded: str) -> None:
    document = catalogue_document(loaded)
    document["stock"][0]["onHand"] = "9"  # W1, P1-S
    document["stock"][3]["onHand"] = "8"  # DP1: in no assortment
    assert load(engine, loaded, document) == {("E1", "InventoryUpdated", "P1-S")}
    document["stock"][1]["reserved"] = "2"  # R1, P1-M: a document's reserved is ignored, so nothing changes
    assert load(engine, loaded, document) == set()
    document["stock"] = [{"locationNumber": "R1", "skuNumber": "P2-S", "onHand": "1", "reserved": "0"}]  # new row
    assert load(engine, loaded, document) == {("E2", "InventoryUpdated", "P2-S")}


def test_a_location_joining_or_leaving_a_store_s_inventory_announces_its_skus(
        engine: sa.Engine, loaded: str) -> None:
    document = catalogue_document(loaded)
    document["ecomStores"][0]["servingWarehouseNumbers"] = ["W2"]  # W1 (stock of P1-S) leaves E1's inventory
    assert load(engine, loaded, document) == {("E1", "InventoryUpdated", "P1-S")}
    document["ecomStores"][0]["servingWarehouseNumbers"] = ["W2", "W1"]  # back, tried last
    assert load(engine, loaded, document) == {("E1", "InventoryUpdated", "P1-S")}
    document["ecomStores"][0]["servingWarehouseNumbers"] = ["W1", "W2"]  # only the order changes
    assert load(engine, loaded, document) == set()
    document["retailStores"][0]["released"] = False  # R1 (stock of P1-M) leaves E1's click and collect network
    assert load(engine, loaded, document) == {("E1", "InventoryUpdated", "P1-M"), ("E1", "RetailStoreUpdated", "R1")}


def test_assortment_changes_announce_what_each_store_now_sees(engine: sa.Engine, loaded: str) -> None:
    document = catalogue_document(loaded)
    document["assortments"][0]["lines"].append({"skuNumber": "P2-S", "replenishmentType": "AUTO"})
    # E1 now sees P2, and with it CAMP2 (whose only SKU is P2-S).
    assert load(engine, loaded, document) == {("E1", "ProductUpdated", "P2"), ("E1", "CampaignUpdated", "CAMP2")}

    document["assortments"][0]["lines"] = [{"skuNumber": "P1-M", "replenishmentType": "AUTO"}]
    # E1 loses P2 and P1-S: P2 disappears (it hears, and its GET answers 404), P1's record changes, CAMP1 and
    # CAMP2 leave its view.
    assert load(engine, loaded, document) == {("E1", "ProductUpdated", "P2"), ("E1", "ProductUpdated", "P1"),
                                              ("E1", "CampaignUpdated", "CAMP1"), ("E1", "CampaignUpdated", "CAMP2")}


def test_a_store_s_new_price_list_reprices_everything_it_sees(engine: sa.Engine, loaded: str) -> None:
    document = catalogue_document(loaded)
    document["ecomStores"][0]["priceListCode"] = None  # E1 falls back to its company's base prices
    assert load(engine, loaded, document) == {("E1", "ProductUpdated", "P1")}
    document["companies"][1]["currencyIsoCode"] = "EUR"  # E2's company
    assert load(engine, loaded, document) == {("E2", "ProductUpdated", "P2")}
    document["vatRates"][1]["rate"] = "12"  # LOW: P2's SKU
    assert load(engine, loaded, document) == {("E2", "ProductUpdated", "P2")}


def test_campaign_changes_reach_stores_that_see_its_skus(engine: sa.Engine, loaded: str) -> None:
    document = catalogue_document(loaded)
    document["campaigns"][0]["validTo"] = "2027-01-15"
    assert load(engine, loaded, document) == {("E1", "CampaignUpdated", "CAMP1")}
    # CAMP2 moves from P2-S (seen by E2) to P1-M (seen by E1): both stores hear.
    document["campaigns"][1]["skus"][0]["skuNumber"] = "P1-M"
    assert load(engine, loaded, document) == {("E1", "CampaignUpdated", "CAMP2"), ("E2", "CampaignUpdated", "CAMP2")}


def test_retail_store_changes_reach_the_company_s_ecom_stores_only(engine: sa.Engine, loaded: str) -> None:
    document = catalogue_document(loaded)
    document["retailStores"][0]["name"] = "Nordlys Tromsø Sentrum"
    document["retailStores"][2]["released"] = True  # R3 released
    assert load(engine, loaded, document) == {("E1", "RetailStoreUpdated", "R1"), ("E2", "RetailStoreUpdated", "R3")}
    document["retailStores"][1]["visitAddress"] = {"city": "Kiruna", "countryIsoCode": "SE"}
    assert load(engine, loaded, document) == {("E2", "RetailStoreUpdated", "R2")}


def test_a_new_ecom_store_hears_of_its_company_s_released_stores(engine: sa.Engine, loaded: str) -> None:
    document = {"ecomStores": [{"number": "E3", "name": "nordlys.fi", "companyNumber": "C2", "released": False}]}
    # R2 is released; R3 is not, so it is left for its release to announce.
    assert load(engine, loaded, document) == {("E3", "RetailStoreUpdated", "R2")}
    document["ecomStores"][0]["companyNumber"] = "C1"  # moved: connected to C1's network
    assert load(engine, loaded, document) == {("E3", "RetailStoreUpdated", "R1")}


def test_schema_events_name_each_changed_list_and_reach_every_store(engine: sa.Engine, loaded: str) -> None:
    document = {"referenceLists": catalogue_document(loaded)["referenceLists"]}
    lists = document["referenceLists"]
    lists["brands"].append({"code": "FJELL", "name": "Fjell"})
    lists["sizes"][0]["sortOrder"] = 0
    lists["dynamicAttributes"][0]["options"].pop()  # COTTON removed
    expected = {(store, subject, None) for store in ("E1", "E2")
                for subject in ("BrandsUpdated", "SizesUpdated", "DynamicAttributeOptionsUpdated")}
    assert load(engine, loaded, document) == expected


def test_a_document_that_fails_its_checks_writes_no_event(engine: sa.Engine, loaded: str) -> None:
    document = catalogue_document(loaded)
    document["stock"][0]["onHand"] = "-1"  # not a decimal of the document
    document["products"][0]["name"] = "Ullgenser, ny"
    with pytest.raises(DocumentInvalid):
        load_document(engine, loaded, document)
    assert drain(engine, loaded) == set()


def test_a_load_rolled_back_after_its_events_were_written_leaves_none(
        engine: sa.Engine, loaded: str, monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[int] = []

    def announce_then_fail(applier: Any, before: Any) -> None:
        announce(applier, before)
        written.append(applier.conn.scalar(sa.select(sa.func.count()).select_from(event_outbox)
                                           .where(event_outbox.c.tenant_id == loaded)))
        raise RuntimeError("the database went away")

    announce = db.backoffice.announce
    monkeypatch.setattr(db.backoffice, "announce", announce_then_fail)
    document = catalogue_document(loaded)
    document["products"][0]["name"] = "Ullgenser, ny"
    document["stock"][0]["onHand"] = "12"
    with pytest.raises(RuntimeError):
        load_document(engine, loaded, document)

    assert written == [2]  # ProductUpdated and InventoryUpdated were in the transaction
    assert drain(engine, loaded) == set()
    with engine.connect() as conn:
        assert conn.scalar(sa.select(products.c.name).where(products.c.tenant_id == loaded,
                                                            products.c.number == "P1")) == "Ullgenser"



def test_the_demo_catalogue_loads_again_without_an_event(engine: sa.Engine, tenant: str) -> None:
    document = demo_document("outbox", TEST_PRODUCTS, tenant)
    first = load(engine, tenant, document)
    assert {subject for _, subject, _ in first} >= {"ProductUpdated", "InventoryUpdated", "CampaignUpdated",
                                                    "RetailStoreUpdated", "BrandsUpdated"}
    assert load(engine, tenant, document) == set()


def test_ids_numbered_in_sql_are_unique_uuidv7s_in_position_order(engine: sa.Engine) -> None:
    """trigger_events numbers its rows' event ids in SQL (db.ids.numbered_ids): each a UUIDv7 string of the
    canonical form, none twice, sorting as their positions do, after an id made before them and before one made
    after them (in the same millisecond, most likely)."""
    earlier = new_id()
    positions = sa.values(sa.column("position", sa.Integer), name="positions").data(
        [(position,) for position in range(1, 2001)])
    with engine.connect() as conn:
        numbered = conn.execute(sa.select(positions.c.position, numbered_ids(positions.c.position))).all()
    later = new_id()
    ids = [event_id for _, event_id in sorted(numbered)]
    assert len(set(ids)) == len(ids) == 2000
    assert all(str(uuid.UUID(event_id)) == event_id and uuid.UUID(event_id).version == 7 for event_id in ids)
    assert sorted(ids) == ids and earlier < ids[0] and ids[-1] < later
