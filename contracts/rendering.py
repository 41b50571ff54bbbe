"""How values cross the boundary: instants in UTC with offset, decimals as canonical strings."""

from datetime import UTC, datetime
from decimal import Decimal


def instant(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def decimal(value: Decimal | None) -> str | None:
    """Canonical decimal string: no exponent, trailing zeros trimmed ("12", "0.5")."""
    if value is None:
        return None
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text
