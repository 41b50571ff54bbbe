"""apply_batch on both backends: rejections, superseded and locked items, replacement, purge, atomicity."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa

from contracts.batch_kinds import REPLENISHMENT_PARAMETER, SALES_FORECAST
from db.backoffice import load_document
from db.held_quantities import integers, stored_value
from db.ids import new_id
from db.schema import retail_stores, sales_forecasts, skus, store_assortment_lines
from db.tenants import create_tenant
from pipeline.apply import Outcome, apply_batch
from serving.demo_data import demo_document

NOW = datetime(2026, 11, 21, 2, 0, tzinfo=UTC)
TODAY = NOW.date()
RUN = NOW - timedelta(hours=3)
LATER_RUN = NOW - timedelta(hours=1)
QUANTITY = pa.decimal128(18, 4)

ForecastItem = tuple[str | None, str | None, str, date, list[str]]  # retail, eCom, SKU, start, quantities


def document(label: str) -> dict[str, Any]:
    """The demo data plus lines that exercise the resolution order of replenishment types."""
    result = demo_document(label)
    # Base says MANUAL for 100003; the local assortment (store 1001) says AUTO and wins there.
    base_lines = next(a for a in result["assortments"] if a["kind"] == "BASE")["lines"]
    next(line for line in base_lines if line["skuNumber"] == "100003")["replenishmentType"] = "MANUAL"
    # Store-specific unlocked lines that win over the base type: MANUAL over AUTO, AUTO over MANUAL.
    result["storeAssortmentLines"] += [
        {"retailStoreNumber": "1003", "skuNumber": "100002", "replenishmentType": "MANUAL",
         "reorderPoint": "1", "maximumInventory": "2", "locked": False},
        {"retailStoreNumber": "1003", "skuNumber": "100020", "replenishmentType": "AUTO",
         "reorderPoint": "1", "maximumInventory": "2", "locked": False},
    ]
    return result


def seeded_tenant(engine: sa.Engine, doc: dict[str, Any]) -> str:
    tenant_id = create_tenant(engine, f"apply {new_id()}", is_test=True)
    load_document(engine, tenant_id, doc)
    return tenant_id


@pytest.fixture
def tenant(engine: sa.Engine) -> str:
    return seeded_tenant(engine, document("apply"))


def forecast_items(*items: ForecastItem, indexes: list[int] | None = None) -> pa.Table:
    return pa.table({
        "item_index": pa.array(indexes if indexes is not None else range(len(items)), pa.int32()),
        "retail_store_number": pa.array([item[0] for item in items], pa.string()),
        "ecom_store_number": pa.array([item[1] for item in items], pa.string()),
        "sku_number": pa.array([item[2] for item in items], pa.string()),
        "horizon_start_date": pa.array([item[3] for item in items], pa.date32()),
        "horizon_end_date": pa.array([item[3] + timedelta(days=len(item[4]) - 1) for item in items], pa.date32()),
        "quantities": pa.array([[Decimal(q) for q in item[4]] for item in items], pa.list_(QUANTITY)),
    })


def parameter_items(*items: tuple[str, str, str, str]) -> pa.Table:
    """Items of (retail store, SKU, reorder point, maximum inventory)."""
    return pa.table({
        "item_index": pa.array(range(len(items)), pa.int32()),
        "retail_store_number": pa.array([item[0] for item in items], pa.string()),
        "sku_number": pa.array([item[1] for item in items], pa.string()),
        "reorder_point": pa.array([Decimal(item[2]) for item in items], QUANTITY),
        "maximum_inventory": pa.array([Decimal(item[3]) for item in items], QUANTITY),
    })


def apply(engine: sa.Engine, tenant_id: str, kind: str, items: pa.Table, generated_at: datetime = RUN,
          batch_id: str = "batch") -> Outcome:
    with engine.begin() as conn:
        return apply_batch(conn, tenant_id, kind, batch_id, generated_at, items, NOW)


def held_forecasts(engine: sa.Engine, tenant_id: str) -> dict[tuple[bool, str, str], sa.Row]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(sales_forecasts).where(sales_forecasts.c.tenant_id == tenant_id))
        return {(row.is_ecom, row.store_number, row.sku_number): row for row in rows}


def store_line_query(tenant_id: str, store_number: str, sku_number: str) -> sa.Select:
    lines, stores = store_assortment_lines, retail_stores
    return (sa.select(lines)
            .join(stores, stores.c.id == lines.c.retail_store_id)
            .join(skus, skus.c.id == lines.c.sku_id)
            .where(lines.c.tenant_id == tenant_id, stores.c.tenant_id == tenant_id, skus.c.tenant_id == tenant_id,
                   stores.c.number == store_number, skus.c.number == sku_number))


def store_line(engine: sa.Engine, tenant_id: str, store_number: str, sku_number: str) -> sa.Row | None:
    with engine.connect() as conn:
        return conn.execute(store_line_query(tenant_id, store_number, sku_number)).first()


def rejected(index: int, store: str, sku: str, code: str, ecom: bool = False) -> dict[str, Any]:
    return {"index": index, "ecomStoreNumber" if ecom else "retailStoreNumber": store, "skuNumber": sku,
            "code": code}


def counts(items: int, applied: int = 0, superseded: int = 0, locked: int = 0, rejected: int = 0) -> dict[str, int]:
    return {"items": items, "applied": applied, "superseded": superseded, "locked": locked, "rejected": rejected}


# --- sales forecasts --------------------------------------------------------------------------------------

def test_forecast_rejections_check_the_store_first_then_the_sku(engine: sa.Engine, tenant: str) -> None:
    days = ["1", "2"]
    outcome = apply(engine, tenant, SALES_FORECAST, forecast_items(
        ("9999", None, "100001", TODAY, days),
        ("1004", None, "100001", TODAY, days),
        (None, "2999", "100001", TODAY, days),
        (None, "2002", "100001", TODAY, days),
        ("1001", None, "999999", TODAY, days),
        ("9998", None, "999999", TODAY, days),
        ("2001", None, "100001", TODAY, days),  # an eCom store's number is no retail store
        ("1002", None, "100051", TODAY, days),  # not in 1002's assortment: forecasts do not care
        (None, "2001", "100001", TODAY, days),
    ))
    assert outcome.rejected_items == [
        rejected(0, "9999", "100001", "UNKNOWN_RETAIL_STORE"),
        rejected(1, "1004", "100001", "RETAIL_STORE_NOT_RELEASED"),
        rejected(2, "2999", "100001", "UNKNOWN_ECOM_STORE", ecom=True),
        rejected(3, "2002", "100001", "ECOM_STORE_NOT_RELEASED", ecom=True),
        rejected(4, "1001", "999999", "UNKNOWN_SKU"),
        rejected(5, "9998", "999999", "UNKNOWN_RETAIL_STORE"),
        rejected(6, "2001", "100001", "UNKNOWN_RETAIL_STORE"),
    ]
    assert outcome.counts == counts(9, applied=2, rejected=7)
    assert not outcome.rejected_items_truncated
    assert set(held_forecasts(engine, tenant)) == {(False, "1002", "100051"), (True, "2001", "100001")}


def test_forecast_is_held_exactly_with_its_provenance(engine: sa.Engine, tenant: str) -> None:
    quantities = ["12", "0.5", "3.1416", "0", "100", "0.0001", "10.10", "99999999999999.9999"]
    apply(engine, tenant, SALES_FORECAST, forecast_items((None, "2001", "100001", TODAY, quantities)), batch_id="b-1")
    held = held_forecasts(engine, tenant)[(True, "2001", "100001")]
    assert held.quantities == stored_value(quantities)
    assert integers(pa.array([held.quantities])).to_pylist() == [
        [120000, 5000, 31416, 0, 1000000, 1, 101000, 999999999999999999]]
    assert (held.horizon_start_date, held.horizon_end_date) == (TODAY, TODAY + timedelta(days=7))
    assert (held.generated_at, held.modified_time, held.batch_id) == (RUN, NOW, "b-1")


def test_forecast_replaces_the_held_horizon_whole_and_keeps_absent_keys(engine: sa.Engine, tenant: str) -> None:
    apply(engine, tenant, SALES_FORECAST, forecast_items(("1001", None, "100001", TODAY, ["5"] * 30),
                                                   ("1001", None, "100002", TODAY, ["6"] * 30)), batch_id="first")
    outcome = apply(engine, tenant, SALES_FORECAST, forecast_items(
        ("1001", None, "100001", TODAY + timedelta(days=2), ["1", "2", "3"])), LATER_RUN, batch_id="second")
    assert outcome.counts == counts(1, applied=1)
    held = held_forecasts(engine, tenant)
    replaced, kept = held[(False, "1001", "100001")], held[(False, "1001", "100002")]
    assert (replaced.horizon_start_date, replaced.horizon_end_date) == (TODAY + timedelta(days=2),
                                                                        TODAY + timedelta(days=4))
    assert (replaced.quantities, replaced.generated_at, replaced.batch_id) == \
        (stored_value(["1", "2", "3"]), LATER_RUN, "second")
    assert (kept.quantities, kept.generated_at, kept.batch_id) == (stored_value(["6"] * 30), RUN, "first")


def test_forecast_of_an_earlier_run_is_superseded_and_the_same_run_replaces(engine: sa.Engine, tenant: str) -> None:
    def batch(quantity: str) -> pa.Table:
        return forecast_items(("1001", None, "100001", TODAY, [quantity]), ("1002", None, "100001", TODAY, ["9"]))

    apply(engine, tenant, SALES_FORECAST, batch("1"), LATER_RUN, batch_id="later")
    earlier = apply(engine, tenant, SALES_FORECAST, batch("2"), RUN, batch_id="earlier")
    assert earlier.counts == counts(2, superseded=2)
    assert held_forecasts(engine, tenant)[(False, "1001", "100001")].batch_id == "later"

    same_run = apply(engine, tenant, SALES_FORECAST, batch("3"), LATER_RUN, batch_id="later-again")
    assert same_run.counts == counts(2, applied=2)
    held = held_forecasts(engine, tenant)[(False, "1001", "100001")]
    assert (held.quantities, held.batch_id) == (stored_value(["3"]), "later-again")


def test_expired_forecasts_are_purged(engine: sa.Engine, tenant: str) -> None:
    def held_row(store: str, end: date) -> dict[str, Any]:
        return {"tenant_id": tenant, "is_ecom": False, "store_number": store, "sku_number": "100001",
                "horizon_start_date": end, "horizon_end_date": end, "quantities": stored_value(["1"]),
                "generated_at": RUN, "modified_time": RUN, "batch_id": "old"}

    with engine.begin() as conn:
        conn.execute(sales_forecasts.insert(), [held_row("1001", TODAY - timedelta(days=1)),
                                                held_row("1002", TODAY)])
    outcome = apply(engine, tenant, SALES_FORECAST, forecast_items(("1003", None, "100001", TODAY, ["1"]),
                                                             ("1003", None, "100002", TODAY - timedelta(days=3),
                                                              ["1", "2"])))
    # An item that has already ended is applied and purged with the rest.
    assert outcome.counts == counts(2, applied=2)
    assert set(held_forecasts(engine, tenant)) == {(False, "1002", "100001"), (False, "1003", "100001")}


# --- replenishment parameters ---------------------------------------------------------------------------

def test_replenishment_rejections_locks_and_manual_types(engine: sa.Engine, tenant: str) -> None:
    outcome = apply(engine, tenant, REPLENISHMENT_PARAMETER, parameter_items(
        ("9999", "100001", "1", "2"),
        ("1004", "100001", "1", "2"),
        ("1002", "999999", "1", "2"),
        ("1002", "100051", "1", "2"),  # a local SKU; 1002 has the base assortment only
        ("1001", "100001", "1", "2"),  # locked
        ("1002", "100010", "1", "2"),  # locked and MANUAL: the lock wins
        ("1002", "100020", "1", "2"),  # MANUAL in the base assortment
        ("1001", "100055", "1", "2"),  # MANUAL in the local assortment
        ("1002", "100003", "1", "2"),  # MANUAL in the base assortment...
        ("1001", "100003", "1.5", "10"),  # ...but AUTO in 1001's local one: created
        ("1001", "100051", "7.25", "30"),  # an unlocked store-specific line: updated
        ("1002", "100002", "3", "9"),  # no store-specific line, AUTO in the base: created
        ("1003", "100002", "1", "2"),  # the store-specific MANUAL wins over the base AUTO
        ("1003", "100020", "4", "8"),  # the store-specific AUTO wins over the base MANUAL: updated
        ("2001", "100001", "1", "2"),  # an eCom store's number is no retail store
    ))
    assert outcome.rejected_items == [
        rejected(0, "9999", "100001", "UNKNOWN_RETAIL_STORE"),
        rejected(1, "1004", "100001", "RETAIL_STORE_NOT_RELEASED"),
        rejected(2, "1002", "999999", "UNKNOWN_SKU"),
        rejected(3, "1002", "100051", "SKU_NOT_IN_ASSORTMENT"),
        rejected(6, "1002", "100020", "REPLENISHMENT_TYPE_MANUAL"),
        rejected(7, "1001", "100055", "REPLENISHMENT_TYPE_MANUAL"),
        rejected(8, "1002", "100003", "REPLENISHMENT_TYPE_MANUAL"),
        rejected(12, "1003", "100002", "REPLENISHMENT_TYPE_MANUAL"),
        rejected(14, "2001", "100001", "UNKNOWN_RETAIL_STORE"),
    ]
    assert outcome.counts == counts(15, applied=4, locked=2, rejected=9)

    expected = {  # store, SKU: type, reorder point, maximum inventory, locked, generated at
        ("1001", "100003"): ("AUTO", Decimal("1.5"), Decimal("10"), False, RUN),
        ("1001", "100051"): ("AUTO", Decimal("7.25"), Decimal("30"), False, RUN),
        ("1002", "100002"): ("AUTO", Decimal("3"), Decimal("9"), False, RUN),
        ("1003", "100020"): ("AUTO", Decimal("4"), Decimal("8"), False, RUN),
        ("1001", "100001"): ("AUTO", Decimal("20"), Decimal("60"), True, None),
        ("1002", "100010"): ("MANUAL", Decimal("30"), Decimal("90"), True, None),
        ("1003", "100002"): ("MANUAL", Decimal("1"), Decimal("2"), False, None),
    }
    for (store, sku), values in expected.items():
        line = store_line(engine, tenant, store, sku)
        assert line is not None, (store, sku)
        assert (line.replenishment_type, line.reorder_point, line.maximum_inventory, line.locked,
                line.generated_at) == values, (store, sku)
    assert store_line(engine, tenant, "1001", "100003").modified_time == NOW
    for store, sku in (("1002", "100020"), ("1001", "100055"), ("1002", "100003"), ("1002", "100051")):
        assert store_line(engine, tenant, store, sku) is None, (store, sku)


def test_replenishment_of_an_earlier_run_is_superseded(engine: sa.Engine, tenant: str) -> None:
    apply(engine, tenant, REPLENISHMENT_PARAMETER, parameter_items(("1002", "100002", "5", "15")), LATER_RUN)
    # A back-office line (1002, 100019) carries no run: any run may write it.
    earlier = apply(engine, tenant, REPLENISHMENT_PARAMETER, parameter_items(("1002", "100002", "6", "16"),
                                                                   ("1002", "100019", "6", "16")), RUN)
    assert earlier.counts == counts(2, applied=1, superseded=1)
    assert store_line(engine, tenant, "1002", "100002").reorder_point == Decimal("5")
    assert store_line(engine, tenant, "1002", "100019").reorder_point == Decimal("6")

    same_run = apply(engine, tenant, REPLENISHMENT_PARAMETER, parameter_items(("1002", "100002", "7", "17")), LATER_RUN)
    assert same_run.counts == counts(1, applied=1)
    assert store_line(engine, tenant, "1002", "100002").reorder_point == Decimal("7")


# --- both kinds -------------------------------------------------------------------------------------------

def test_rejected_items_are_listed_by_index_up_to_500(engine: sa.Engine, tenant: str) -> None:
    count = 600
    # Rows in reverse index order, so the listing has to sort.
    items = forecast_items(*[("1001", None, f"9{i:05}", TODAY, ["1"]) for i in reversed(range(count))],
                           ("1001", None, "100001", TODAY, ["1"]), indexes=[*reversed(range(count)), count])
    outcome = apply(engine, tenant, SALES_FORECAST, items)
    assert outcome.counts == counts(count + 1, applied=1, rejected=count)
    assert sum(outcome.counts.values()) - outcome.counts["items"] == outcome.counts["items"]
    assert [item["index"] for item in outcome.rejected_items] == list(range(500))
    assert outcome.rejected_items[499] == rejected(499, "1001", "900499", "UNKNOWN_SKU")
    assert outcome.rejected_items_truncated


def test_an_empty_batch_counts_nothing(engine: sa.Engine, tenant: str) -> None:
    assert apply(engine, tenant, SALES_FORECAST, forecast_items()).counts == counts(0)
    assert apply(engine, tenant, REPLENISHMENT_PARAMETER, parameter_items()).counts == counts(0)


@pytest.mark.parametrize("kind", [SALES_FORECAST, REPLENISHMENT_PARAMETER])
def test_a_failure_in_the_transaction_leaves_nothing_applied(engine: sa.Engine, tenant: str, kind: str) -> None:
    items = (forecast_items(("1002", None, "100002", TODAY, ["1"])) if kind == SALES_FORECAST
             else parameter_items(("1002", "100002", "1", "2")))
    with pytest.raises(RuntimeError, match="status could not be written"), engine.begin() as conn:
        assert apply_batch(conn, tenant, kind, "batch", RUN, items, NOW).counts["applied"] == 1
        raise RuntimeError("status could not be written")
    assert held_forecasts(engine, tenant) == {}
    assert store_line(engine, tenant, "1002", "100002") is None
    # The same transaction's staging is gone too: applying again works.
    assert apply(engine, tenant, kind, items).counts["applied"] == 1


def test_reads_and_writes_share_the_callers_transaction(engine: sa.Engine, tenant: str) -> None:
    items = parameter_items(("1002", "100019", "3", "9"))
    with engine.begin() as conn:
        # Locked by a write this transaction has not committed: the lookups must see it.
        line = conn.execute(store_line_query(tenant, "1002", "100019")).one()
        conn.execute(store_assortment_lines.update()
                     .where(store_assortment_lines.c.retail_store_id == line.retail_store_id,
                            store_assortment_lines.c.sku_id == line.sku_id)
                     .values(locked=True))
        outcome = apply_batch(conn, tenant, REPLENISHMENT_PARAMETER, "batch", RUN, items, NOW)
        assert outcome.counts == counts(1, locked=1)
        conn.rollback()
    assert apply(engine, tenant, REPLENISHMENT_PARAMETER, items).counts == counts(1, applied=1)


def test_another_tenants_data_is_never_used_or_touched(engine: sa.Engine, tenant: str) -> None:
    other_document = document("other")
    other_document["skus"].append({"number": "900001", "name": "Only the other tenant's"})
    next(s for s in other_document["retailStores"] if s["number"] == "1004")["released"] = True
    other_document["retailStores"].append({**other_document["retailStores"][0], "number": "3001"})
    other_document["storeAssortmentLines"].append(
        {"retailStoreNumber": "1002", "skuNumber": "100002", "replenishmentType": "AUTO", "reorderPoint": "1",
         "maximumInventory": "2", "locked": True})
    other = seeded_tenant(engine, other_document)
    apply(engine, other, SALES_FORECAST, forecast_items(("1001", None, "100001", TODAY, ["8"])), LATER_RUN, "other's")

    forecasts = apply(engine, tenant, SALES_FORECAST, forecast_items(
        ("1001", None, "100001", TODAY, ["1"]),  # the other tenant's later run supersedes nothing here
        ("3001", None, "100001", TODAY, ["1"]),
        ("1004", None, "100001", TODAY, ["1"]),
        ("1001", None, "900001", TODAY, ["1"])))
    assert [item["code"] for item in forecasts.rejected_items] == [
        "UNKNOWN_RETAIL_STORE", "RETAIL_STORE_NOT_RELEASED", "UNKNOWN_SKU"]
    assert forecasts.counts == counts(4, applied=1, rejected=3)
    parameters = apply(engine, tenant, REPLENISHMENT_PARAMETER, parameter_items(("1002", "100002", "3", "9")))
    assert parameters.counts == counts(1, applied=1)

    assert held_forecasts(engine, other)[(False, "1001", "100001")].quantities == stored_value(["8"])
    assert held_forecasts(engine, tenant)[(False, "1001", "100001")].quantities == stored_value(["1"])
    other_line = store_line(engine, other, "1002", "100002")
    assert (other_line.reorder_point, other_line.locked) == (Decimal("1"), True)


def test_an_unknown_kind_is_refused(engine: sa.Engine, tenant: str) -> None:
    with pytest.raises(ValueError, match="unknown batch kind"), engine.begin() as conn:
        apply_batch(conn, tenant, "SOMETHING_ELSE", "batch", RUN, forecast_items(), NOW)
