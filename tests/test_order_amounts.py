"""The rounding rules of rules/amounts.py: pure, no database."""

from decimal import Decimal as D

from hypothesis import given, settings
from hypothesis import strategies as st

from rules.amounts import (
    NOTHING,
    ZERO,
    Amounts,
    document_share,
    freight_amounts,
    line_amounts,
    money,
    order_amounts,
    vat_in,
)

prices = st.decimals(min_value=D("0.01"), max_value=D("99999"), places=2)
# Up to 4 places, as the store holds them: only then is a unit's share not a whole number of cents.
fine_prices = st.one_of(prices, st.decimals(min_value=D("0.0001"), max_value=D("99999"), places=4))
quantities = st.integers(min_value=1, max_value=50).map(D)
vat_rates = st.sampled_from([D(0), D(12), D(15), D(25)])


def test_money_rounds_half_up_away_from_zero():
    assert money(D("0.005")) == D("0.01")
    assert money(D("2.675")) == D("2.68")
    assert money(D("0.0049")) == D("0.00")
    assert money(D("-0.005")) == D("-0.01")


def test_vat_is_taken_out_of_the_gross():
    assert vat_in(D("125.00"), D(25)) == D("25.00")
    assert vat_in(D("66.67"), D(25)) == D("13.33")  # 13.334
    assert vat_in(D("100"), D(0)) == D("0.00")


def test_line_amounts_apply_the_order_discount_per_unit():
    line = line_amounts(D(3), D("66.67"), D(25), D("10"))
    assert line.gross == D("170.01")  # 3 × 56.67
    assert line.vat == D("34.00")  # 34.002
    assert line.net == D("136.01")


def test_order_amounts_add_freight_at_the_freight_vat_rate():
    lines = [line_amounts(D(2), D("199.90"), D(25)), line_amounts(D(1), D("49.00"), D(15))]
    total = order_amounts(lines, freight_amounts(D("59"), D(25)))
    assert total.gross == D("399.80") + D("49.00") + D("59.00")
    assert total.vat == D("79.96") + D("6.39") + D("11.80")
    assert freight_amounts(None, D(25)) == NOTHING


@given(prices, quantities, vat_rates)
def test_a_line_never_has_negative_net(price, quantity, rate):
    line = line_amounts(quantity, price, rate)
    assert line.gross == money(line.gross) and line.vat >= 0 and line.net >= 0


@given(prices, quantities, vat_rates, st.data())
def test_documents_add_up_exactly_to_the_line(price, quantity, rate, data):
    line = line_amounts(quantity, price, rate)
    taken, earlier, shares = D(0), NOTHING, []
    while taken < quantity:
        part = D(data.draw(st.integers(min_value=1, max_value=int(quantity - taken))))
        share = document_share(line, quantity, part, earlier, taken)
        shares.append(share)
        earlier, taken = earlier + share, taken + part
    assert earlier == line
    assert all(share.gross >= 0 and share.vat >= 0 for share in shares)


def test_many_small_documents_never_go_negative():
    line = line_amounts(D(10), D("0.005"), D(0))  # 0.05 in all: each unit is half a cent
    shares = [document_share(line, D(10), D(1), Amounts(money(line.gross * n / 10), ZERO), D(n)) for n in range(10)]
    assert [share.gross for share in shares] == [D("0.01"), D(0)] * 5
    assert sum(share.gross for share in shares) == line.gross


def test_a_partial_document_is_pro_rata_and_the_last_takes_the_remainder():
    line = line_amounts(D(3), D("66.67"), D(25))  # 200.01, VAT 40.00
    first = document_share(line, D(3), D(1), NOTHING, D(0))
    assert first == Amounts(D("66.67"), D("13.33"))
    second = document_share(line, D(3), D(2), first, D(1))
    assert second == Amounts(D("133.34"), D("26.67"))


@settings(max_examples=500, deadline=None)  # the machine is shared; no timed assertions
@given(fine_prices, quantities, vat_rates, st.data())
def test_failed_documents_give_their_units_back_and_no_share_goes_negative(price, quantity, rate, data):
    """Captures take units pro rata after the live ones; a FAILED one leaves the running total and its units are
    taken again; some units may be cancelled. Then returns take the delivered units back against what the
    receipts took (`whole`). No share is ever negative and the live shares never pass the line, or the whole."""
    line = line_amounts(quantity, price, rate)
    live: list[tuple[D, Amounts]] = []  # (units, share) of captures not FAILED
    pending: list[int] = []  # indexes into `live` of captures waiting for their report
    cancelled = D(0)

    def running() -> tuple[D, Amounts]:
        return sum((units for units, _ in live), D(0)), sum((share for _, share in live), NOTHING)

    for turn in range(40):
        taken, earlier = running()
        still_open = quantity - cancelled - taken
        moves = (["take", "cancel"] if still_open else []) + (["confirm", "fail"] if pending else [])
        if turn > 30 and "fail" in moves:  # end with a report, so the sequence finishes
            moves.remove("fail")
        if not moves:
            break
        move = data.draw(st.sampled_from(moves))
        if move == "take":
            part = D(data.draw(st.integers(min_value=1, max_value=int(still_open))))
            share = document_share(line, quantity, part, earlier, taken)
            assert share.gross >= 0 and share.vat >= 0 and share.net >= 0
            live.append((part, share))
            pending.append(len(live) - 1)
            _, now = running()
            assert now.gross <= line.gross and now.vat <= line.vat and now.net <= line.net
        elif move == "cancel":
            cancelled += data.draw(st.integers(min_value=1, max_value=int(still_open)))
        else:
            index = pending.pop(data.draw(st.integers(min_value=0, max_value=len(pending) - 1)))
            if move == "fail":
                live[index] = (D(0), NOTHING)
    # Captures still pending count as confirmed, units still open as cancelled: the line delivers no more.
    delivered, receipts = running()
    if not cancelled and delivered == quantity:
        assert receipts == line

    returned, refunds = D(0), NOTHING
    while returned < delivered:
        part = D(data.draw(st.integers(min_value=1, max_value=int(delivered - returned))))
        share = document_share(line, quantity, part, refunds, returned, (delivered, receipts))
        assert share.gross >= 0 and share.vat >= 0 and share.net >= 0
        returned, refunds = returned + part, refunds + share
    assert refunds == receipts
