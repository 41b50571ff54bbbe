"""Arrow pages of the held-data lists over HTTP: the JSON page value for value, cursors in X-Next-Cursor, Accept
negotiation, the contract's schemas exactly, errors and access as the JSON lists."""

import asyncio
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import pyarrow as pa
import pytest
import sqlalchemy as sa

from contracts.held_datasets import ARROW_STREAM, NEXT_CURSOR_HEADER, REPLENISHMENT_PARAMETERS, SALES_FORECASTS
from contracts.rendering import decimal, instant
from db.held_quantities import stored_value
from db.ids import new_id, utc_now
from db.schema import sales_forecasts
from serving.demo import seed_demo_tenant
from serving.routes import demand_planning
from tests.conftest import bearer, client_of, get_token

pytestmark = pytest.mark.without_shop

GENERATED = datetime(2026, 11, 20, 2, 0, 0, 123456, tzinfo=UTC)
MODIFIED = datetime(2026, 11, 20, 3, 30, tzinfo=UTC)
# Decimals at the edges of DECIMAL(18, 4): the smallest step, the largest magnitude, zero, a negative.
QUANTITIES = ["0.0001", "99999999999999.9999", "0", "-2.5", "12"]
# (is_ecom, store, SKU numbers): stores of different sizes, an eCom store whose number sorts before the retail ones.
STORES = ((False, "1001", ("100001", "100002", "100003")), (False, "1002", ("100005",)),
          (True, "0500", ("100001", "100002")), (True, "2001", ("100007", "100008", "100009")))


def held_rows(tenant_id: str, today: date, quantities: list[str]) -> list[dict[str, Any]]:
    """Held forecasts starting yesterday, one quantity per day; 1002 also holds one that expired yesterday."""
    def row(is_ecom: bool, store: str, sku: str, end: date) -> dict[str, Any]:
        days = (end - today).days + 2
        return {"tenant_id": tenant_id, "is_ecom": is_ecom, "store_number": store, "sku_number": sku,
                "horizon_start_date": today - timedelta(days=1), "horizon_end_date": end,
                "quantities": stored_value((quantities * days)[:days]), "generated_at": GENERATED,
                "modified_time": MODIFIED, "batch_id": new_id()}

    live = [row(is_ecom, store, sku, today + timedelta(days=len(numbers))) for is_ecom, store, numbers in STORES
            for sku in numbers]
    return [*live, row(False, "1002", "100006", today - timedelta(days=1))]


def seed_held(engine: sa.Engine, label: str, quantities: list[str] = QUANTITIES) -> dict[str, Any]:
    """A tenant with the demo back office (its replenishment parameters) and its clients, holding forecasts."""
    world = seed_demo_tenant(engine, f"{label} {new_id()}", is_test=True, shop=False)
    with engine.begin() as conn:
        conn.execute(sales_forecasts.insert(), held_rows(world["id"], utc_now().date(), quantities))
    return world


@pytest.fixture(scope="module")
def held_world(engine: sa.Engine) -> dict[str, Any]:
    return seed_held(engine, "columnar reads")


@pytest.fixture
def planner(http: httpx.Client, held_world: dict[str, Any]) -> tuple[str, dict[str, str]]:
    token = get_token(http, held_world, client_of(held_world, "demand_planning"))
    return f"/v1/tenants/{held_world['id']}/demand_planning", bearer(token)


def read_arrow(response: httpx.Response) -> pa.Table:
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == ARROW_STREAM
    return pa.ipc.open_stream(response.content).read_all()


def as_json(value: Any) -> Any:
    """An Arrow value as the JSON list renders it."""
    if isinstance(value, Decimal):
        return decimal(value)
    if isinstance(value, datetime):
        return instant(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, list):
        return [as_json(item) for item in value]
    return value


def walk(http: httpx.Client, url: str, headers: dict[str, str], arrow: bool) -> list[tuple[Any, str | None]]:
    """Every page of the list: (JSON items or Arrow table, the cursor to the next page)."""
    pages: list[tuple[Any, str | None]] = []
    cursor = None
    while True:
        params = {"cursor": cursor} if cursor else {}
        if arrow:
            response = http.get(url, params=params, headers={**headers, "Accept": ARROW_STREAM})
            page: tuple[Any, str | None] = (read_arrow(response), response.headers.get(NEXT_CURSOR_HEADER))
        else:
            body = http.get(url, params=params, headers=headers).json()
            page = (body["items"], body["nextCursor"])
        pages.append(page)
        cursor = page[1]
        if cursor is None:
            return pages
        assert len(pages) < 200, "paging does not end"


@pytest.mark.parametrize(("collection", "schema"), [("sales_forecasts", SALES_FORECASTS),
                                                    ("replenishment_parameters", REPLENISHMENT_PARAMETERS)])
@pytest.mark.parametrize("query", ["?limit=2", "?limit=5000"])
def test_arrow_pages_are_the_json_pages_value_for_value(http: httpx.Client, planner: tuple[str, dict[str, str]],
                                                        collection: str, schema: pa.Schema, query: str) -> None:
    url = f"{planner[0]}/{collection}{query}"
    json_pages, arrow_pages = walk(http, url, planner[1], arrow=False), walk(http, url, planner[1], arrow=True)

    assert [cursor for _, cursor in arrow_pages] == [cursor for _, cursor in json_pages]
    for (items, _), (table, _) in zip(json_pages, arrow_pages, strict=True):
        assert table.schema.equals(schema)
        assert [{name: as_json(value) for name, value in row.items()} for row in table.to_pylist()] == items
        assert table.num_rows and len({(row.get("retailStoreNumber"), row.get("ecomStoreNumber"))
                                       for row in table.to_pylist()}) == 1, "a page spans two stores"


def test_arrow_pages_carry_exact_decimals_dates_and_null_store_numbers(http: httpx.Client,
                                                                       planner: tuple[str, dict[str, str]]) -> None:
    table = read_arrow(http.get(f"{planner[0]}/sales_forecasts?ecomStoreNumber=2001",
                                headers={**planner[1], "Accept": ARROW_STREAM}))
    first = table.to_pylist()[0]
    today = utc_now().date()
    assert first["retailStoreNumber"] is None and first["ecomStoreNumber"] == "2001"
    assert (first["horizonStartDate"], first["horizonEndDate"]) == (today - timedelta(days=1),
                                                                    today + timedelta(days=3))
    assert first["quantities"] == [Decimal(text) for text in QUANTITIES]
    assert first["generatedAt"] == GENERATED


def test_an_empty_arrow_page_is_a_stream_of_the_schema_alone(http: httpx.Client,
                                                             planner: tuple[str, dict[str, str]]) -> None:
    response = http.get(f"{planner[0]}/sales_forecasts?retailStoreNumber=9999",
                        headers={**planner[1], "Accept": ARROW_STREAM})
    reader = pa.ipc.open_stream(response.content)
    assert reader.schema.equals(SALES_FORECASTS) and list(reader) == []
    assert NEXT_CURSOR_HEADER not in response.headers


@pytest.mark.parametrize(("accept", "media_type"), [
    (None, "application/json"),
    ("*/*", "application/json"),
    ("application/json", "application/json"),
    (ARROW_STREAM, ARROW_STREAM),
    (f"application/json;q=0.5, {ARROW_STREAM}", ARROW_STREAM),
    (f"{ARROW_STREAM};q=0.5, application/json", "application/json"),
    (f"text/html, {ARROW_STREAM};q=0.9", ARROW_STREAM),
])
def test_the_accept_header_chooses_arrow_or_json(http: httpx.Client, planner: tuple[str, dict[str, str]],
                                                 accept: str | None, media_type: str) -> None:
    headers = {**planner[1], **({"Accept": accept} if accept else {})}
    for collection in ("sales_forecasts", "replenishment_parameters"):
        response = http.get(f"{planner[0]}/{collection}?limit=1", headers=headers)
        assert response.status_code == 200 and response.headers["Content-Type"] == media_type


@pytest.mark.parametrize(("collection", "query", "path"), [
    ("sales_forecasts", "limit=0", "limit"), ("sales_forecasts", "cursor=abc", "cursor"),
    ("replenishment_parameters", "modifiedSince=yesterday", "modifiedSince")])
def test_arrow_pages_refuse_bad_queries_as_json_does(http: httpx.Client, planner: tuple[str, dict[str, str]],
                                                     collection: str, query: str, path: str) -> None:
    response = http.get(f"{planner[0]}/{collection}?{query}", headers={**planner[1], "Accept": ARROW_STREAM})
    assert response.status_code == 400 and response.json()["error"] == "VALIDATION_ERROR"
    assert [error["path"] for error in response.json()["details"]["errors"]] == [path]


def test_arrow_pages_need_the_permitted_demand_planning_client(http: httpx.Client,
                                                               held_world: dict[str, Any]) -> None:
    url = f"/v1/tenants/{held_world['id']}/demand_planning/sales_forecasts"
    assert http.get(url, headers={"Accept": ARROW_STREAM}).status_code == 401
    unpermitted = get_token(http, held_world, client_of(held_world, "demand_planning", permitted=False))
    assert http.get(url, headers={**bearer(unpermitted), "Accept": ARROW_STREAM}).status_code == 403


@pytest.mark.parametrize("accept", ["application/json", ARROW_STREAM])
def test_pages_are_read_and_rendered_off_the_event_loop(http: httpx.Client, planner: tuple[str, dict[str, str]],
                                                        monkeypatch: pytest.MonkeyPatch, accept: str) -> None:
    """A JSON page of 5,000 forecasts takes tens of milliseconds to render: on the event loop, every other request
    would wait for it."""
    rendered_on_loop: list[bool] = []

    def recording(render: Callable[..., bytes]) -> Callable[..., bytes]:
        def render_and_record(*args: Any) -> bytes:
            try:
                asyncio.get_running_loop()
                rendered_on_loop.append(True)
            except RuntimeError:
                rendered_on_loop.append(False)
            return render(*args)
        return render_and_record

    monkeypatch.setattr(demand_planning, "page_json", recording(demand_planning.page_json))
    monkeypatch.setattr(demand_planning, "page_arrow", recording(demand_planning.page_arrow))
    for collection in ("sales_forecasts", "replenishment_parameters"):
        response = http.get(f"{planner[0]}/{collection}", headers={**planner[1], "Accept": accept})
        assert response.status_code == 200 and response.headers["Content-Type"].startswith(accept)
    assert rendered_on_loop == [False, False]
