"""Order creation's per-process entries of the catalogue (db/order_context.py), on both backends.

Under any sequence of back-office loads (a price, a campaign's release, the assortment's lines) and orders, an order
checked against this process's entries is answered as one checked after forgetting them (a Hypothesis state
machine: the loads change exactly what the entries hold). And the entries spare the reads they hold: a store's
second group reads neither its context nor its SKUs again; after a load, whichever engine ran it, it does."""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, run_state_machine_as_test

from contracts.errors import ApiError
from contracts.orders import CreateOrder
from db import order_context
from db.backoffice import load_document
from db.engine import create_engine
from db.ids import new_id
from db.orders import HeldOrder, OrderRequest, create_orders
from db.schema import assortment_lines, assortments, ecom_stores, price_lists, prices, skus
from serving import demo_shop
from serving.demo import seed_demo_tenant
from settings import Settings
from tests.conftest import client_of, store_of_its_own
from tests.web_shop import ADDRESS, Shop

CAMPAIGN = "VINTERSALG"
NEW_PRICES = ("111", "222")


@dataclass(frozen=True)
class Catalogue:
    """A test tenant's web shop, and the SKUs orders here are made of: with the prices a line may state."""

    settings: Settings
    engine: sa.Engine
    tenant_id: str
    store_id: str
    sku_numbers: list[str]
    stated_prices: dict[str, list[str]]  # by SKU number: its price, its campaign price, and the loads' new prices
    as_seeded: dict[str, Any]  # a document restoring what the loads here change


@pytest.fixture(scope="module")
def catalogue(backend: str, request: pytest.FixtureRequest,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Catalogue]:
    """On a store no server works on, so that only this test's loads change the catalogue."""
    with store_of_its_own(backend, request, tmp_path_factory.mktemp("order_context")) as (store_settings, engine):
        world = seed_demo_tenant(engine, f"order context {new_id()}", is_test=True)
        store_id = client_of(world, "ecom")["resource"]
        shop = Shop(None, engine, world, "", 0)  # for its catalogue facts only: it sends nothing
        campaign = shop.campaign_skus(CAMPAIGN)[:2]
        campaigned = {row.number for row in shop.campaign_skus(CAMPAIGN)}
        regular = [row for row in shop.skus() if row.number not in campaigned and row.price is not None][:3]
        stated = {row.number: [str(row.price.normalize()), *NEW_PRICES] for row in regular}
        stated |= {row.number: [str(row.price.normalize()), str(row.campaign_price.normalize()), *NEW_PRICES]
                   for row in campaign}
        with engine.connect() as conn:  # the orders here leave the customer to the store's default
            assert conn.scalar(sa.select(ecom_stores.c.default_customer_id).where(ecom_stores.c.id == store_id))
        catalogue = Catalogue(store_settings, engine, world["id"], store_id, list(stated), stated, {})
        catalogue.as_seeded.update(
            priceLists=[{"code": demo_shop.PRICE_LIST_CODE, "prices": _held_price_list(catalogue)}],
            campaigns=[{"code": CAMPAIGN, "released": True}],
            assortments=[_assortment_of(_held_assortment(catalogue))])
        yield catalogue


def _held_price_list(catalogue: Catalogue) -> list[dict[str, str]]:
    """The web shop's own price list as a document gives it whole."""
    with catalogue.engine.connect() as conn:
        return [{"skuNumber": row.number, "price": str(row.price)} for row in conn.execute(
            sa.select(skus.c.number, prices.c.price).join(prices, prices.c.sku_id == skus.c.id)
            .join(price_lists, price_lists.c.id == prices.c.price_list_id)
            .where(prices.c.tenant_id == catalogue.tenant_id, price_lists.c.code == demo_shop.PRICE_LIST_CODE))]


def _held_assortment(catalogue: Catalogue) -> list[str]:
    with catalogue.engine.connect() as conn:
        return list(conn.scalars(
            sa.select(skus.c.number).join(assortment_lines, assortment_lines.c.sku_id == skus.c.id)
            .join(assortments, assortments.c.id == assortment_lines.c.assortment_id)
            .where(assortments.c.tenant_id == catalogue.tenant_id, assortments.c.code == demo_shop.ASSORTMENT_CODE)))


def _assortment_of(numbers: list[str]) -> dict[str, Any]:
    return {"code": demo_shop.ASSORTMENT_CODE,
            "lines": [{"skuNumber": number, "replenishmentType": "AUTO"} for number in numbers]}


def _answer(answer: HeldOrder | ApiError) -> tuple:
    """What the web shop hears, without what differs between two orders (ids, numbers, keys, times)."""
    if isinstance(answer, ApiError):
        return answer.status, answer.body()
    return 202, answer.order.gross_amount, [
        (line.sku_number, line.product_name, line.net_unit_price, line.price_type, line.campaign_id)
        for line in answer.lines]


class CatalogueAndOrders(RuleBasedStateMachine):
    catalogue: Catalogue  # set by the test

    @initialize()
    def as_seeded(self) -> None:
        """Each run starts from the seeded catalogue and nothing kept, so that a failing run replays alike."""
        load_document(self.catalogue.engine, self.catalogue.tenant_id, self.catalogue.as_seeded)
        order_context.forget_all()

    @rule(data=st.data())
    def orders(self, data: st.DataObject) -> None:
        """A group of an order of each SKU at each price a line may state, with and without the campaign's code,
        and an order of several lines drawn."""
        grid = [[{"skuNumber": number, "quantity": 1, "vatRate": "25", "netUnitPrice": price, **campaign}]
                for number, stated in self.catalogue.stated_prices.items() for price in stated
                for campaign in ({}, {"campaignCode": CAMPAIGN})]
        numbers = data.draw(st.lists(st.sampled_from(self.catalogue.sku_numbers), min_size=2, max_size=4))
        drawn = [{"skuNumber": number, "quantity": 1, "vatRate": "25",
                  "netUnitPrice": data.draw(st.sampled_from(self.catalogue.stated_prices[number])),
                  **data.draw(st.sampled_from([{}, {"campaignCode": CAMPAIGN}]))} for number in numbers]
        kept = self._created([*grid, drawn])  # against what this process holds
        order_context.forget_all()
        fresh = self._created([*grid, drawn])  # read afresh
        assert kept == fresh

    def _created(self, orders: list[list[dict[str, Any]]]) -> list[tuple]:
        requests = [OrderRequest(self.catalogue.tenant_id, self.catalogue.store_id, CreateOrder.model_validate({
            "externalOrderId": new_id(), "externalOrderNumber": new_id(), "deliveryAddress": ADDRESS,
            "lineItems": lines})) for lines in orders]
        return [_answer(answer) for answer in create_orders(self.catalogue.engine, requests)]

    @rule(data=st.data())
    def reprice(self, data: st.DataObject) -> None:
        number = data.draw(st.sampled_from(self.catalogue.sku_numbers))
        price = data.draw(st.sampled_from(self.catalogue.stated_prices[number]))
        listed = [line for line in _held_price_list(self.catalogue) if line["skuNumber"] != number]
        load_document(self.catalogue.engine, self.catalogue.tenant_id, {"priceLists": [
            {"code": demo_shop.PRICE_LIST_CODE, "prices": [*listed, {"skuNumber": number, "price": price}]}]})

    @rule(released=st.booleans())
    def release_campaign(self, released: bool) -> None:
        load_document(self.catalogue.engine, self.catalogue.tenant_id,
                      {"campaigns": [{"code": CAMPAIGN, "released": released}]})

    @rule(data=st.data(), held=st.booleans())
    def assort(self, data: st.DataObject, held: bool) -> None:
        number = data.draw(st.sampled_from(self.catalogue.sku_numbers))
        numbers = [other for other in _held_assortment(self.catalogue) if other != number] + ([number] if held else [])
        load_document(self.catalogue.engine, self.catalogue.tenant_id, {"assortments": [_assortment_of(numbers)]})


def test_orders_checked_against_the_kept_catalogue_are_answered_as_if_read_afresh(catalogue: Catalogue) -> None:
    CatalogueAndOrders.catalogue = catalogue
    run_state_machine_as_test(CatalogueAndOrders, settings=settings(
        max_examples=12, stateful_step_count=8, deadline=None, suppress_health_check=list(HealthCheck)))


class _Reads:
    """Counts the statements that read a store's context or its SKUs."""

    def __init__(self, engine: sa.Engine) -> None:
        self.store, self.skus = 0, 0
        sa.event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, conn, cursor, statement: str, parameters, context, executemany) -> None:
        self.store += statement.startswith("SELECT ecom_stores.id")
        self.skus += statement.startswith("SELECT skus.id, skus.number, products.name")


def test_a_stores_second_group_reads_neither_its_context_nor_its_skus_until_a_load(catalogue: Catalogue) -> None:
    order_context.forget_all()
    number = catalogue.sku_numbers[0]
    line = {"skuNumber": number, "quantity": 1, "vatRate": "25", "netUnitPrice": catalogue.stated_prices[number][0]}
    reads = _Reads(catalogue.engine)

    def group() -> None:
        body = {"externalOrderId": new_id(), "externalOrderNumber": new_id(), "deliveryAddress": ADDRESS,
                "lineItems": [line]}
        create_orders(catalogue.engine, [OrderRequest(catalogue.tenant_id, catalogue.store_id,
                                                      CreateOrder.model_validate(body))])

    group()
    assert (reads.store, reads.skus) == (1, 1)
    group()
    assert (reads.store, reads.skus) == (1, 1)
    # A load through another engine of the same database (as another process's would be) counts the version up.
    other = create_engine(catalogue.settings)
    try:
        load_document(other, catalogue.tenant_id, {"campaigns": [{"code": CAMPAIGN, "released": True}]})
    finally:
        other.dispose()
    group()
    assert (reads.store, reads.skus) == (2, 2)

