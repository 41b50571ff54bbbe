"""rules.pricing without a database: SPEC.md's pricing rules 4–8 for one line, over random offers and prices, and
the cases tests/test_orders_api.py shows over HTTP."""

from datetime import date
from decimal import Decimal as D

from hypothesis import given
from hypothesis import strategies as st

from contracts.orders import LineItemRequest
from rules.pricing import Campaign, PricedSku, price_lines

DAY = date(2026, 11, 26)
prices = st.integers(1, 40).map(lambda cents: D(cents) / 4)  # few distinct values, so prices meet often
campaigns = st.builds(Campaign, id=st.uuids().map(str), code=st.sampled_from(["A", "B", "C"]),
                      type=st.sampled_from(["NORMAL", "THREE_FOR_TWO"]), price=prices)


def line(price: D, *, code: str | None = None, discount: D | None = None, number: str | None = "100001",
         sku_id: str | None = None) -> LineItemRequest:
    return LineItemRequest(skuId=sku_id, skuNumber=number, quantity=D(1), netUnitPrice=price, vatRate=D(25),
                           netUnitOrderDiscountAmount=discount, campaignCode=code)


def sku(normal: D | None, offers: list[Campaign]) -> PricedSku:
    return PricedSku("sku-1", "100001", "Socks", normal, tuple(offers))


def priced(request: LineItemRequest, held: PricedSku):
    (pricing,), problems = price_lines([request], [held], DAY)
    return pricing, problems


@given(offers=st.lists(campaigns, max_size=4), normal=st.none() | prices, price=prices,
       discount=st.none() | prices, code=st.none() | st.sampled_from(["A", "B", "C", "Z"]))
def test_every_line_gets_one_price_type_and_a_campaign_only_from_its_offers(offers, normal, price, discount,
                                                                            code) -> None:
    pricing, problems = priced(line(price, code=code, discount=discount), sku(normal, offers))
    assert pricing.price_type in ("CAMPAIGN", "REGULAR", "LEGACY_DISCOUNT")
    assert pricing.campaign_id is None or pricing.campaign_id in {offer.id for offer in offers}
    assert (pricing.problem is not None) == any(p["path"] != "lineItems[0].netUnitOrderDiscountAmount"
                                                for p in problems)
    if code is not None:  # a named campaign prices the line, or the line is refused
        assert pricing.price_type == "CAMPAIGN"
        assert (pricing.campaign_id is None) == (pricing.problem is not None)
        if code not in {offer.code for offer in offers}:
            assert pricing.problem["code"] == "CAMPAIGN_NOT_APPLICABLE"
    else:
        assert pricing.problem is None
        matching = [offer for offer in offers if offer.type == "NORMAL" and offer.price == price]
        if len(matching) == 1:  # recognised by its price alone
            assert (pricing.price_type, pricing.campaign_id) == ("CAMPAIGN", matching[0].id)
        else:
            assert pricing.campaign_id is None
    if discount is not None and discount > price:
        assert {"path": "lineItems[0].netUnitOrderDiscountAmount", "code": "DISCOUNT_ABOVE_PRICE",
                "message": "The order discount cannot exceed netUnitPrice."} in problems


def test_the_cases_the_api_shows() -> None:
    normal = Campaign("c-normal", "SALE", "NORMAL", D("80"))
    three = Campaign("c-3for2", "TREKK", "THREE_FOR_TWO", D("100"))
    held = sku(D("100"), [normal, three])
    assert priced(line(D("80")), held)[0].campaign_id == "c-normal"  # recognised by price
    assert priced(line(D("100")), held)[0].price_type == "REGULAR"
    legacy = priced(line(D("100"), discount=D("20")), held)[0]  # normal price less a discount to the campaign's
    assert (legacy.price_type, legacy.campaign_id) == ("LEGACY_DISCOUNT", None)
    assert priced(line(D("90"), code="SALE"), held)[1][0]["code"] == "CAMPAIGN_PRICE_MISMATCH"
    assert priced(line(D("120"), code="TREKK"), held)[1][0]["code"] == "ABOVE_NORMAL_PRICE"
    assert priced(line(D("95"), code="TREKK"), held)[0].campaign_id == "c-3for2"
    assert priced(line(D("80"), code="NONE"), held)[1][0]["code"] == "CAMPAIGN_NOT_APPLICABLE"
    mismatch = priced(line(D("100"), number="999", sku_id="sku-1"), held)[1]
    assert [(p["path"], p["code"]) for p in mismatch] == [("lineItems[0].skuNumber", "SKU_MISMATCH")]
