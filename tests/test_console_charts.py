"""The console's SVG charts, as properties over any counts: well-formed SVG labelled for assistive technology, every
bar inside the plot, each category's bars as tall as its total on the scale, one bar per non-zero count; and the
hourly figures behind the delivery chart on both backends."""

import xml.etree.ElementTree as ElementTree
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from contracts import events
from db.event_delivery import NO_DESTINATION
from db.event_operations import HourOfDelivery, deliveries_per_hour
from db.ids import new_id
from db.outbox import order_event
from db.schema import event_outbox
from serving.console.charts import LEFT, PLOT_HEIGHT, PLOT_WIDTH, TOP, Series, StackedBars, nice_ceiling

SVG = "{http://www.w3.org/2000/svg}"
TONES = ("good", "other", "neutral", "bad")


@st.composite
def charts(draw: st.DrawFn) -> StackedBars:
    series = tuple(Series(f"series {index} <&>", TONES[index]) for index in range(draw(st.integers(1, 4))))
    # Labels are the console's own (instants, hours): any text but control characters, which XML cannot hold.
    categories = draw(st.lists(st.text(st.characters(exclude_categories=("Cc", "Cs")), max_size=12), max_size=40))
    values = tuple(tuple(draw(st.integers(0, 10**9)) for _ in series) for _ in categories)
    return StackedBars("chart", "A chart & its <title>", "What it shows", "Category", tuple(categories), series,
                       values)


@given(charts())
def test_bars_stack_to_their_totals_inside_the_plot(chart: StackedBars) -> None:
    svg = ElementTree.fromstring(str(chart.svg()))
    assert svg.get("role") == "img"
    assert svg.find(f"{SVG}title").text == chart.title and svg.find(f"{SVG}desc").text == chart.description
    bars = svg.findall(f"{SVG}rect")
    assert len(bars) == sum(1 for row in chart.values for value in row if value)
    assert chart.scale_max >= max(chart.totals, default=0)
    heights: dict[float, float] = {}
    for bar in bars:
        x, y, width, height = (float(bar.get(name)) for name in ("x", "y", "width", "height"))
        assert x >= LEFT and x + width <= LEFT + PLOT_WIDTH + 0.01
        assert y >= TOP - 0.01 and y + height <= TOP + PLOT_HEIGHT + 0.01
        assert bar.get("class").removeprefix("tone-") in TONES
        heights[x] = heights.get(x, 0) + height
    drawn = [total for total in chart.totals if total]
    assert len(heights) == len(drawn)
    for (_, height), total in zip(sorted(heights.items()), drawn, strict=True):
        assert height == pytest.approx(PLOT_HEIGHT * total / chart.scale_max, abs=0.01 * 4)


@given(st.integers(0, 10**12))
def test_the_scale_is_the_next_step_of_one_two_five(value: int) -> None:
    top = nice_ceiling(value)
    assert top >= max(value, 1)
    assert str(top).rstrip("0") in ("1", "2", "5")
    assert value <= 1 or top < value * 2.5


def _event(engine: sa.Engine, tenant_id: str, store_id: str, **values: object) -> None:
    order_id = new_id()
    with engine.begin() as conn:
        order_event(conn, tenant_id, store_id, events.ORDER_CREATED, order_id)
        conn.execute(event_outbox.update().where(event_outbox.c.entity_id == order_id).values(**values))


def test_deliveries_per_hour_count_accepted_and_dead_lettered_events_in_utc_hours(engine) -> None:
    tenant_id, store_id = new_id(), new_id()
    now = datetime(2026, 11, 21, 14, 30, tzinfo=UTC)
    since = now - timedelta(hours=3)
    for minutes in (0, 29):  # two in the current hour
        _event(engine, tenant_id, store_id, delivered_time=now - timedelta(minutes=minutes))
    _event(engine, tenant_id, store_id, delivered_time=datetime(2026, 11, 21, 12, 0, tzinfo=UTC))  # 12:00 exactly
    _event(engine, tenant_id, store_id, delivered_time=datetime(2026, 11, 21, 11, 29, tzinfo=UTC))  # before `since`
    _event(engine, tenant_id, store_id, delivered_time=now, last_error=NO_DESTINATION)  # discarded: not delivered
    _event(engine, tenant_id, store_id, delivered_time=now, last_error="webhook answered 503 before")  # then accepted
    _event(engine, tenant_id, store_id, dead_letter_time=datetime(2026, 11, 21, 13, 10, tzinfo=UTC))
    _event(engine, tenant_id, new_id(), delivered_time=now)  # another store

    hours = deliveries_per_hour(engine, tenant_id, store_id, since, now)

    assert hours == [HourOfDelivery(datetime(2026, 11, 21, hour, tzinfo=UTC), delivered, dead)
                     for hour, delivered, dead in ((11, 0, 0), (12, 1, 0), (13, 0, 1), (14, 3, 0))]
