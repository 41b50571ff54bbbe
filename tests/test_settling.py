"""Settling coalesced batches (pipeline.apply._settled) against the rule applied item by item: in processing order,
an item applies when its run is no earlier than the latest of its key's held run and the runs of the key's earlier
items; the key's last applied item is the one left held. Judged frames are drawn directly (no database), so many
more histories are tried than the backend comparison of tests/test_pipeline_coalescing.py can afford."""

from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.apply import _settled

RUNS = [datetime(2026, 11, 20, tzinfo=UTC) + timedelta(hours=hours) for hours in range(4)]
KEYS = [(False, "1001", "100001"), (False, "1001", "100002"), (True, "2001", "100001"), (False, "1002", "100001")]


@st.composite
def judged_frames(draw: st.DrawFn) -> pl.DataFrame:
    """Batches (members) of distinct keys each, with a run each; each key held from some run or not at all; some
    items rejected by the judging."""
    held = {key: draw(st.sampled_from([None, *RUNS])) for key in KEYS}
    rows: list[dict[str, Any]] = []
    for member in range(draw(st.integers(1, 6))):
        run = draw(st.sampled_from(RUNS))
        keys = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=len(KEYS)))
        for item_index, (is_ecom, store, sku) in enumerate(keys):
            rows.append({"member": member, "item_index": item_index, "is_ecom": is_ecom, "store_number": store,
                         "sku_number": sku, "generated_at": run, "held_generated_at": held[is_ecom, store, sku],
                         "verdict": draw(st.sampled_from([None, None, None, "UNKNOWN_SKU"]))})
    instant = pl.Datetime("us", "UTC")
    return pl.DataFrame(rows, schema={"member": pl.UInt32, "item_index": pl.Int32, "is_ecom": pl.Boolean,
                                      "store_number": pl.String, "sku_number": pl.String, "generated_at": instant,
                                      "held_generated_at": instant, "verdict": pl.String})


def one_by_one(judged: pl.DataFrame) -> dict[tuple[int, int], tuple[bool | None, bool]]:
    """(member, item index) → (applied, final), item by item in processing order."""
    latest: dict[tuple[Any, ...], datetime | None] = {}
    applied: dict[tuple[int, int], bool | None] = {}
    last_applied: dict[tuple[Any, ...], tuple[int, int]] = {}
    for row in judged.sort("member", "item_index").iter_rows(named=True):
        item, key = (row["member"], row["item_index"]), (row["is_ecom"], row["store_number"], row["sku_number"])
        if row["verdict"] is not None:
            applied[item] = None
            continue
        bar = latest.get(key, row["held_generated_at"])
        applied[item] = bar is None or row["generated_at"] >= bar
        latest[key] = row["generated_at"] if bar is None else max(bar, row["generated_at"])
        if applied[item]:
            last_applied[key] = item
    final = set(last_applied.values())
    return {item: (verdict, item in final) for item, verdict in applied.items()}


@settings(max_examples=500)
@given(judged=judged_frames())
def test_settled_items_are_those_applied_item_by_item(judged: pl.DataFrame) -> None:
    settled = _settled(judged)
    assert settled.height == judged.height
    assert {(row["member"], row["item_index"]): (row["applied"], row["final"])
            for row in settled.iter_rows(named=True)} == one_by_one(judged)
