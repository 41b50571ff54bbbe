"""The money rules of ECOMMERCE.md "Amounts", as pure functions on Decimals.

All prices include VAT. A line's gross is its quantity times the unit price less the order discount, rounded
half-up to 2 places; its VAT is taken out of that gross at the line's rate; net is what remains. An order sums
its lines, plus freight, whose VAT is at the company's freight VAT rate. A partial document (capture, receipt,
refund) takes its share pro rata on the running total, so the one that takes a line's last unit takes the
remainder and the documents add up exactly to the line.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")
ZERO = Decimal("0.00")


def money(value: Decimal) -> Decimal:
    """Half-up to 2 places: 0.005 → 0.01, -0.005 → -0.01."""
    return value.quantize(CENT, rounding=ROUND_HALF_UP)


def vat_in(gross: Decimal, vat_rate: Decimal) -> Decimal:
    """The VAT included in a gross amount at `vat_rate` percent."""
    return money(gross * vat_rate / (100 + vat_rate))


@dataclass(frozen=True)
class Amounts:
    gross: Decimal
    vat: Decimal

    @property
    def net(self) -> Decimal:
        return self.gross - self.vat

    def __add__(self, other: "Amounts") -> "Amounts":
        return Amounts(self.gross + other.gross, self.vat + other.vat)


NOTHING = Amounts(ZERO, ZERO)


def line_amounts(quantity: Decimal, net_unit_price: Decimal, vat_rate: Decimal,
                 order_discount: Decimal | None = None) -> Amounts:
    gross = money(quantity * (net_unit_price - (order_discount or 0)))
    return Amounts(gross, vat_in(gross, vat_rate))


def freight_amounts(freight_amount: Decimal | None, freight_vat_rate: Decimal) -> Amounts:
    """Freight is charged including VAT, at the company's freight VAT rate; none is nothing."""
    if freight_amount is None:
        return NOTHING
    gross = money(freight_amount)
    return Amounts(gross, vat_in(gross, freight_vat_rate))


def order_amounts(lines: Iterable[Amounts], freight: Amounts = NOTHING) -> Amounts:
    total = freight
    for line in lines:
        total += line
    return total


def document_share(line: Amounts, line_quantity: Decimal, quantity: Decimal, earlier: Amounts,
                   earlier_quantity: Decimal, whole: tuple[Decimal, Amounts] | None = None) -> Amounts:
    """What a document taking `quantity` units of a line carries, given what earlier documents of the line took.

    Pro rata on the running total: the line's amount for all units taken so far, rounded, less what the earlier
    documents took. The first document gets exactly `round(lineAmount × qty / lineQuantity, 2)`; the one taking
    the last unit gets the remainder, so the documents add up exactly to the line and earlier ones never change.
    Rounding each document on its own instead could make the remainder negative (ten documents of one unit of
    a 0.05 line would each round 0.005 up to 0.01).

    `whole` is (units, amounts) the documents must add up to when it is not the line itself: returns of a line
    that will deliver no more add up to what its receipts took. The result is kept within what is left of the
    whole, its VAT within its gross and its net within the net left, so no share is ever negative even when
    earlier documents were taken out of the running total (a failed capture gives its units back).
    """
    whole_quantity, target = whole or (line_quantity, line)
    taken = earlier_quantity + quantity
    left = Amounts(target.gross - earlier.gross, target.vat - earlier.vat)
    if taken >= whole_quantity:
        gross = left.gross
    else:
        gross = _within(money(line.gross * taken / line_quantity) - earlier.gross, ZERO, left.gross)
    vat = _within(money(line.vat * taken / line_quantity) - earlier.vat, max(ZERO, gross - left.net),
                  min(gross, left.vat))
    return Amounts(gross, vat)


def _within(value: Decimal, low: Decimal, high: Decimal) -> Decimal:
    return min(max(value, low), high)
