"""Allocation: which location serves an order line or a click-and-collect cart line, and how much of it.

One rule for both callers, which differ only in whether an order's lines stay together:

- Orders (`whole_lines=False`): the first location, in preference order, that has every line available serves the
  whole order; when none has, the first location serves what it has of each line (lines of one SKU share its stock
  in line order) and the rest of each line waits for stock (a backorder).
- Click and collect (`whole_lines=True`): each line is served whole by the first location that has its quantity
  available after what earlier lines took; a line that no location has is short (nothing allocated, no location).

`available` is what each (location, SKU) has available (on hand − reserved, never below 0); a pair it does not
name has nothing. The answer carries what is left, so a caller allocating several orders in turn lets each see
what the earlier ones left.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

ZERO = Decimal(0)
Stock = Mapping[tuple[str, str], Decimal]  # (location id, SKU id) → available


@dataclass(frozen=True)
class Wanted:
    line_id: str
    sku_id: str
    quantity: Decimal


@dataclass(frozen=True)
class Allocated:
    line: Wanted
    location_id: str | None  # None: a short cart line, or an order with no location to come from
    quantity: Decimal  # what the location serves: below the line's quantity for a backorder or a short line

    @property
    def short(self) -> bool:
        return self.quantity < self.line.quantity


@dataclass(frozen=True)
class Allocation:
    location_id: str | None  # orders: the one location serving every line; click and collect: None
    lines: tuple[Allocated, ...]  # in the order the lines were given
    left: Mapping[tuple[str, str], Decimal]  # what each (location, SKU) has available afterwards


def allocate(lines: Sequence[Wanted], locations: Sequence[str], available: Stock, *,
             whole_lines: bool) -> Allocation:
    """Allocate `lines` from `locations` (best first) out of `available`; nothing is changed in place."""
    left = dict(available)

    def take(line: Wanted, location: str | None, quantity: Decimal) -> Allocated:
        if quantity > 0:
            left[location, line.sku_id] -= quantity  # type: ignore[index]  # later lines see what is left
        return Allocated(line, location, quantity)

    if whole_lines:
        allocated = []
        for line in lines:
            location = next((location for location in locations
                             if left.get((location, line.sku_id), ZERO) >= line.quantity), None)
            allocated.append(take(line, location, line.quantity if location is not None else ZERO))
        return Allocation(None, tuple(allocated), left)
    location = _one_location(lines, locations, available)
    return Allocation(location, tuple(
        take(line, location, min(line.quantity, left.get((location, line.sku_id), ZERO)) if location else ZERO)
        for line in lines), left)


def _one_location(lines: Sequence[Wanted], locations: Sequence[str], available: Stock) -> str | None:
    """The first location that has every line (lines of one SKU together), else the first location, else None."""
    needed: dict[str, Decimal] = {}
    for line in lines:
        needed[line.sku_id] = needed.get(line.sku_id, ZERO) + line.quantity
    return next((location for location in locations
                 if all(available.get((location, sku), ZERO) >= quantity for sku, quantity in needed.items())),
                locations[0] if locations else None)
