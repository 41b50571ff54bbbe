"""Held quantities as stored (8-byte integers of ten-thousandths) and back as exact decimals; and their rendering in
the JSON pages as the contract renders decimals."""

import random
from decimal import Decimal

import orjson
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.held_datasets import DECIMAL
from contracts.rendering import decimal
from db.held_quantities import as_decimals, integers, stored, stored_value
from serving.rendering.held_pages import canonical_decimal

LARGEST = Decimal("99999999999999.9999")  # DECIMAL(18,4)'s
quantity = st.decimals(min_value=-LARGEST, max_value=LARGEST, places=4, allow_nan=False, allow_infinity=False)
horizons = st.lists(st.lists(quantity, min_size=1, max_size=62), min_size=1, max_size=30)


def stored_column(horizons: list[list[Decimal]]) -> pa.Array:
    """The horizons through `stored`, as the database hands the column back (binary)."""
    return stored(pl.Series("quantities", horizons, pl.List(pl.Decimal(18, 4)))).to_arrow()


@settings(max_examples=300)
@given(horizons)
def test_stored_bytes_are_integers_of_ten_thousandths_and_come_back_as_the_same_decimals(
        held: list[list[Decimal]]) -> None:
    column = stored_column(held)
    # The vectorised writer and the row-by-row one agree, byte for byte.
    assert column.to_pylist() == [stored_value(horizon) for horizon in held]
    assert integers(column).to_pylist() == [[int(q.scaleb(4)) for q in horizon] for horizon in held]
    decimals = as_decimals(column)
    assert decimals.type.value_type == DECIMAL
    assert decimals.to_pylist() == held


@settings(max_examples=300)
@given(horizons, st.data())
def test_a_slice_or_chunks_of_stored_bytes_come_back_as_their_own_decimals(held: list[list[Decimal]],
                                                                          data: st.DataObject) -> None:
    """A record batch may be a slice of a larger result, or a column of several chunks; the database's binary
    columns come with 32-bit offsets, Polars' with 64-bit ones."""
    column = stored_column(held).cast(data.draw(st.sampled_from([pa.binary(), pa.large_binary()])))
    start = data.draw(st.integers(0, len(held)))
    stop = data.draw(st.integers(start, len(held)))
    assert as_decimals(column.slice(start, stop - start)).to_pylist() == held[start:stop]
    chunked = pa.chunked_array([column.slice(0, start), column.slice(start)])
    assert as_decimals(chunked).to_pylist() == held


def test_bytes_that_are_not_whole_quantities_are_refused() -> None:
    with pytest.raises(ValueError, match="whole number"):
        integers(pa.array([stored_value(["1", "2"]), stored_value(["3"]) + b"\x00"]))


def test_quantities_are_rendered_as_the_contract_renders_decimals() -> None:
    rng = random.Random(5)
    # Up to 18 digits, four of them decimals; trailing zeros of every length.
    values = [Decimal(rng.randrange(0, 10**rng.randrange(1, 15)) * 10**rng.randrange(0, 5)).scaleb(-4)
              for _ in range(2000)]
    values += [Decimal(text) for text in ("0", "0.0000", "10", "100.5000", "0.0001", "99999999999999.9999")]
    column = pl.Series("quantities", [values[i:i + 7] for i in range(0, len(values), 7)],
                       pl.List(pl.Decimal(18, 4)))
    rendered = pl.DataFrame([column]).select(pl.col("quantities").list.eval(canonical_decimal(pl.element())))
    assert orjson.dumps(rendered.to_series().to_list()) == orjson.dumps(
        [[decimal(q) for q in values[i:i + 7]] for i in range(0, len(values), 7)])
