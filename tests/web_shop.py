"""A web shop over real HTTP for the order tests: one eCom store of a world with its token, its catalogue facts
from the database, and order bodies to send."""

from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from db.ids import new_id
from db.schema import assortment_lines, campaign_skus, campaigns, companies, ecom_stores, prices, skus
from tests.conftest import bearer, client_of, wait_for

ADDRESS = {"name": "Kari Nordmann", "street": "Bryggen 1", "postCode": "5003", "city": "Bergen",
           "countryIsoCode": "NO", "email": "kari@example.no", "phone": "+4741234567"}


class Shop:
    """One eCom store of a world: its id, catalogue facts from the database, and requests with its token."""

    def __init__(self, http: httpx.Client, engine: sa.Engine, world: dict[str, Any], token: str, index: int) -> None:
        self.http, self.engine, self.world = http, engine, world
        self.tenant_id = world["id"]
        self.id = client_of(world, "ecom", index=index)["resource"]
        self.prefix = f"/v1/tenants/{self.tenant_id}/ecom_stores/{self.id}"
        self.headers = bearer(token)

    def post(self, body: Any) -> httpx.Response:
        return self.http.post(self.prefix + "/orders", json=body, headers=self.headers)

    def get(self, path: str) -> httpx.Response:
        return self.http.get(self.prefix + path, headers=self.headers)

    def skus(self) -> list[sa.Row]:
        """The SKUs in the store's assortment with their normal price, by number."""
        with self.engine.connect() as conn:
            store = conn.execute(sa.select(ecom_stores).where(ecom_stores.c.id == self.id)).one()
            base_list = conn.scalar(sa.select(companies.c.base_price_list_id).where(companies.c.id == store.company_id))
            own, base = prices.alias("own"), prices.alias("base")
            return list(conn.execute(
                sa.select(skus.c.id, skus.c.number, sa.func.coalesce(own.c.price, base.c.price).label("price"))
                .join(assortment_lines, sa.and_(assortment_lines.c.tenant_id == self.tenant_id,
                                                assortment_lines.c.sku_id == skus.c.id,
                                                assortment_lines.c.assortment_id == store.base_assortment_id))
                .outerjoin(own, sa.and_(own.c.sku_id == skus.c.id, own.c.price_list_id == store.price_list_id))
                .outerjoin(base, sa.and_(base.c.sku_id == skus.c.id, base.c.price_list_id == base_list))
                .where(skus.c.tenant_id == self.tenant_id, skus.c.product_id.is_not(None))
                .order_by(skus.c.number)))

    def campaign_skus(self, code: str) -> list[SimpleNamespace]:
        """The campaign's SKUs with their campaign price and normal price, by number."""
        normal = {row.id: row.price for row in self.skus()}
        with self.engine.connect() as conn:
            return [SimpleNamespace(**row._asdict(), price=normal.get(row.id)) for row in conn.execute(
                sa.select(campaigns.c.id.label("campaign_id"), skus.c.id, skus.c.number, campaign_skus.c.campaign_price)
                .join(campaign_skus, campaign_skus.c.campaign_id == campaigns.c.id)
                .join(skus, skus.c.id == campaign_skus.c.sku_id)
                .where(campaigns.c.tenant_id == self.tenant_id, campaigns.c.code == code).order_by(skus.c.number))]

    def regular_sku(self, skip: int = 0) -> sa.Row:
        """A SKU no current campaign covers."""
        covered = {row.id for code in ("VINTERSALG", "TA3BETAL2") for row in self.campaign_skus(code)}
        return [row for row in self.skus() if row.id not in covered][skip]


def shop_of(http, engine, cached_token, world, index: int = 0) -> Shop:
    return Shop(http, engine, world, cached_token(world, client_of(world, "ecom", index=index)), index)


def new_order(*lines: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"externalOrderId": new_id(), "externalOrderNumber": f"WEB-{new_id()[-12:]}",
            "deliveryAddress": ADDRESS, "lineItems": list(lines), **fields}


def order_line(sku: sa.Row, quantity: Any = 1, price: Any = None, **more: Any) -> dict[str, Any]:
    return {"skuNumber": sku.number, "quantity": quantity,
            "netUnitPrice": str(price if price is not None else sku.price.normalize()), "vatRate": "25", **more}


def accepted_order(shop: Shop, body: dict[str, Any]) -> dict[str, Any]:
    response = shop.post(body)
    assert response.status_code == 202, response.text
    return response.json()


def opened_order(shop: Shop, order_id: str) -> dict[str, Any]:
    return wait_for(lambda: (order := shop.get(f"/orders/{order_id}").json())["status"] == "OPEN" and order,
                    10, "the order to be processed")


# Fixtures (registered by conftest.py); a test module may define its own of the same name.

@pytest.fixture
def shop(http, engine, cached_token, shared_world) -> Shop:
    """The demo web shop: payment capture enabled."""
    return shop_of(http, engine, cached_token, shared_world)


@pytest.fixture
def business(http, engine, cached_token, shared_world) -> Shop:
    """The tenant's other eCom store: no payment capture, no default customer, one warehouse, five days' lead
    time."""
    return shop_of(http, engine, cached_token, shared_world, index=1)


@pytest.fixture(scope="module")
def document(server) -> dict[str, Any]:
    """The served OpenAPI document, to check answers against."""
    return httpx.get(f"{server.url}/v1/openapi.json").json()
