"""Waiting batches applied together equal the same batches applied one by one, on both backends.

Two tenants get the same reference data, the same held rows and the same staged batches; one worker applies them
one by one, the other together (pipeline.worker coalesces consecutive batches of a kind). Everything that can be
seen afterwards must be equal: each batch's progress, counts, rejected items, and every held row.
"""

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from contracts.batch_kinds import REPLENISHMENT_PARAMETER, SALES_FORECAST
from db.backoffice import load_document
from db.batches import StagedBatch, record_batch
from db.held_quantities import stored_value
from db.ids import new_id
from db.schema import batches, retail_stores, sales_forecasts, skus, store_assortment_lines
from db.staging import stage_items, staged_name
from db.tenants import create_tenant
from ingest.envelope import FORECAST_ITEMS_SCHEMA, REPLENISHMENT_ITEMS_SCHEMA
from pipeline import worker as worker_module
from pipeline.worker import Pipeline, tenant_locks_for
from settings import Settings

NOW = datetime(2026, 11, 21, 2, 0, tzinfo=UTC)
TODAY = NOW.date()
RUNS = [NOW - timedelta(hours=hours) for hours in (30, 20, 10)]  # three planning runs, earliest first

RETAIL, ECOM, SKUS = ("1001", "1002", "1004", "9999"), ("2001", "2002", "2999"), ("100001", "100002", "100003",
                                                                                   "100004", "999999")


def reference_document() -> dict[str, Any]:
    """Released and unreleased stores (9999 and 2999 unknown), SKUs (999999 unknown, 100004 in no assortment), a
    MANUAL type, a locked store line and a back-office line (no run) that makes a MANUAL SKU automatic."""
    return {
        "companies": [{"number": "10", "name": "Coalescing AS", "currencyIsoCode": "NOK"}],
        "skus": [{"number": sku, "name": f"SKU {sku}"} for sku in SKUS[:4]],
        "assortments": [{"code": "BASE", "kind": "BASE", "name": "Base", "lines": [
            {"skuNumber": "100001", "replenishmentType": "AUTO", "reorderPoint": "1", "maximumInventory": "5"},
            {"skuNumber": "100002", "replenishmentType": "AUTO", "reorderPoint": "2", "maximumInventory": "6"},
            {"skuNumber": "100003", "replenishmentType": "MANUAL", "reorderPoint": "3", "maximumInventory": "7"}]}],
        "retailStores": [{"number": number, "name": f"Store {number}", "companyNumber": "10",
                          "released": number != "1004", "baseAssortmentCode": "BASE"} for number in RETAIL[:3]],
        "ecomStores": [{"number": "2001", "name": "Web", "companyNumber": "10", "released": True},
                       {"number": "2002", "name": "B2B", "companyNumber": "10", "released": False}],
        "storeAssortmentLines": [
            {"retailStoreNumber": "1001", "skuNumber": "100002", "replenishmentType": "AUTO", "reorderPoint": "8",
             "maximumInventory": "9", "locked": True},
            {"retailStoreNumber": "1002", "skuNumber": "100003", "replenishmentType": "AUTO", "reorderPoint": "8",
             "maximumInventory": "9", "locked": False}],
    }


@st.composite
def forecast_batch(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Items of distinct keys (as an upload holds), some ending before today (applied, then purged)."""
    keys = draw(st.lists(st.tuples(st.sampled_from(("retail", "ecom")), st.integers(0, 2), st.sampled_from(SKUS)),
                         max_size=6, unique=True))
    items = []
    for kind, store, sku in keys:
        start = TODAY + timedelta(days=draw(st.integers(-4, 0)))
        days = draw(st.integers(1, 4))
        items.append({"retail_store_number": RETAIL[store] if kind == "retail" else None,
                      "ecom_store_number": ECOM[store] if kind == "ecom" else None, "sku_number": sku,
                      "horizon_start_date": start, "horizon_end_date": start + timedelta(days=days - 1),
                      "quantities": [Decimal(draw(st.integers(0, 99_999))).scaleb(-2) for _ in range(days)]})
    return items


@st.composite
def parameter_batch(draw: st.DrawFn) -> list[dict[str, Any]]:
    keys = draw(st.lists(st.tuples(st.sampled_from(RETAIL), st.sampled_from(SKUS)), max_size=8, unique=True))
    items = []
    for store, sku in keys:
        point = Decimal(draw(st.integers(0, 9_999))).scaleb(-1)
        items.append({"retail_store_number": store, "sku_number": sku, "reorder_point": point,
                      "maximum_inventory": point + 10})
    return items


def histories(kind: str) -> st.SearchStrategy:
    """Batches applied beforehand (a day earlier: some of their forecasts are expired by now), then the waiting
    batches; each batch (run, items), runs drawn from three so that runs supersede each other and repeat."""
    batch = st.tuples(st.integers(0, 2), forecast_batch() if kind == SALES_FORECAST else parameter_batch())
    return st.tuples(st.lists(batch, max_size=2), st.lists(batch, min_size=1, max_size=6))


def stage(settings: Settings, engine: sa.Engine, tenant_id: str, kind: str, batch_id: str, run: int,
          items: list[dict[str, Any]], received: datetime) -> None:
    schema = FORECAST_ITEMS_SCHEMA if kind == SALES_FORECAST else REPLENISHMENT_ITEMS_SCHEMA
    table = pa.Table.from_pylist([{"item_index": index, **item} for index, item in enumerate(items)], schema=schema)
    name = staged_name(tenant_id, batch_id, "0" * 64)
    stage_items(settings.resolved_staging_dir, name, table)
    record_batch(engine, tenant_id, batch_id, kind, StagedBatch("0" * 64, name, RUNS[run], None, None,
                                                                 table.num_rows, []), received)


def visible(engine: sa.Engine, tenant_id: str, batch_ids: list[str]) -> dict[str, Any]:
    """What the tenant can see: each batch's status fields, its held forecasts and store lines by numbers."""
    with engine.connect() as conn:
        statuses = {row.batch_id: (row.progress, row.applied_count, row.superseded_count, row.locked_count,
                                   row.rejected_count, orjson.loads(row.rejected_items),
                                   row.rejected_items_truncated, row.error_message)
                    for row in conn.execute(sa.select(batches).where(batches.c.tenant_id == tenant_id))}
        forecasts = {(row.is_ecom, row.store_number, row.sku_number): (
            row.horizon_start_date, row.horizon_end_date, row.quantities, row.generated_at, row.modified_time,
            row.batch_id) for row in conn.execute(sa.select(sales_forecasts)
                                                  .where(sales_forecasts.c.tenant_id == tenant_id))}
        # A line the back office wrote (no run) was stamped when each tenant was loaded: its time differs.
        lines = {(row.store, row.sku): (row.replenishment_type, row.reorder_point, row.maximum_inventory,
                                        row.locked, row.generated_at, row.generated_at and row.modified_time)
                 for row in conn.execute(
                     sa.select(retail_stores.c.number.label("store"), skus.c.number.label("sku"),
                               store_assortment_lines)
                     .join(retail_stores, retail_stores.c.id == store_assortment_lines.c.retail_store_id)
                     .join(skus, skus.c.id == store_assortment_lines.c.sku_id)
                     .where(store_assortment_lines.c.tenant_id == tenant_id))}
    return {"statuses": [statuses[batch_id] for batch_id in batch_ids], "forecasts": forecasts, "lines": lines}


class Counting:
    """Counts the transactions that applied several batches together, and those that failed (after which the
    worker falls back to one by one, which would make the comparison trivial). The real function runs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.groups, self.failures = 0, []
        real = worker_module.apply_batches

        def counted(conn, tenant_id, kind, batch_items, now):
            self.groups += 1
            try:
                return real(conn, tenant_id, kind, batch_items, now)
            except Exception as error:
                self.failures.append(error)
                raise

        monkeypatch.setattr(worker_module, "apply_batches", counted)


@pytest.mark.parametrize("kind", [SALES_FORECAST, REPLENISHMENT_PARAMETER])
def test_batches_applied_together_equal_one_by_one(own_store: tuple[Settings, sa.Engine], kind: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    settings, engine = own_store  # the session server's worker would take these batches on the shared store
    counting = Counting(monkeypatch)

    @settings_for_backends
    @given(history=histories(kind))
    def check(history) -> None:
        earlier, waiting = history
        one_by_one, together = (create_tenant(engine, f"coalescing {new_id()}", is_test=True) for _ in range(2))
        received = NOW - timedelta(hours=1)
        batch_ids = [new_id() for _ in earlier + waiting]
        for tenant_id in (one_by_one, together):
            load_document(engine, tenant_id, reference_document())
            for position, (run, items) in enumerate(earlier):
                stage(settings, engine, tenant_id, kind, batch_ids[position], run, items,
                      received + timedelta(seconds=position))
                # A day ago, one by one: the forecasts that ended yesterday are still held, expired.
                Pipeline(engine, settings.resolved_staging_dir, tenant_locks_for(engine), coalesce_items=0,
                         clock=lambda: NOW - timedelta(days=1)).process_tenant(tenant_id)
            for position, (run, items) in enumerate(waiting, start=len(earlier)):
                stage(settings, engine, tenant_id, kind, batch_ids[position], run, items,
                      received + timedelta(seconds=position))
        alone = Pipeline(engine, settings.resolved_staging_dir, tenant_locks_for(engine), coalesce_items=0,
                         clock=lambda: NOW)
        grouped = Pipeline(engine, settings.resolved_staging_dir, tenant_locks_for(engine), clock=lambda: NOW)
        groups_before = counting.groups
        assert alone.process_tenant(one_by_one) == len(waiting)
        assert counting.groups == groups_before  # one by one: never together
        assert grouped.process_tenant(together) == len(waiting)
        if len(waiting) > 1:
            assert counting.groups > groups_before
        assert counting.failures == []
        assert visible(engine, together, batch_ids) == visible(engine, one_by_one, batch_ids)

    check()


settings_for_backends = hypothesis_settings(max_examples=30, deadline=None,
                                 suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                        HealthCheck.too_slow])


def test_an_expired_forecast_held_before_supersedes_only_the_first_batch(own_store: tuple[Settings, sa.Engine],
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """One by one, the first batch purges the expired forecast after its write, so the second batch's item of an
    earlier run applies; together, the first batch goes alone for that reason."""
    settings, engine = own_store
    counting = Counting(monkeypatch)
    ended = {"retail_store_number": "1001", "ecom_store_number": None, "sku_number": "100001",
             "horizon_start_date": TODAY - timedelta(days=1), "horizon_end_date": TODAY - timedelta(days=1),
             "quantities": [Decimal(1)]}
    later = {**ended, "horizon_start_date": TODAY, "horizon_end_date": TODAY, "quantities": [Decimal(2)]}
    other = {**later, "sku_number": "100002"}
    results, batch_ids = [], [new_id(), new_id()]
    for coalesce_items in (0, 100):
        tenant_id = create_tenant(engine, f"expired {new_id()}", is_test=True)
        load_document(engine, tenant_id, reference_document())
        stage(settings, engine, tenant_id, SALES_FORECAST, new_id(), 2, [ended], NOW - timedelta(hours=3))
        Pipeline(engine, settings.resolved_staging_dir, tenant_locks_for(engine),
                 clock=lambda: NOW - timedelta(days=1)).process_tenant(tenant_id)
        stage(settings, engine, tenant_id, SALES_FORECAST, batch_ids[0], 0, [other], NOW - timedelta(hours=2))
        stage(settings, engine, tenant_id, SALES_FORECAST, batch_ids[1], 0, [later], NOW - timedelta(hours=1))
        pipeline = Pipeline(engine, settings.resolved_staging_dir, tenant_locks_for(engine),
                            coalesce_items=coalesce_items, clock=lambda: NOW)
        assert pipeline.process_tenant(tenant_id) == 2
        results.append(visible(engine, tenant_id, batch_ids))
    assert results[0] == results[1]
    assert [status[1:3] for status in results[1]["statuses"]] == [(1, 0), (1, 0)]  # applied, superseded
    assert results[1]["forecasts"][(False, "1001", "100001")][2] == stored_value(["2"])
    assert counting.failures == []
