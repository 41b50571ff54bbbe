"""The allocation rule (rules/allocation.py) as Hypothesis properties, without a database: what it may take, where
it takes it from, and that it is the rule the README states for orders and for click and collect."""

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from rules.allocation import Allocation, Wanted, allocate

LOCATIONS = ["store", "w1", "w2", "w3"]
SKUS = ["a", "b", "c"]
ZERO = Decimal(0)

quantities = st.integers(min_value=1, max_value=9).map(Decimal)
lines = st.lists(st.builds(Wanted, line_id=st.uuids().map(str), sku_id=st.sampled_from(SKUS), quantity=quantities),
                 min_size=1, max_size=8)
locations = st.lists(st.sampled_from(LOCATIONS), unique=True, max_size=len(LOCATIONS))
stock = st.dictionaries(st.tuples(st.sampled_from(LOCATIONS), st.sampled_from(SKUS)),
                        st.integers(min_value=0, max_value=12).map(Decimal))


def taken(allocation: Allocation) -> dict[tuple[str, str], Decimal]:
    per_pair: dict[tuple[str, str], Decimal] = {}
    for line in allocation.lines:
        if line.location_id is not None:
            key = (line.location_id, line.line.sku_id)
            per_pair[key] = per_pair.get(key, ZERO) + line.quantity
    return per_pair


@given(lines, locations, stock, st.booleans())
def test_nothing_is_taken_that_is_not_available_and_what_is_left_adds_up(wanted, where, available, whole) -> None:
    before = dict(available)
    allocation = allocate(wanted, where, available, whole_lines=whole)
    assert available == before  # pure: the caller's map is untouched
    assert [line.line for line in allocation.lines] == wanted
    for line in allocation.lines:
        assert ZERO <= line.quantity <= line.line.quantity
        assert line.location_id is None or line.location_id in where
    for key in set(available) | set(taken(allocation)):
        assert ZERO <= allocation.left.get(key, ZERO) == available.get(key, ZERO) - taken(allocation).get(key, ZERO)


@given(lines, locations, stock)
def test_an_order_is_served_from_one_location_the_first_that_has_everything(wanted, where, available) -> None:
    allocation = allocate(wanted, where, available, whole_lines=False)
    if not where:
        assert allocation.location_id is None and all(line.quantity == 0 for line in allocation.lines)
        return
    assert {line.location_id for line in allocation.lines} == {allocation.location_id}
    needed: dict[str, Decimal] = {}
    for line in wanted:
        needed[line.sku_id] = needed.get(line.sku_id, ZERO) + line.quantity
    covering = [location for location in where
                if all(available.get((location, sku), ZERO) >= quantity for sku, quantity in needed.items())]
    if covering:
        assert allocation.location_id == covering[0]
        assert not any(line.short for line in allocation.lines)
    else:  # the first location serves what it has, lines of one SKU in line order
        assert allocation.location_id == where[0]
        left = {sku: available.get((where[0], sku), ZERO) for sku in SKUS}
        for line in allocation.lines:
            assert line.quantity == min(line.line.quantity, left[line.line.sku_id])
            left[line.line.sku_id] -= line.quantity


@given(lines, locations, stock)
def test_a_cart_line_is_served_whole_by_the_first_location_that_still_has_it(wanted, where, available) -> None:
    allocation = allocate(wanted, where, available, whole_lines=True)
    assert allocation.location_id is None
    left = dict(available)
    for line in allocation.lines:
        able = [location for location in where if left.get((location, line.line.sku_id), ZERO) >= line.line.quantity]
        if able:
            assert (line.location_id, line.quantity) == (able[0], line.line.quantity)
            left[able[0], line.line.sku_id] -= line.line.quantity
        else:
            assert (line.location_id, line.quantity, line.short) == (None, ZERO, True)


@given(lines, locations, stock, st.integers(min_value=1, max_value=5).map(Decimal))
def test_more_stock_never_reserves_less_for_an_order(wanted, where, available, more) -> None:
    richer = {key: quantity + more for key, quantity in available.items()}
    before = allocate(wanted, where, available, whole_lines=False)
    after = allocate(wanted, where, richer, whole_lines=False)
    assert sum(line.quantity for line in after.lines) >= sum(line.quantity for line in before.lines)
