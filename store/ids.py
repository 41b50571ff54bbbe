"""Identifiers and instants as the contract wants them: UUIDv7 strings and aware UTC datetimes."""

from datetime import UTC, datetime

import sqlalchemy as sa
import uuid_utils

# The last group of a UUID's text: its low 48 bits, random in a UUIDv7.
_LOW_BITS = 48


def new_id() -> str:
    return str(uuid_utils.uuid7())


def numbered_ids(position: sa.ColumnElement[int]) -> sa.ColumnElement[str]:
    """SQL giving a UUIDv7 string per row of a statement, from the row's `position` (distinct, 1 and up, below
    2**47): one fresh UUIDv7 counted up in its random low bits, so one statement writes any number of rows without
    an id from Python per row. The ids are unique, sort in position order and share the UUIDv7's millisecond."""
    first = uuid_utils.uuid7()
    # The top random bit cleared: adding any position then stays within the 48 bits, never touching the timestamp.
    low = first.int & ((1 << (_LOW_BITS - 1)) - 1)
    prefix = str(first)[:-_LOW_BITS // 4]
    hex_digits = sa.func.lower(sa.func.to_hex(sa.cast(sa.literal(low, sa.BigInteger) + position, sa.BigInteger)))
    return sa.literal(prefix) + sa.func.lpad(hex_digits, _LOW_BITS // 4, "0")


def utc_now() -> datetime:
    return datetime.now(UTC)
