"""Reads of held demand planning data: order, store-bounded keyset pages, expiry, resolution, tenancy."""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

import orjson
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from db import held, held_export
from db.backoffice import load_document
from db.held import ForecastKey, ParameterKey
from db.held_export import replenishment_parameter_arrow_page, sales_forecast_arrow_page
from db.held_quantities import stored_value
from db.ids import new_id
from db.schema import assortment_lines, assortments, retail_stores, sales_forecasts, skus, store_assortment_lines
from db.tenants import create_tenant
from serving.demo_data import BASE_CODE, DEMO_RESOLUTION_EXAMPLES, LOCAL_CODE, demo_document
from serving.rendering.held_pages import page_json

TODAY = date(2026, 11, 21)
GENERATED = datetime(2026, 11, 20, 2, 0, tzinfo=UTC)
MODIFIED = datetime(2026, 11, 20, 3, 30, tzinfo=UTC)

# (is_ecom, store number, SKU numbers): stores of different sizes; eCom "0500" sorts first by number but
# comes after every retail store.
FORECAST_STORES = (
    (False, "1001", ("100001", "100002", "100003")),
    (False, "1002", ("100005",)),
    (False, "1003", ("100001", "100002", "100010", "100011")),
    (True, "0500", ("100001", "100002")),
    (True, "2001", ("100007", "100008", "100009")),
)
# Expired yesterday: one beside live rows, and the only row of its store.
EXPIRED = ((False, "1002", "100006"), (False, "1004", "100001"))

PARAMETER_ROWS = 60 + 50 + 50 + 60  # 1001 and 1004 carry the local assortment; 1002A, between them, has no assortment


def forecast_row(tenant_id: str, is_ecom: bool, store: str, sku: str, *, end: date, quantity: str) -> dict[str, Any]:
    days = (end - TODAY).days + 2
    return {"tenant_id": tenant_id, "is_ecom": is_ecom, "store_number": store, "sku_number": sku,
            "horizon_start_date": TODAY - timedelta(days=1), "horizon_end_date": end,
            "quantities": stored_value([quantity] * days), "generated_at": GENERATED,
            "modified_time": MODIFIED, "batch_id": new_id()}


def seed(engine: sa.Engine, label: str, quantity: str = "1.5") -> str:
    """A tenant with the demo back office, a store without assortment, and held forecasts."""
    tenant_id = create_tenant(engine, label, is_test=True)
    document = demo_document(label)
    document["retailStores"].append({"number": "1002A", "name": "Uten sortiment", "companyNumber": "10",
                                     "released": True})
    load_document(engine, tenant_id, document)
    # The last store's horizon ends today: still held today.
    live = [forecast_row(tenant_id, is_ecom, store, sku, quantity=quantity,
                         end=TODAY + timedelta(days=0 if store == "2001" else 13))
            for is_ecom, store, numbers in FORECAST_STORES for sku in numbers]
    expired = [forecast_row(tenant_id, *key, end=TODAY - timedelta(days=1), quantity=quantity) for key in EXPIRED]
    with engine.begin() as conn:
        conn.execute(sales_forecasts.insert(), live + expired)
    return tenant_id


@pytest.fixture(scope="module")
def tenant(engine: sa.Engine) -> str:
    return seed(engine, f"held reads {new_id()}")


@pytest.fixture(scope="module")
def other_tenant(engine: sa.Engine) -> str:
    """The same store and SKU numbers in another tenant, with other values."""
    other = seed(engine, f"held reads other {new_id()}", quantity="7")
    with engine.begin() as conn:
        conn.execute(store_assortment_lines.update().where(store_assortment_lines.c.tenant_id == other)
                     .values(reorder_point=1, maximum_inventory=2))
    return other


@dataclass(frozen=True)
class Page:
    """A store page rendered as the API renders it."""
    items: list[dict[str, Any]]
    next: Any


def forecast_page(engine: sa.Engine, tenant_id: str, **query: Any) -> Page:
    page = sales_forecast_arrow_page(engine, tenant_id, **query)
    return Page(orjson.loads(page_json(page.table, None))["items"], page.next)


def parameter_page(engine: sa.Engine, tenant_id: str, **query: Any) -> Page:
    page = replenishment_parameter_arrow_page(engine, tenant_id, **query)
    return Page(orjson.loads(page_json(page.table, None))["items"], page.next)


def crawl(read: Callable[[Any], Page], limit: int) -> list[list[dict[str, Any]]]:
    """Every page, following next through a cursor-like round trip until it is None."""
    pages: list[list[dict[str, Any]]] = []
    after = None
    while True:
        page = read(after)
        assert 0 < len(page.items) <= limit or (not pages and page.next is None)
        pages.append(page.items)
        if page.next is None:
            return pages
        after = type(page.next).from_dict(orjson.loads(orjson.dumps(page.next.to_dict())))
        assert len(pages) < 1000, "paging does not end"


def store_of(item: dict[str, Any]) -> tuple[str | None, str | None]:
    return item["retailStoreNumber"], item.get("ecomStoreNumber")


def assert_paged(pages: list[list[dict[str, Any]]], expected: list[dict[str, Any]]) -> None:
    assert [item for page in pages for item in page] == expected
    for page in pages:
        assert len({store_of(item) for item in page}) == 1


# --- sales forecasts ------------------------------------------------------------------------------------

def forecasts(engine: sa.Engine, tenant_id: str, limit: int, *, retail: str | None = None,
              ecom: str | None = None) -> Callable[[ForecastKey | None], Page]:
    return lambda after: forecast_page(engine, tenant_id, retail_store_number=retail, ecom_store_number=ecom,
                                       after=after, limit=limit, today=TODAY)


def expected_forecasts(quantity: str = "1.5") -> list[dict[str, Any]]:
    return [{"retailStoreNumber": None if is_ecom else store, "ecomStoreNumber": store if is_ecom else None,
             "skuNumber": sku, "horizonStartDate": "2026-11-20",
             "horizonEndDate": "2026-11-21" if store == "2001" else "2026-12-04",
             "quantities": [quantity] * (2 if store == "2001" else 15),
             "generatedAt": "2026-11-20T02:00:00Z", "modifiedTime": "2026-11-20T03:30:00Z"}
            for is_ecom, store, numbers in FORECAST_STORES for sku in numbers]


@pytest.mark.parametrize("limit", [1, 2, 1000])
def test_forecast_pages_visit_every_unexpired_row_once_in_order(engine: sa.Engine, tenant: str, limit: int) -> None:
    assert_paged(crawl(forecasts(engine, tenant, limit), limit), expected_forecasts())


def test_a_forecast_page_stops_at_the_store_boundary(engine: sa.Engine, tenant: str) -> None:
    first = forecast_page(engine, tenant, retail_store_number=None, ecom_store_number=None, after=None,
                                limit=1000, today=TODAY)
    assert [item["skuNumber"] for item in first.items] == ["100001", "100002", "100003"]
    assert first.next == ForecastKey(False, "1001", "100003")

    second = forecast_page(engine, tenant, retail_store_number=None, ecom_store_number=None,
                                 after=first.next, limit=1000, today=TODAY)
    # 1002's expired row is gone, so its one live row is the page.
    assert [(item["retailStoreNumber"], item["skuNumber"]) for item in second.items] == [("1002", "100005")]


def test_the_last_forecast_page_has_no_next(engine: sa.Engine, tenant: str) -> None:
    last = forecast_page(engine, tenant, retail_store_number=None, ecom_store_number=None,
                               after=ForecastKey(True, "2001", "100007"), limit=2, today=TODAY)
    assert [item["skuNumber"] for item in last.items] == ["100008", "100009"]
    assert last.next is None


@pytest.mark.parametrize(("retail", "ecom"), [("1003", None), (None, "0500"), (None, "2001")])
def test_forecasts_of_one_store(engine: sa.Engine, tenant: str, retail: str | None, ecom: str | None) -> None:
    expected = [item for item in expected_forecasts() if store_of(item) == (retail, ecom)]
    for limit in (1, 1000):
        assert_paged(crawl(forecasts(engine, tenant, limit, retail=retail, ecom=ecom), limit), expected)


def test_a_store_number_names_a_retail_or_an_ecom_store(engine: sa.Engine, tenant: str) -> None:
    page = forecasts(engine, tenant, 10, ecom="1001")(None)
    assert page.items == [] and page.next is None


def test_expired_forecasts_are_not_returned(engine: sa.Engine, tenant: str) -> None:
    page = forecasts(engine, tenant, 10, retail="1004")(None)
    assert page.items == [] and page.next is None
    # The day after, the horizons that ended today have expired too.
    later = forecast_page(engine, tenant, retail_store_number=None, ecom_store_number="2001", after=None,
                                limit=10, today=TODAY + timedelta(days=1))
    assert later.items == [] and later.next is None


def test_forecasts_of_another_tenant_are_not_visible(engine: sa.Engine, tenant: str, other_tenant: str) -> None:
    assert_paged(crawl(forecasts(engine, tenant, 1000), 1000), expected_forecasts())
    assert_paged(crawl(forecasts(engine, other_tenant, 1000), 1000), expected_forecasts(quantity="7"))



# Digits only: PostgreSQL's collation and DuckDB's byte order agree on them, so Python's sort is the expected one.
_numbers = st.sampled_from(["0500", "1", "10", "100", "1001", "1002", "10020", "2", "99"])


@given(held=st.dictionaries(st.tuples(st.booleans(), _numbers, _numbers), st.booleans(), max_size=25),
       limit=st.integers(1, 6), one_store=st.none() | st.tuples(st.booleans(), _numbers))
@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_held_forecasts_are_paged_in_key_order_once_each(engine: sa.Engine,
                                                             held: dict[tuple[bool, str, str], bool], limit: int,
                                                             one_store: tuple[bool, str] | None) -> None:
    """Whatever stores, SKUs and expiries are held, following the pages visits every live row once, in key order
    (retail stores first), each page within one store; optionally of one store. PostgreSQL seeks its index,
    DuckDB reads through the filters it pushes into its scan (db.held.first_store_after): one answer."""
    tenant_id = create_tenant(engine, f"held pages {new_id()}", is_test=True)
    if held:
        with engine.begin() as conn:
            conn.execute(sales_forecasts.insert(), [
                forecast_row(tenant_id, is_ecom, store, sku, quantity="2",
                             end=TODAY - timedelta(days=1) if expired else TODAY + timedelta(days=3))
                for (is_ecom, store, sku), expired in held.items()])
    live = sorted(key for key, expired in held.items() if not expired
                  and (one_store is None or key[:2] == one_store))
    retail, ecom = (None, None) if one_store is None else (
        (one_store[1], None) if not one_store[0] else (None, one_store[1]))
    pages = crawl(forecasts(engine, tenant_id, limit, retail=retail, ecom=ecom), limit)
    assert [(item["ecomStoreNumber"] is not None, item["retailStoreNumber"] or item["ecomStoreNumber"],
             item["skuNumber"]) for page in pages for item in page] == live
    assert all(len({store_of(item) for item in page}) == 1 for page in pages if live)



def test_a_duckdb_page_reads_its_store_in_the_snapshot_it_found_it_in(engine: sa.Engine, monkeypatch) -> None:
    """DuckDB reads a page in two statements (db.held.first_store_after, then the store's rows): a batch that
    replaces the store's forecasts in between is not half seen; the page is the store as it was when found."""
    if engine.dialect.name != "duckdb":
        pytest.skip("PostgreSQL reads a page in one statement")
    tenant_id = create_tenant(engine, f"held snapshot {new_id()}", is_test=True)
    live = TODAY + timedelta(days=3)
    with engine.begin() as conn:
        conn.execute(sales_forecasts.insert(), [forecast_row(tenant_id, False, store, sku, end=live, quantity="1")
                                                for store in ("1001", "1002") for sku in ("1", "2", "3")])
    found = held.first_store_after

    def found_then_changed(*args: Any) -> tuple[Any, ...] | None:
        store = found(*args)
        with engine.begin() as other:  # committed before the page's rows are read
            other.execute(sales_forecasts.delete().where(sales_forecasts.c.tenant_id == tenant_id,
                                                         sales_forecasts.c.store_number == "1001"))
        return store

    monkeypatch.setattr(held_export, "first_store_after", found_then_changed)
    page = forecasts(engine, tenant_id, 2)(None)
    assert [(item["retailStoreNumber"], item["skuNumber"]) for item in page.items] == [("1001", "1"), ("1001", "2")]
    assert page.next == ForecastKey(False, "1001", "2")


# --- replenishment parameters ---------------------------------------------------------------------------

def parameters(engine: sa.Engine, tenant_id: str, limit: int, *, retail: str | None = None,
               since: datetime | None = None) -> Callable[[ParameterKey | None], Page]:
    return lambda after: parameter_page(engine, tenant_id, retail_store_number=retail,
                                                      modified_since=since, after=after, limit=limit)


def all_parameters(engine: sa.Engine, tenant_id: str, **filters: Any) -> dict[tuple[str, str], dict[str, Any]]:
    items = [item for page in crawl(parameters(engine, tenant_id, 5000, **filters), 5000) for item in page]
    return {(item["retailStoreNumber"], item["skuNumber"]): item for item in items}


def test_parameter_pages_visit_every_row_once_in_order(engine: sa.Engine, tenant: str) -> None:
    expected = list(all_parameters(engine, tenant).values())
    assert len(expected) == PARAMETER_ROWS
    assert [(item["retailStoreNumber"], item["skuNumber"]) for item in expected] == sorted(
        (item["retailStoreNumber"], item["skuNumber"]) for item in expected)
    for limit in (1, 2, 7, 1000):
        assert_paged(crawl(parameters(engine, tenant, limit), limit), expected)


def test_a_parameter_page_stops_at_the_store_boundary(engine: sa.Engine, tenant: str) -> None:
    first = parameters(engine, tenant, 1000)(None)
    assert {item["retailStoreNumber"] for item in first.items} == {"1001"} and len(first.items) == 60
    assert first.next == ParameterKey("1001", "100060")
    second = parameters(engine, tenant, 1000)(first.next)
    assert {item["retailStoreNumber"] for item in second.items} == {"1002"} and len(second.items) == 50
    assert second.next == ParameterKey("1002", "100050")


def test_parameters_resolve_from_each_source(engine: sa.Engine, tenant: str) -> None:
    held = all_parameters(engine, tenant)
    assert {key: held[key]["parameterSource"] for key in DEMO_RESOLUTION_EXAMPLES} == DEMO_RESOLUTION_EXAMPLES
    values = {key: (item["replenishmentType"], item["reorderPoint"], item["maximumInventory"], item["locked"])
              for key, item in held.items()}
    assert values[("1001", "100001")] == ("AUTO", "20", "60", True)  # store-specific, locked
    assert values[("1001", "100051")] == ("AUTO", "8", "24", False)  # store-specific, not locked
    assert values[("1001", "100002")] == ("AUTO", "10", "30", False)  # the local assortment's override
    assert values[("1001", "100020")] == ("MANUAL", "9", "27", False)  # the base assortment, ordered by hand
    assert values[("1002", "100001")] == ("AUTO", "4", "12", False)
    assert values[("1002", "100010")] == ("MANUAL", "30", "90", True)  # store-specific, MANUAL
    assert values[("1004", "100055")][0] == "MANUAL"  # the local assortment's own fresh cod
    assert not any(store == "1002A" for store, _ in held)


def test_parameters_of_one_store(engine: sa.Engine, tenant: str) -> None:
    expected = [item for item in all_parameters(engine, tenant).values() if item["retailStoreNumber"] == "1003"]
    assert len(expected) == 50
    for limit in (3, 1000):
        assert_paged(crawl(parameters(engine, tenant, limit, retail="1003"), limit), expected)
    assert parameters(engine, tenant, 10, retail="1002A")(None) == Page([], None)


def set_modified_time(conn: sa.Connection, tenant_id: str, when: datetime, *, assortment: str | None = None,
                      store: str | None = None, sku: str | None = None) -> None:
    """Stamps every line of the tenant, or the one line of an assortment or a store for a SKU."""
    if assortment is None and store is None:
        for table in (assortment_lines, store_assortment_lines):
            conn.execute(table.update().where(table.c.tenant_id == tenant_id).values(modified_time=when))
        return
    sku_id = sa.select(skus.c.id).where(skus.c.tenant_id == tenant_id, skus.c.number == sku).scalar_subquery()
    if assortment is not None:
        owner = sa.select(assortments.c.id).where(assortments.c.tenant_id == tenant_id,
                                                  assortments.c.code == assortment).scalar_subquery()
        conn.execute(assortment_lines.update().where(assortment_lines.c.assortment_id == owner,
                                                     assortment_lines.c.sku_id == sku_id).values(modified_time=when))
    else:
        owner = sa.select(retail_stores.c.id).where(retail_stores.c.tenant_id == tenant_id,
                                                    retail_stores.c.number == store).scalar_subquery()
        lines = store_assortment_lines
        conn.execute(lines.update().where(lines.c.retail_store_id == owner, lines.c.sku_id == sku_id)
                     .values(modified_time=when))


def test_modified_since_returns_rows_whose_values_changed_after_it(engine: sa.Engine) -> None:
    tenant_id = seed(engine, f"modified since {new_id()}")
    before, since, after = (datetime(2026, 11, 21, hour, tzinfo=UTC) for hour in (1, 2, 3))
    with engine.begin() as conn:
        set_modified_time(conn, tenant_id, before)
        # A base line reaches only the stores that take their values from it: not 1001 (store-specific
        # line) nor 1004 (local override).
        set_modified_time(conn, tenant_id, after, assortment=BASE_CODE, sku="100001")
        set_modified_time(conn, tenant_id, after, assortment=LOCAL_CODE, sku="100002")
        set_modified_time(conn, tenant_id, after, store="1002", sku="100010")
        set_modified_time(conn, tenant_id, since, assortment=BASE_CODE, sku="100003")  # not after: excluded

    changed = all_parameters(engine, tenant_id, since=since)

    assert sorted(changed) == [("1001", "100002"), ("1002", "100001"), ("1002", "100010"),
                               ("1003", "100001"), ("1004", "100002")]
    assert {item["modifiedTime"] for item in changed.values()} == {"2026-11-21T03:00:00Z"}
    assert_paged(crawl(parameters(engine, tenant_id, 1, since=since), 1), list(changed.values()))
    assert list(all_parameters(engine, tenant_id, retail="1002", since=since)) == [("1002", "100001"),
                                                                                   ("1002", "100010")]


def test_a_store_line_without_values_sets_type_and_lock_only(engine: sa.Engine) -> None:
    tenant_id = create_tenant(engine, f"store line without values {new_id()}", is_test=True)
    document = demo_document("store line without values")
    document["storeAssortmentLines"].append({"retailStoreNumber": "1003", "skuNumber": "100003",
                                             "replenishmentType": "MANUAL", "locked": True})
    load_document(engine, tenant_id, document)

    item = all_parameters(engine, tenant_id, retail="1003")[("1003", "100003")]

    assert (item["replenishmentType"], item["reorderPoint"], item["maximumInventory"]) == ("MANUAL", "6", "18")
    assert (item["parameterSource"], item["locked"]) == ("BASE_ASSORTMENT", True)


def test_parameters_of_another_tenant_are_not_visible(engine: sa.Engine, tenant: str, other_tenant: str) -> None:
    mine, theirs = all_parameters(engine, tenant), all_parameters(engine, other_tenant)
    assert len(mine) == len(theirs) == PARAMETER_ROWS
    assert (mine[("1001", "100001")]["reorderPoint"], theirs[("1001", "100001")]["reorderPoint"]) == ("20", "1")


# A held line: its replenishment type, its reorder point and maximum inventory (either may be absent), and the
# hour of its modified time.
_VALUE = st.none() | st.sampled_from(["0", "1", "2.5", "12", "30.25"])
_LINE = st.tuples(st.sampled_from(["AUTO", "MANUAL"]), _VALUE, _VALUE, st.integers(1, 4))
_ASSORTMENTS = ("A", "B", "C")


@given(stores=st.dictionaries(_numbers, st.tuples(st.none() | st.sampled_from(_ASSORTMENTS),
                                                  st.none() | st.sampled_from(_ASSORTMENTS)), max_size=5),
       assortment_lines_held=st.dictionaries(st.tuples(st.sampled_from(_ASSORTMENTS), _numbers), _LINE, max_size=12),
       store_lines=st.dictionaries(st.tuples(_numbers, _numbers), st.tuples(_LINE, st.booleans()), max_size=8),
       since_hour=st.none() | st.integers(1, 4), limit=st.integers(1, 6), one_store=st.none() | _numbers)
@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_back_office_resolves_its_parameters_and_pages_them_once_each(
        engine: sa.Engine, stores: dict[str, tuple[str | None, str | None]],
        assortment_lines_held: dict[tuple[str, str], tuple], store_lines: dict[tuple[str, str], tuple],
        since_hour: int | None, limit: int, one_store: str | None) -> None:
    """Whatever the stores, their base and local assortments (absent, or one assortment for both) and the lines
    (with values or without), each store and SKU of its assortments is one row, in key order: its values and
    their source from the most specific line with values (else the most specific line), the most specific type,
    the store line's lock; with modifiedSince only rows whose values changed after it; optionally of one store."""
    tenant_id = create_tenant(engine, f"parameter resolution {new_id()}", is_test=True)
    hour = lambda number: datetime(2026, 11, 21, number, tzinfo=UTC)  # noqa: E731
    ids = {name: new_id() for name in _ASSORTMENTS}
    store_ids = {number: new_id() for number in stores}
    numbers = {sku for _, sku in assortment_lines_held} | {sku for _, sku in store_lines}
    sku_ids = {number: new_id() for number in numbers}
    store_lines = {key: line for key, line in store_lines.items() if key[0] in stores}

    def values(line: tuple) -> dict[str, Any]:
        kind, reorder_point, maximum_inventory, modified = line
        return {"replenishment_type": kind, "reorder_point": reorder_point, "maximum_inventory": maximum_inventory,
                "modified_time": hour(modified)}

    held_rows = {
        skus: [{"id": sku_ids[number], "tenant_id": tenant_id, "number": number, "name": number}
               for number in numbers],
        retail_stores: [{"id": store_ids[number], "tenant_id": tenant_id, "company_id": new_id(), "number": number,
                         "name": number, "released": True, "base_assortment_id": base and ids[base],
                         "local_assortment_id": local and ids[local]} for number, (base, local) in stores.items()],
        assortment_lines: [{"tenant_id": tenant_id, "assortment_id": ids[name], "sku_id": sku_ids[sku], **values(line)}
                           for (name, sku), line in assortment_lines_held.items()],
        store_assortment_lines: [{"tenant_id": tenant_id, "retail_store_id": store_ids[store], "sku_id": sku_ids[sku],
                                  "locked": locked, **values(line)}
                                 for (store, sku), (line, locked) in store_lines.items()],
    }
    with engine.begin() as conn:
        for table, rows in held_rows.items():
            if rows:
                conn.execute(table.insert(), rows)

    # The resolution, written out: the lines of each store and SKU, most specific first.
    expected = []
    for store, (base, local) in sorted(stores.items()):
        for sku in sorted(numbers):
            held_lines = [(source, line) for source, line in (
                ("RETAIL_STORE_SPECIFIC", store_lines.get((store, sku), (None,))[0]),
                ("LOCAL_ASSORTMENT", assortment_lines_held.get((local, sku))),
                ("BASE_ASSORTMENT", assortment_lines_held.get((base, sku)))) if line is not None]
            if not held_lines or one_store not in (None, store):
                continue
            with_values = [(source, line) for source, line in held_lines if line[1] is not None or line[2] is not None]
            source, (_, reorder_point, maximum_inventory, modified) = (with_values or held_lines)[0]
            if since_hour is not None and modified <= since_hour:
                continue
            expected.append({"retailStoreNumber": store, "skuNumber": sku, "replenishmentType": held_lines[0][1][0],
                             "reorderPoint": reorder_point, "maximumInventory": maximum_inventory,
                             "parameterSource": source, "locked": store_lines.get((store, sku), (None, False))[1],
                             "modifiedTime": hour(modified).isoformat().replace("+00:00", "Z")})

    pages = crawl(parameters(engine, tenant_id, limit, retail=one_store,
                             since=None if since_hour is None else hour(since_hour)), limit)
    assert [item for page in pages for item in page] == expected
    assert all(len({item["retailStoreNumber"] for item in page}) == 1 for page in pages if expected)


# --- page keys ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key", [ForecastKey(True, "2001", "100007"), ParameterKey("1001", "100060")])
def test_page_keys_round_trip_through_plain_values(key: ForecastKey | ParameterKey) -> None:
    assert type(key).from_dict(orjson.loads(orjson.dumps(key.to_dict()))) == key


@pytest.mark.parametrize("data", [
    None, [], {}, {"is_ecom": "true", "store_number": "2001", "sku_number": "1"},
    {"is_ecom": True, "store_number": "2001"}, {"is_ecom": True, "store_number": "2001", "sku_number": 1},
    {"is_ecom": True, "store_number": "2001", "sku_number": "1", "extra": "x"},
])
def test_a_malformed_page_key_is_refused(data: Any) -> None:
    with pytest.raises(ValueError, match="ForecastKey"):
        ForecastKey.from_dict(data)
