"""The upload checker's two paths apply one rule set: Hypothesis properties over valid and damaged batches.

The fast path (columns, RE2, Arrow casts, Polars' decimal reader) must accept exactly the items in which the exact
path (value by value, Python) finds nothing wrong, and a batch it accepts must become the table the exact reading
of the same items gives.
"""

from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts import formats
from contracts.batch_kinds import REPLENISHMENT_PARAMETER, SALES_FORECAST
from contracts.limits import MAX_DECIMAL_PLACES, MAX_HORIZON_DAYS, MAX_HORIZON_START_AGE_DAYS
from ingest import envelope
from ingest.envelope import check_batch
from tests.strategies import DECIMALS, KEYS, examples, near

TODAY = date(2026, 11, 21)
ABSENT = object()  # a mutation that leaves the field out

PRINTABLE = st.characters(blacklist_categories=["Cc", "Cs"])  # JSON text cannot carry a lone surrogate
VALID_KEYS = st.one_of(st.integers(min_value=0, max_value=10**6).map(str),
                       st.text(PRINTABLE, min_size=1, max_size=formats.MAX_KEY_LENGTH).filter(formats.KEY.matches))


@st.composite
def valid_decimals(draw: st.DrawFn) -> str:
    """Every shape the rule allows: up to 14 digits before the point (leading zeros too), up to 4 after."""
    whole = draw(st.integers(min_value=1, max_value=formats.DECIMAL_INTEGER_DIGITS))
    places = draw(st.integers(min_value=0, max_value=MAX_DECIMAL_PLACES))
    text = f"{draw(st.integers(min_value=0, max_value=10**whole - 1)):0{whole}d}"
    return text + (f".{draw(st.integers(min_value=0, max_value=10**places - 1)):0{places}d}" if places else "")


VALID_DECIMALS = st.one_of(st.sampled_from(["0", "1", "1.5", "2.25", "12"]), valid_decimals())
DATES = near(st.one_of(
    st.dates(min_value=TODAY - timedelta(days=MAX_HORIZON_START_AGE_DAYS + 2), max_value=TODAY + timedelta(days=3)),
    st.dates(), st.sampled_from([date(2024, 2, 29), date(9999, 12, 31), date(1, 1, 1)]),
).map(date.isoformat) | st.from_regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", fullmatch=True))
ODD_VALUES = st.sampled_from([None, True, 0, 7, 1.5, -1, [], ["1"], {}, {"a": 1}])  # of another JSON type


@st.composite
def forecast_items(draw: st.DrawFn) -> list[dict[str, Any]]:
    count = draw(st.integers(min_value=1, max_value=6))
    keys = draw(st.lists(st.tuples(st.booleans(), VALID_KEYS, VALID_KEYS), min_size=count, max_size=count,
                         unique_by=lambda key: key))
    items = []
    for retail, store, sku in keys:
        days = draw(st.sampled_from([1, 2, 3, 30, MAX_HORIZON_DAYS]))
        start = TODAY - timedelta(days=draw(st.integers(min_value=-5, max_value=MAX_HORIZON_START_AGE_DAYS)))
        item = {"retailStoreNumber" if retail else "ecomStoreNumber": store, "skuNumber": sku,
                "horizonStartDate": start.isoformat(), "horizonEndDate": (start + timedelta(days=days - 1)).isoformat(),
                "quantities": draw(st.lists(VALID_DECIMALS, min_size=days, max_size=days))}
        if draw(st.booleans()):
            item["ext"] = {"note": draw(st.text(max_size=5))}
        items.append(item)
    return items


@st.composite
def replenishment_items(draw: st.DrawFn) -> list[dict[str, Any]]:
    keys = draw(st.lists(st.tuples(VALID_KEYS, VALID_KEYS), min_size=1, max_size=6, unique=True))
    items = []
    for store, sku in keys:
        low, high = sorted(draw(st.lists(VALID_DECIMALS, min_size=2, max_size=2, unique_by=Decimal)), key=Decimal)
        items.append({"retailStoreNumber": store, "skuNumber": sku, "reorderPoint": low, "maximumInventory": high})
    return items


STRATEGIES = {SALES_FORECAST: forecast_items(), REPLENISHMENT_PARAMETER: replenishment_items()}


def quantities_near_the_edge(days: int) -> st.SearchStrategy[Any]:
    return st.one_of(st.lists(DECIMALS, min_size=days, max_size=days), st.sampled_from([[], "1", None]))


FIELD_VALUES = {
    "retailStoreNumber": KEYS, "ecomStoreNumber": KEYS, "skuNumber": KEYS, "horizonStartDate": DATES,
    "horizonEndDate": DATES, "reorderPoint": DECIMALS, "maximumInventory": DECIMALS,
    "ext": st.sampled_from([{}, "x", [], None]), "colour": st.just("red"),
}
KEY_FIELDS = ("retailStoreNumber", "ecomStoreNumber", "skuNumber")


def _horizon(item: dict[str, Any], start: date, days: int) -> dict[str, Any]:
    """The item with a horizon that is consistent (end = start + days - 1) unless it cannot be written."""
    try:
        end = (start + timedelta(days=days - 1)).isoformat()
    except OverflowError:  # past 9999-12-31
        end = "9999-12-31"
    return {**item, "horizonStartDate": start.isoformat(), "horizonEndDate": end, "quantities": ["1"] * days}


@st.composite
def mutated(draw: st.DrawFn, kind: str, items: list[Any], index: int) -> Any:
    """items[index] with one rule taken to its edge, every other rule kept where possible."""
    item = items[index]
    if type(item) is not dict or draw(st.integers(0, 19)) == 0:
        return draw(ODD_VALUES)  # the item itself is not an object
    mutations = ["field", "duplicate"] + (["quantities", "horizon length", "horizon start", "horizon at the end"]
                                          if kind == SALES_FORECAST else ["reorder point vs maximum"])
    mutation = draw(st.sampled_from(mutations))
    if mutation == "duplicate":  # the store and SKU of another item
        other = items[draw(st.integers(min_value=0, max_value=len(items) - 1))]
        if type(other) is not dict:
            return item
        others = {name: other[name] for name in KEY_FIELDS if name in other}
        return {**{name: value for name, value in item.items() if name not in KEY_FIELDS}, **others}
    if mutation == "horizon length":
        days = draw(st.sampled_from([0, 1, MAX_HORIZON_DAYS, MAX_HORIZON_DAYS + 1]))
        return _horizon(item, formats.date_value(str(item.get("horizonStartDate"))) or TODAY, days)
    if mutation == "horizon start":
        age = draw(st.sampled_from([MAX_HORIZON_START_AGE_DAYS, MAX_HORIZON_START_AGE_DAYS + 1,
                                    (TODAY - date(1, 1, 1)).days]))
        return _horizon(item, TODAY - timedelta(days=age), draw(st.sampled_from([1, 3])))
    if mutation == "horizon at the end":
        return _horizon(item, draw(st.sampled_from([date(9999, 12, 31), date(9999, 12, 30)])), 2)
    if mutation == "reorder point vs maximum":
        maximum = str(item.get("maximumInventory"))
        value = draw(st.sampled_from([maximum, maximum + ".0", "0" + maximum, "99999999999999.9999"]))
        return {**item, "reorderPoint": value}
    if mutation == "quantities":
        days = len(item["quantities"]) if type(item.get("quantities")) is list else 1
        name, value = "quantities", draw(quantities_near_the_edge(days))
    else:
        name = draw(st.sampled_from(list(FIELD_VALUES)))
        value = draw(st.one_of(FIELD_VALUES[name], ODD_VALUES, st.just(ABSENT)))
    return {k: v for k, v in {**item, name: value}.items() if v is not ABSENT}


@st.composite
def damaged(draw: st.DrawFn, kind: str) -> list[Any]:
    """A valid batch, then none, one or a few items with a rule taken to its edge."""
    items = draw(STRATEGIES[kind])
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        index = draw(st.integers(min_value=0, max_value=len(items) - 1))
        items[index] = draw(mutated(kind, items, index))
    return items


def exact_verdict(kind: str, items: list[Any]) -> list[dict[str, Any]]:
    errors = envelope._Errors()
    envelope._RULES[kind].exact(items, TODAY, errors)
    return errors.listed


def exact_reading(kind: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The table a valid batch must become, read value by value with the rules' own parsers."""
    if kind == SALES_FORECAST:
        return [{"item_index": index, "retail_store_number": item.get("retailStoreNumber"),
                 "ecom_store_number": item.get("ecomStoreNumber"), "sku_number": item["skuNumber"],
                 "horizon_start_date": formats.date_value(item["horizonStartDate"]),
                 "horizon_end_date": formats.date_value(item["horizonEndDate"]),
                 "quantities": [formats.decimal_value(quantity) for quantity in item["quantities"]]}
                for index, item in enumerate(items)]
    return [{"item_index": index, "retail_store_number": item["retailStoreNumber"], "sku_number": item["skuNumber"],
             "reorder_point": formats.decimal_value(item["reorderPoint"]),
             "maximum_inventory": formats.decimal_value(item["maximumInventory"])} for index, item in enumerate(items)]


@pytest.mark.parametrize("kind", [SALES_FORECAST, REPLENISHMENT_PARAMETER])
@given(data=st.data())
@settings(max_examples=200, deadline=None)
def test_both_paths_agree_on_every_batch(kind: str, data: st.DataObject) -> None:
    items = data.draw(damaged(kind))
    errors = exact_verdict(kind, items)
    fast = envelope._RULES[kind].fast(items, TODAY)
    assert (fast is not None) == (not errors), errors
    if fast is not None:
        assert fast.to_pylist() == exact_reading(kind, items)


@pytest.mark.parametrize("kind", [SALES_FORECAST, REPLENISHMENT_PARAMETER])
@given(data=st.data())
@settings(max_examples=100, deadline=None)
def test_a_valid_batch_becomes_the_exact_reading(kind: str, data: st.DataObject) -> None:
    items = data.draw(STRATEGIES[kind])
    raw = orjson.dumps({"generatedAt": "2026-11-21T02:00:00Z", "itemCount": len(items), "items": items})
    assert check_batch(kind, raw, TODAY).items.to_pylist() == exact_reading(kind, items)


# Value by value: each column reader of the fast path against the rule it applies.

@given(KEYS)
@settings(max_examples=200)
def test_the_fast_path_reads_keys_by_the_rule(text: str) -> None:
    assert (envelope._keys([text], required=True) is not None) is formats.KEY.matches(text)


@given(DATES)
@settings(max_examples=200)
@examples("0000-01-01", "0001-01-01", "9999-12-31", "2024-02-29", "2026-02-29", "2026-13-01", "+2026-11-21")
def test_the_fast_path_reads_dates_by_the_rule(text: str) -> None:
    dates = envelope._dates([text])
    assert (None if dates is None else dates[0].as_py()) == formats.date_value(text)


@given(st.lists(DECIMALS, min_size=1, max_size=3))
@settings(max_examples=200)
def test_the_fast_path_reads_decimals_by_the_rule(texts: list[str]) -> None:
    values = envelope._decimals("\n".join(texts), len(texts))
    expected = [formats.decimal_value(text) for text in texts]
    assert (None if values is None else values.to_pylist()) == (None if None in expected else expected)
