"""How a held forecast's quantities are stored: each DECIMAL(18,4) as its unscaled integer (ten-thousandths), an
8-byte big-endian integer (as PostgreSQL's int8send writes a BIGINT), one after another in a BYTEA (DuckDB: BLOB).

The contract's quantities are exact decimals of four places at most (contracts.held_datasets.DECIMAL); their
integer of ten-thousandths is exact too and fits 8 bytes (18 digits). Held so, a page or an export makes Arrow
decimals of a column of them in one vectorised pass over its bytes, with nothing parsed: splitting and casting the
JSON text they were held as before cost about 50 ns a quantity, as much as fetching the rows, and a BIGINT[] column
cost as much again in the ADBC driver's decoding of each array (measured: 117 ns a quantity).
"""

from collections.abc import Iterable
from decimal import Decimal

import numpy as np
import polars as pl
import pyarrow as pa

from contracts.held_datasets import DECIMAL

# The stored scale: a quantity q is held as the integer q × 10**SCALE, in QUANTITY_BYTES bytes.
SCALE = DECIMAL.scale
QUANTITY_BYTES = 8
_STORED_INTEGER = np.dtype(">i8")
# The contract's DECIMAL as Polars types it: what the readers of held data cast their decimals to.
POLARS_DECIMAL = pl.Decimal(DECIMAL.precision, SCALE)


def stored(quantities: pl.Series) -> pl.Series:
    """Lists of decimals as the bytes each list is stored as (a decimal's physical value at scale 4 is its integer
    of ten-thousandths)."""
    lists = _one_chunk(quantities.list.eval(pl.element().cast(POLARS_DECIMAL).to_physical().cast(pl.Int64)).to_arrow())
    if lists.null_count:
        raise ValueError("held quantities are never null")
    offsets = _offsets(lists)
    values = lists.flatten().to_numpy(zero_copy_only=False).astype(_STORED_INTEGER)
    stored_bytes = pa.Array.from_buffers(pa.large_binary(), len(lists), [
        None, pa.py_buffer((offsets - offsets[0]) * QUANTITY_BYTES), pa.py_buffer(values)])
    return pl.Series(quantities.name, stored_bytes, pl.Binary)


def stored_value(quantities: Iterable[Decimal | str]) -> bytes:
    """One forecast's quantities as stored, for rows written one by one (seeding, benchmarks, tests)."""
    return b"".join(int(Decimal(quantity).scaleb(SCALE)).to_bytes(QUANTITY_BYTES, "big", signed=True)
                    for quantity in quantities)


def integers(stored_bytes: pa.Array | pa.ChunkedArray) -> pa.LargeListArray:
    """Each forecast's stored bytes as its list of integers of ten-thousandths. Bytes that are not a whole number
    of integers are refused (ValueError): this module never wrote them."""
    offsets, values = _stored_integers(stored_bytes)
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values.astype(np.int64)))


def as_decimals(stored_bytes: pa.Array | pa.ChunkedArray) -> pa.LargeListArray:
    """Each forecast's stored bytes as its list of DECIMAL(18,4), the same values exactly: each integer becomes
    the low word of its 128-bit two's complement decimal, and its sign the high word."""
    offsets, values = _stored_integers(stored_bytes)
    words = np.empty((len(values), 2), np.int64)
    words[:, 0] = values  # the byte order turned as it is copied
    np.right_shift(words[:, 0], 63, out=words[:, 1])
    decimals = pa.Array.from_buffers(DECIMAL, len(values), [None, pa.py_buffer(words)])
    return pa.LargeListArray.from_arrays(pa.array(offsets), decimals)


def _stored_integers(stored_bytes: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """The list offsets (from 0) of each forecast's integers, and the integers as stored (big-endian), a view of
    the bytes. Bytes that are not a whole number of integers are refused (ValueError)."""
    stored_bytes = _one_chunk(stored_bytes)
    if pa.types.is_binary_view(stored_bytes.type):
        stored_bytes = stored_bytes.cast(pa.large_binary())
    if stored_bytes.null_count:
        raise ValueError("held quantities are never null")
    offsets = _offsets(stored_bytes)
    if np.any((offsets - offsets[0]) % QUANTITY_BYTES):
        raise ValueError("held quantities that are not a whole number of 8-byte integers")
    count = int(offsets[-1] - offsets[0]) // QUANTITY_BYTES
    data = stored_bytes.buffers()[2]
    values = np.frombuffer(data, _STORED_INTEGER, count, int(offsets[0])) if count else np.empty(0, _STORED_INTEGER)
    return (offsets - offsets[0]) // QUANTITY_BYTES, values


def _one_chunk(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


def _offsets(array: pa.Array) -> np.ndarray:
    """A list or binary array's value offsets (32 or 64 bits) for its own slice, as int64, into its data."""
    large = pa.types.is_large_list(array.type) or pa.types.is_large_binary(array.type)
    every = np.frombuffer(array.buffers()[1], np.int64 if large else np.int32)
    return every[array.offset:array.offset + len(array) + 1].astype(np.int64)
