"""Opaque page cursors: the last row's key (a db/held.py page key) as URL-safe base64 of its JSON."""

import base64
import binascii
from collections.abc import Callable
from typing import Any, TypeVar

import orjson

from db.held import PageKey

K = TypeVar("K", bound=PageKey)


def encode_cursor(key: PageKey | None) -> str | None:
    if key is None:
        return None
    return base64.urlsafe_b64encode(orjson.dumps(key.to_dict())).decode().rstrip("=")


def decode_cursor(raw: str | None, decode: Callable[[Any], K]) -> K | None:
    """The key back from a cursor (None for none); ValueError when the cursor is not one we gave out."""
    if not raw:
        return None
    try:
        return decode(orjson.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))))
    except (binascii.Error, ValueError, TypeError, KeyError):
        raise ValueError("not a cursor of this list") from None
