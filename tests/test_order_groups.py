"""Orders created in groups (issue 19 point 1) on both backends: a group's answers and stored rows are those of
creating its orders one by one in the same order (Hypothesis, over mixes of valid orders, unknown SKUs and
customers, wrong campaign prices, repeats among themselves and of held orders, two eCom stores), and concurrent
POSTs over real HTTP, gathered into groups by the server, are each answered as if alone."""

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import httpx
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contracts.errors import ApiError
from contracts.orders import CreateOrder
from db import orders as order_store
from db.ids import new_id
from db.orders import HeldOrder, OrderRequest, create_order, create_orders
from db.schema import ecom_stores, order_lines, orders
from serving import order_groups
from serving.demo import seed_demo_tenant
from tests.conftest import client_of, store_of_its_own
from tests.web_shop import Shop, new_order, order_line

# Two tenants seeded alike: the group is created in one, the same requests one by one in the other.
GROUPED, ONE_BY_ONE = 0, 1
KEYS = 4  # few external keys, so that requests often repeat each other's or a held order's


@dataclass(frozen=True)
class Tenant:
    """A demo tenant, its two eCom stores (the web shop with a default customer, the business store without),
    and what its ids stand for, so that its rows compare with the other tenant's."""

    id: str
    world: dict[str, Any]
    store_ids: list[str]
    customer_id: str  # the web shop's default customer, given explicitly as a known one
    labels: dict[str, str]  # id → what it is, alike in both tenants


@pytest.fixture(scope="module")
def quiet_engine(backend: str, request: pytest.FixtureRequest,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[sa.Engine]:
    """A store no server's order processor works on: the stored rows compare as created (RECEIVED, no warehouse),
    not as far as a processor got with each order by the time it is read."""
    with store_of_its_own(backend, request, tmp_path_factory.mktemp("order_groups")) as (_, engine):
        yield engine


@pytest.fixture(scope="module")
def tenants(quiet_engine: sa.Engine) -> list[Tenant]:
    engine = quiet_engine
    made = []
    for name in ("grouped", "one by one"):
        world = seed_demo_tenant(engine, f"order groups {name} {new_id()}", is_test=False)
        store_ids = [client_of(world, "ecom", index=index)["resource"] for index in (0, 1)]
        with engine.connect() as conn:
            customer_id = conn.scalar(sa.select(ecom_stores.c.default_customer_id)
                                      .where(ecom_stores.c.id == store_ids[0]))
        shop = Shop(None, engine, world, "", 0)  # for its catalogue facts only: it sends nothing
        labels = {store_id: f"store {index}" for index, store_id in enumerate(store_ids)}
        labels |= {customer_id: "customer", **{row.campaign_id: "VINTERSALG"
                                               for row in shop.campaign_skus("VINTERSALG")}}
        labels |= {row.id: f"sku {row.number}" for row in shop.skus()}
        made.append(Tenant(world["id"], world, store_ids, customer_id, labels))
    return made


@pytest.fixture(scope="module")
def lines(quiet_engine: sa.Engine, tenants: list[Tenant]) -> dict[str, dict[str, Any]]:
    """Order lines by kind, alike in both tenants (SKUs by number; the demo seeds the same catalogue)."""
    shop = Shop(None, quiet_engine, tenants[GROUPED].world, "", 0)  # for its catalogue facts only
    regular, campaign = shop.regular_sku(), shop.campaign_skus("VINTERSALG")[0]
    return {
        "regular": order_line(regular, 2),
        "campaign": order_line(campaign, 1, campaign.campaign_price.normalize(), campaignCode="VINTERSALG"),
        "wrong campaign price": order_line(campaign, 1, campaign.price.normalize(), campaignCode="VINTERSALG"),
        "unknown SKU": {"skuNumber": "NO-SUCH-SKU", "quantity": 1, "netUnitPrice": "10", "vatRate": "25"},
    }


@dataclass(frozen=True)
class Sent:
    """One request, as drawn: which store, keys, customer and lines."""

    store: int
    order_key: int
    number_key: int
    customer: str  # "default", "known" or "unknown"
    line_kinds: tuple[str, ...]


sent_orders = st.builds(
    Sent, store=st.integers(0, 1), order_key=st.integers(0, KEYS - 1), number_key=st.integers(0, KEYS - 1),
    customer=st.sampled_from(["default", "default", "known", "unknown"]),
    line_kinds=st.lists(st.sampled_from(["regular", "regular", "campaign", "wrong campaign price", "unknown SKU"]),
                        min_size=1, max_size=3).map(tuple))


def _request(tenant: Tenant, sent: Sent, run: str, lines: dict[str, dict[str, Any]],
             unknown_customer: str) -> OrderRequest:
    customer = {"default": {}, "known": {"customerId": tenant.customer_id},
                "unknown": {"customerId": unknown_customer}}[sent.customer]
    body = new_order(*(lines[kind] for kind in sent.line_kinds), **customer)
    body |= {"externalOrderId": f"{run}-E{sent.order_key}", "externalOrderNumber": f"{run}-N{sent.number_key}"}
    return OrderRequest(tenant.id, tenant.store_ids[sent.store], CreateOrder.model_validate(body))


def _one_by_one(engine: sa.Engine, requests: list[OrderRequest]) -> list[HeldOrder | ApiError]:
    answers: list[HeldOrder | ApiError] = []
    for request in requests:
        try:
            answers.append(create_order(engine, request.tenant_id, request.ecom_store_id, request.body))
        except ApiError as refused:
            answers.append(refused)
    return answers


_VARYING = {"id", "order_id", "number", "order_date", "modified_time", "tenant_id"}


def _comparable(row: sa.Row, labels: dict[str, str]) -> dict[str, Any]:
    """A stored row without what differs between tenants and runs (ids, numbers, times), its references labelled."""
    return {key: labels.get(value, value) if isinstance(value, str) else value
            for key, value in row._asdict().items() if key not in _VARYING}


def _answer(answer: HeldOrder | ApiError, labels: dict[str, str]) -> tuple:
    """What the web shop hears, comparable across tenants: an error's body (the order a 409 names by its keys),
    or the created order's rows."""
    if isinstance(answer, ApiError):
        body = answer.body()
        if "existingOrderId" in (body.get("details") or {}):
            body["details"] = {"existingOrderId": labels[body["details"]["existingOrderId"]]}
        return answer.status, body
    return 202, _comparable(answer.order, labels), [_comparable(line, labels) for line in answer.lines]


def _stored(engine: sa.Engine, tenant: Tenant, run: str) -> tuple[list[str], list[tuple]]:
    """The run's orders as held, in number order: their numbers, and their rows with their lines."""
    with engine.connect() as conn:
        held = list(conn.execute(sa.select(orders).where(orders.c.tenant_id == tenant.id,
                                                         orders.c.external_order_id.startswith(run))
                                 .order_by(orders.c.number)))
        lines_of = {}
        for line in conn.execute(sa.select(order_lines).where(
                order_lines.c.order_id.in_([order.id for order in held])).order_by(order_lines.c.line_number)):
            lines_of.setdefault(line.order_id, []).append(_comparable(line, tenant.labels))
    return ([order.number for order in held],
            [(_comparable(order, tenant.labels), lines_of[order.id]) for order in held])


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(held=st.lists(sent_orders, max_size=2), group=st.lists(sent_orders, min_size=1, max_size=12))
def test_a_group_answers_and_stores_as_its_orders_one_by_one(quiet_engine: sa.Engine, tenants: list[Tenant],
                                                             lines: dict[str, dict[str, Any]], held: list[Sent],
                                                             group: list[Sent]) -> None:
    engine = quiet_engine
    run, unknown_customer = new_id(), new_id()
    answers = []
    for tenant, create in ((tenants[GROUPED], _grouped_without_falling_back),
                           (tenants[ONE_BY_ONE], _one_by_one)):
        held_answers = _one_by_one(engine, [_request(tenant, sent, run, lines, unknown_customer) for sent in held])
        labels = tenant.labels | {answer.order.id: f"held {index}" for index, answer in enumerate(held_answers)
                                  if isinstance(answer, HeldOrder)}
        made = create(engine, [_request(tenant, sent, run, lines, unknown_customer) for sent in group])
        labels |= {answer.order.id: f"request {index}" for index, answer in enumerate(made)
                   if isinstance(answer, HeldOrder)}
        answers.append(([_answer(answer, labels) for answer in made], _stored(engine, tenant, run), made))

    (grouped, (grouped_numbers, grouped_rows), made), (alone, (alone_numbers, alone_rows), _) = answers
    assert grouped == alone
    assert grouped_rows == alone_rows
    # The group's orders took consecutive numbers, in the order of the requests.
    numbers = [int(answer.order.number) for answer in made if isinstance(answer, HeldOrder)]
    assert numbers == list(range(min(numbers, default=0), min(numbers, default=0) + len(numbers)))
    assert len(set(grouped_numbers)) == len(grouped_numbers) == len(alone_numbers)


def _grouped_without_falling_back(engine: sa.Engine, requests: list[OrderRequest]) -> list[HeldOrder | ApiError]:
    """The requests as one group, which must be written as one: nothing else writes these stores' orders, so a
    fall back to one by one would hide a group that broke a unique key."""
    with mock.patch.object(order_store, "_created_alone", side_effect=AssertionError("the group fell back")):
        return create_orders(engine, requests)


def test_concurrent_posts_are_grouped_and_each_answered_as_if_alone(shop: Shop, business: Shop) -> None:
    """16 POSTs at once over HTTP to two eCom stores: valid orders, repeats of their keys, an unknown SKU and a wrong
    campaign price. The first group's write is held back a moment, so that the rest queue behind it."""
    regular, campaign = shop.regular_sku(), shop.campaign_skus("VINTERSALG")[0]
    with shop.engine.connect() as conn:
        customer_id = conn.scalar(sa.select(ecom_stores.c.default_customer_id).where(ecom_stores.c.id == shop.id))
    sent: list[tuple[Shop, dict[str, Any], str]] = []
    for quantity in range(1, 5):
        first = new_order(order_line(regular, quantity))
        # Two orders with one externalOrderId: whichever the server takes first is created, the other is 409.
        sent += [(shop, first, "one of a pair"),
                 (shop, {**new_order(order_line(regular)), "externalOrderId": first["externalOrderId"]},
                  "one of a pair"),
                 (business, new_order(order_line(regular, quantity), customerId=customer_id), "created")]
    sent += [(shop, new_order(order_line(regular), {"skuNumber": "NO-SUCH-SKU", "quantity": 1, "netUnitPrice": "1",
                                                    "vatRate": "25"}), "unknown SKU"),
             (business, new_order(order_line(campaign, 1, campaign.price.normalize(), campaignCode="VINTERSALG"),
                                  customerId=customer_id), "wrong price"),
             (shop, new_order(order_line(regular), customerId=new_id()), "unknown customer"),
             (business, new_order(order_line(regular)), "no customer")]
    sizes: list[int] = []
    start = threading.Barrier(len(sent))
    responses: dict[int, httpx.Response] = {}

    def post(index: int, target: Shop, body: dict[str, Any]) -> None:
        start.wait()
        responses[index] = target.post(body)

    with mock.patch.object(order_groups, "create_orders", _recording(order_groups.create_orders, sizes)):
        threads = [threading.Thread(target=post, args=(index, target, body))
                   for index, (target, body, _) in enumerate(sent)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    assert sum(sizes) == len(sent) and max(sizes) > 1, sizes

    created = {}
    for index, (target, body, expected) in enumerate(sent):
        response = responses[index]
        if response.status_code == 202:
            assert expected in ("created", "one of a pair"), response.text
            order = target.get(f"/orders/{response.json()['id']}").json()
            assert (order["externalOrderNumber"], order["lineItems"][0]["quantity"]) == (
                body["externalOrderNumber"], str(body["lineItems"][0]["quantity"]))
            assert body["externalOrderId"] not in created
            created[body["externalOrderId"]] = order
    refusals = {"one of a pair": (409, "DUPLICATE_ORDER"), "unknown SKU": (404, "SKU_NOT_FOUND"),
                "wrong price": (400, "INVALID_REQUEST"), "unknown customer": (404, "CUSTOMER_NOT_FOUND"),
                "no customer": (400, "INVALID_REQUEST")}
    for index, (_, body, expected) in enumerate(sent):
        response = responses[index]
        if response.status_code != 202:
            assert (response.status_code, response.json()["error"]) == refusals[expected], response.text
        if expected == "one of a pair" and response.status_code == 409:
            assert response.json()["details"]["existingOrderId"] == created[body["externalOrderId"]]["id"]
        if expected == "wrong price":
            assert response.json()["details"]["errors"][0]["code"] == "CAMPAIGN_PRICE_MISMATCH"
        if expected == "no customer":
            assert response.json()["details"]["errors"][0]["code"] == "REQUIRED"
    numbers = [int(order["number"]) for order in created.values()]
    assert len(created) == 8 and len(set(numbers)) == 8


def _recording(create: Callable, sizes: list[int]) -> Callable:
    """create_orders, noting each group's size; the first group is held back a moment, as a slow write would be."""
    def recorded(engine: sa.Engine, requests: list[OrderRequest]) -> list[HeldOrder | ApiError]:
        if not sizes:
            time.sleep(0.5)
        sizes.append(len(requests))
        return create(engine, requests)

    return recorded
