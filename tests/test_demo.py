"""`pia demo` end to end: a real process, its credentials file, the printed curl, and a second run."""

import json
import shlex
import subprocess
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import sqlalchemy as sa

from db.engine import create_engine
from db.schema import (
    campaign_skus,
    campaigns,
    customer_loyalty_memberships,
    customers,
    ecom_store_warehouses,
    ecom_stores,
    price_lists,
    prices,
    product_images,
    products,
    reference_entries,
    retail_stores,
    skus,
    stock_levels,
    warehouses,
)
from serving.demo_data import DEMO_PRODUCTS, TEST_PRODUCTS, demo_document
from serving.demo_shop import WAREHOUSES
from settings import Settings
from tests.demo_process import Demo


def test_first_run_seeds_writes_credentials_and_prints_a_working_curl(tmp_path: Path) -> None:
    data_dir = tmp_path / "demo"
    demo = Demo(data_dir)
    try:
        credentials = json.loads((data_dir / "demo-credentials.json").read_text())
        assert credentials["baseUrl"] == demo.url and credentials["tokenUrl"] == f"{demo.url}/oauth2/token"
        tenants = credentials["tenants"]
        assert sorted(t["test"] for t in tenants) == [False, True]
        for tenant in tenants:
            assert len(tenant["ecomStores"]) >= 2 and not all(s["released"] for s in tenant["ecomStores"])
            assert tenant["loyaltyPrograms"] and tenant["loyaltyPrograms"][0]["name"]
            by_scope = [(c["scope"], c["resource"], tuple(c["permissions"])) for c in tenant["clients"]]
            assert {r for s, r, _ in by_scope if s == "ecom"} == {s["id"] for s in tenant["ecomStores"]}
            assert ("loyalty_programs", tenant["loyaltyPrograms"][0]["id"], ()) in by_scope
            assert ("demand_planning", None, ("demand_planning",)) in by_scope
            assert ("demand_planning", None, ()) in by_scope
            assert ("admin", None, ()) in by_scope

        curl = next(line.strip() for line in demo.lines if line.strip().startswith("curl "))
        token = json.loads(subprocess.run(shlex.split(curl), capture_output=True, text=True,
                                          check=True).stdout)["access_token"]
        tenant = next(t for t in tenants if not t["test"])
        stores = httpx.get(f"{demo.url}/v1/tenants/{tenant['id']}/demand_planning/retail_stores",
                           headers={"Authorization": f"Bearer {token}"}).json()["items"]
        assert len(stores) >= 3 and {"RELEASED", "NOT_RELEASED"} <= {s["status"] for s in stores}
    finally:
        demo.stop()
    # The embedded file is free once the demo has stopped: count what it seeded.
    engine = create_engine(Settings(data_dir=data_dir))
    try:
        for tenant in tenants:
            assert_catalogue(engine, tenant["id"], TEST_PRODUCTS if tenant["test"] else DEMO_PRODUCTS)
    finally:
        engine.dispose()


def test_second_run_reuses_tenants_and_secrets(tmp_path: Path) -> None:
    data_dir = tmp_path / "demo"
    Demo(data_dir).stop()  # the first run, which seeds; this test must not rely on another test's run
    before = json.loads((data_dir / "demo-credentials.json").read_text())
    demo = Demo(data_dir)
    try:
        assert any("reusing" in line for line in demo.lines)
        after = json.loads((data_dir / "demo-credentials.json").read_text())
        assert [t["id"] for t in after["tenants"]] == [t["id"] for t in before["tenants"]]
        assert after["baseUrl"] == demo.url
        tenant = after["tenants"][0]
        client = next(c for c in tenant["clients"] if c["scope"] == "ecom")
        response = httpx.post(f"{demo.url}/oauth2/token", auth=(client["clientId"], client["clientSecret"]),
                              data={"grant_type": "client_credentials", "scope": "ecom",
                                    "resource": client["resource"], "tenant_id": tenant["id"]})
        assert response.status_code == 200
    finally:
        demo.stop()


def count(conn: sa.Connection, table: sa.Table, tenant_id: str, *where: sa.ColumnElement[bool]) -> int:
    return conn.scalar(sa.select(sa.func.count()).select_from(table).where(table.c.tenant_id == tenant_id, *where))


def assert_catalogue(engine: sa.Engine, tenant_id: str, product_count: int) -> None:
    with engine.connect() as conn:
        assert count(conn, products, tenant_id) == product_count
        assert count(conn, skus, tenant_id, skus.c.product_id.is_not(None)) >= 5 * product_count
        assert count(conn, product_images, tenant_id) == 2 * product_count
        lists = dict(conn.execute(sa.select(reference_entries.c.list_name, sa.func.count())
                                  .where(reference_entries.c.tenant_id == tenant_id)
                                  .group_by(reference_entries.c.list_name)).all())
        assert len(lists) == 12 and lists["brands"] >= 4 and lists["product_colors"] >= 8 and lists["sizes"] >= 5
        assert count(conn, price_lists, tenant_id) == 2 and count(conn, prices, tenant_id) > product_count
        assert count(conn, customers, tenant_id) == 12
        assert 0 < count(conn, customer_loyalty_memberships, tenant_id) < 12
        webshop = conn.execute(sa.select(ecom_stores).where(ecom_stores.c.tenant_id == tenant_id,
                                                            ecom_stores.c.number == "2001")).one()
        assert webshop.price_list_id and webshop.payment_capture_enabled and webshop.default_customer_id
        assert count(conn, ecom_store_warehouses, tenant_id, ecom_store_warehouses.c.ecom_store_id == webshop.id) == 2

        warehouse_ids = set(conn.scalars(sa.select(warehouses.c.id).where(warehouses.c.tenant_id == tenant_id)))
        store_ids = set(conn.scalars(sa.select(retail_stores.c.id).where(retail_stores.c.tenant_id == tenant_id)))
        held: dict[str, dict[str, Decimal]] = {}
        for location, sku, on_hand in conn.execute(sa.select(stock_levels.c.location_id, stock_levels.c.sku_id,
                                                             stock_levels.c.on_hand)
                                                   .where(stock_levels.c.tenant_id == tenant_id)):
            held.setdefault(sku, {})[location] = on_hand
        in_warehouses = {sku for sku, where in held.items() if any(where.get(w) for w in warehouse_ids)}
        assert len(warehouse_ids) == 2 and all(any(w in where for where in held.values()) for w in warehouse_ids)
        assert any(location in store_ids for where in held.values() for location in where)
        assert any(not any(where.values()) for where in held.values()), "no SKU is sold out"
        assert any(sku not in in_warehouses and any(where.values()) for sku, where in held.items()), \
            "no SKU is only in a store"

        campaign_rows = conn.execute(sa.select(campaigns).where(campaigns.c.tenant_id == tenant_id)).all()
        today = datetime.now(UTC).date()
        assert sorted(status(row.released, row.valid_from, row.valid_to, today) for row in campaign_rows) == [
            "ACTIVE", "ACTIVE", "ENDED", "PLANNED", "UNRELEASED"]
        active = {row.campaign_type for row in campaign_rows if status(row.released, row.valid_from, row.valid_to,
                                                                        today) == "ACTIVE"}
        assert active == {"NORMAL", "THREE_FOR_TWO"}
        members_only = conn.execute(sa.select(campaigns.c.loyalty_program_id).join(
            campaign_skus, campaign_skus.c.campaign_id == campaigns.c.id)
            .where(campaigns.c.tenant_id == tenant_id, campaign_skus.c.loyalty_membership_required)).scalars().all()
        assert members_only and all(members_only)


def status(released: bool, valid_from: date, valid_to: date, today: date) -> str:
    if not released:
        return "UNRELEASED"
    return "PLANNED" if today < valid_from else "ENDED" if valid_to < today else "ACTIVE"


def test_demo_catalogue_is_large_varied_and_deterministic() -> None:
    tenant_id = "01a20a5c-71e9-7377-a288-91e4dc6fe7ee"
    document = demo_document("demo", DEMO_PRODUCTS, tenant_id)
    assert document == demo_document("demo", DEMO_PRODUCTS, tenant_id)  # seeded: reruns load the same
    product_skus = [sku for product in document["products"] for sku in product["skus"]]
    assert len(document["products"]) >= 300 and len(product_skus) >= 1500
    assert len({product["brandCode"] for product in document["products"]}) >= 4
    assert len({product["productCategoryCode"] for product in document["products"]}) >= 8
    assert {sku["vatRateCode"] for sku in product_skus} == {"STD", "FOOD"}
    assert len({(sku["colorCode"], sku["sizeCode"]) for sku in product_skus}) >= 40
    assert not all(sku["published"] for sku in product_skus)
    in_shop = {line["skuNumber"] for assortment in document["assortments"] if assortment["code"] == "NETT"
               for line in assortment["lines"]}
    assert 0.9 * len(product_skus) < len(in_shop) < len(product_skus)  # most of the catalogue, not all
    # The grocery SKUs demand planning relies on are still there.
    assert {sku["number"] for sku in demo_document("demo")["skus"]} == {sku["number"] for sku in document["skus"]}
    tomorrow = demo_document("demo", DEMO_PRODUCTS, tenant_id, today=date.today() + timedelta(days=1))
    assert [c["validFrom"] for c in tomorrow["campaigns"]] != [c["validFrom"] for c in document["campaigns"]]
    assert {location for location, _ in WAREHOUSES} <= {level["locationNumber"] for level in document["stock"]}
