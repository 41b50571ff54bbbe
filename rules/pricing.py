"""SPEC.md's pricing rules for order lines (4–8): which campaign prices a line, if any, a legacy discount, or why
the line's price is refused. Pure: the eCom store's prices and campaigns on the order day come in as values
(db/orders.py reads them in one statement)."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from contracts.orders import LineItemRequest


@dataclass(frozen=True)
class Campaign:
    id: str
    code: str
    type: str  # NORMAL or THREE_FOR_TWO
    price: Decimal


@dataclass(frozen=True)
class PricedSku:
    id: str
    number: str
    product_name: str
    normal_price: Decimal | None  # from the store's price list, else the company's base price
    offers: tuple[Campaign, ...]  # the released campaigns of the company covering it on the order day


@dataclass(frozen=True)
class Pricing:
    price_type: str
    campaign_id: str | None = None
    problem: dict[str, str] | None = None


def problem(path: str, code: str, message: str) -> dict[str, str]:
    """One problem of a refused order, as the 400 body lists it."""
    return {"path": path, "code": code, "message": message}


def price_lines(lines: Sequence[LineItemRequest], skus: Sequence[PricedSku],
                day: date) -> tuple[list[Pricing], list[dict[str, str]]]:
    """Each line's pricing, and every problem of the lines (`skus`: each line's SKU, found by its id or number)."""
    problems: list[dict[str, str]] = []
    pricings = []
    for index, (line, sku) in enumerate(zip(lines, skus, strict=True)):
        path = f"lineItems[{index}]"
        if line.skuId and line.skuNumber and line.skuNumber != sku.number:
            problems.append(problem(f"{path}.skuNumber", "SKU_MISMATCH",
                                    f"SKU {line.skuId} has number {sku.number}, not {line.skuNumber}."))
        if line.netUnitOrderDiscountAmount and line.netUnitOrderDiscountAmount > line.netUnitPrice:
            problems.append(problem(f"{path}.netUnitOrderDiscountAmount", "DISCOUNT_ABOVE_PRICE",
                                    "The order discount cannot exceed netUnitPrice."))
        pricing = _pricing(line, sku, path, day)
        if pricing.problem:
            problems.append(pricing.problem)
        pricings.append(pricing)
    return pricings, problems


def _pricing(line: LineItemRequest, sku: PricedSku, path: str, day: date) -> Pricing:
    """SPEC.md rules 4–8 for one line."""
    offers = sku.offers
    if line.campaignCode is not None:
        campaign = next((offer for offer in offers if offer.code == line.campaignCode), None)
        if campaign is None:
            return Pricing("CAMPAIGN", problem=problem(
                f"{path}.campaignCode", "CAMPAIGN_NOT_APPLICABLE",
                f"No released campaign {line.campaignCode} covers SKU {sku.number} on {day.isoformat()}."))
        if campaign.type == "NORMAL" and line.netUnitPrice != campaign.price:
            return Pricing("CAMPAIGN", problem=problem(
                f"{path}.netUnitPrice", "CAMPAIGN_PRICE_MISMATCH",
                f"netUnitPrice must be the campaign price {campaign.price.normalize():f}; put further "
                "reductions in netUnitOrderDiscountAmount."))
        if campaign.type == "THREE_FOR_TWO" and sku.normal_price is not None and line.netUnitPrice > sku.normal_price:
            return Pricing("CAMPAIGN", problem=problem(
                f"{path}.netUnitPrice", "ABOVE_NORMAL_PRICE",
                f"netUnitPrice exceeds the SKU's normal price {sku.normal_price.normalize():f}."))
        return Pricing("CAMPAIGN", campaign.id)
    # Only NORMAL campaigns can be recognised by price: a THREE_FOR_TWO campaign's price is the normal price.
    normal = [offer for offer in offers if offer.type == "NORMAL"]
    matches = [offer for offer in normal if offer.price == line.netUnitPrice]
    if len(matches) == 1:
        return Pricing("CAMPAIGN", matches[0].id)
    discount = line.netUnitOrderDiscountAmount
    if (discount and not matches and sku.normal_price is not None and line.netUnitPrice == sku.normal_price
            and sum(offer.price == line.netUnitPrice - discount for offer in normal) == 1):
        return Pricing("LEGACY_DISCOUNT")
    return Pricing("REGULAR")
