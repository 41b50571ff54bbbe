"""Identifiers and instants as the contract wants them: UUIDv7 strings and aware UTC datetimes."""

from datetime import UTC, datetime

import sqlalchemy as sa
import uuid_utils

# The last group of a UUID's text is its low 48 bits; in uuid_utils' UUIDv7 the low 32 of them are random and the
# counter that keeps one process's ids in order within a millisecond sits just above.
_LOW_BITS = 48
_RANDOM_BITS = 32


def new_id() -> str:
    return str(uuid_utils.uuid7())


def numbered_ids(position: sa.ColumnElement[int]) -> sa.ColumnElement[str]:
    """SQL giving a UUIDv7 string per row of a statement, from the row's `position` (distinct, 1 and up, below
    2**32): one fresh UUIDv7 whose random low 32 bits give way to the position, so one statement writes any number
    of rows without an id from Python per row. The ids are unique, sort in position order, after every id this
    process made before and before every one it makes after (uuid_utils counts up above those 32 bits)."""
    first = uuid_utils.uuid7()
    low = first.int & ((1 << _LOW_BITS) - 1) & ~((1 << _RANDOM_BITS) - 1)
    prefix = str(first)[:-_LOW_BITS // 4]
    hex_digits = sa.func.lower(sa.func.to_hex(sa.cast(sa.literal(low, sa.BigInteger) + position, sa.BigInteger)))
    return sa.literal(prefix) + sa.func.lpad(hex_digits, _LOW_BITS // 4, "0")


def utc_now() -> datetime:
    return datetime.now(UTC)
