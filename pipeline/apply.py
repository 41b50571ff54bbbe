"""Applying staged batches of a tenant inside the caller's transaction: one batch, or several consecutive ones
of one kind together, with the result of applying them one by one.

Items are judged column-wise: the batches' keys are staged once, and the tenant's stores, SKUs, (for
replenishment) assortment lines and held rows they name are fetched in a few set-based queries and joined on
in Polars. Which items apply is then settled per key in processing order (an item of an earlier run than the
held row, or than an earlier batch's item of the same key, is superseded); each key's last applied item is
written: one UPDATE of the keys already held and one INSERT of the others, however many batches. Nothing here
commits; the caller records every batch's status in the same transaction, so a failure leaves nothing of the
batches applied.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import polars as pl
import pyarrow as pa
import sqlalchemy as sa
from polars.expr.whenthen import ChainedThen

from contracts.batch_kinds import REPLENISHMENT_PARAMETER, SALES_FORECAST
from contracts.limits import MAX_REJECTED_ITEMS_LISTED
from db.bulk import staged
from db.held_quantities import stored
from db.schema import sales_forecasts, store_assortment_lines
from pipeline import bulk

_KEY = ("is_ecom", "store_number", "sku_number")
# A verdict that is not a rejection: the user locked the store's values for the SKU.
_LOCKED = "locked"


class HeldRowsChanged(Exception):
    """Fewer rows were written than settled: another writer changed held rows between the reads and the writes
    (the back office's store lines). Trying again reads them afresh."""


@dataclass(frozen=True)
class Outcome:
    counts: dict[str, int]  # items, applied, superseded, locked, rejected; items is the sum of the others
    rejected_items: list[dict[str, Any]]  # the first MAX_REJECTED_ITEMS_LISTED by item index
    rejected_items_truncated: bool


@dataclass(frozen=True)
class BatchItems:
    """A batch to apply: its id, its run (generatedAt) and its staged items."""

    batch_id: str
    generated_at: datetime
    items: pa.Table


def apply_batch(conn: sa.Connection, tenant_id: str, kind: str, batch_id: str, generated_at: datetime,
                items: pa.Table, now: datetime) -> Outcome:
    """Applies one batch's staged items (kind SALES_FORECAST or REPLENISHMENT_PARAMETER) for the tenant.

    generated_at is the batch's run; now stamps modified_time and sets today (UTC) for the purge.
    """
    return apply_batches(conn, tenant_id, kind, [BatchItems(batch_id, generated_at, items)], now)[0]


def apply_batches(conn: sa.Connection, tenant_id: str, kind: str, batches: Sequence[BatchItems],
                  now: datetime) -> list[Outcome]:
    """Applies consecutive batches of one kind of the tenant, in their order, as applying them one by one
    with the same `now` would; an Outcome per batch."""
    now = now.astimezone(UTC)
    if kind == SALES_FORECAST:
        outcomes = []
        for run in _forecast_runs(conn, tenant_id, batches, now.date()):
            settled = _settled(_judge_forecasts(conn, tenant_id, _frame(run)))
            _write_forecasts(conn, tenant_id, now, settled)
            # After the write, so an item whose horizon has already ended goes too.
            _purge_expired_forecasts(conn, tenant_id, now.date())
            outcomes += _outcomes(settled, len(run))
        return outcomes
    if kind == REPLENISHMENT_PARAMETER:
        settled = _settled(_judge_parameters(conn, tenant_id, _frame(batches)))
        _write_parameters(conn, tenant_id, now, settled)
        return _outcomes(settled, len(batches))
    raise ValueError(f"unknown batch kind {kind!r}")


def _forecast_runs(conn: sa.Connection, tenant_id: str, batches: Sequence[BatchItems],
                   today: date) -> list[list[BatchItems]]:
    """The batches in runs that one write each applies as one by one would. Each batch purges the expired
    forecasts after its write, which later batches then no longer see held: so a run ends after a batch with
    an item whose horizon has already ended, and the first batch runs alone while expired forecasts are held."""
    runs: list[list[BatchItems]] = [[]]
    for batch in batches:
        runs[-1].append(batch)
        if pl.from_arrow(batch.items.select(["horizon_end_date"])).get_column("horizon_end_date").lt(today).any():
            runs.append([])
    runs = [run for run in runs if run]
    if runs and len(runs[0]) > 1 and conn.execute(sa.select(sa.exists().where(
            sales_forecasts.c.tenant_id == tenant_id, sales_forecasts.c.horizon_end_date < today))).scalar_one():
        runs[:1] = [runs[0][:1], runs[0][1:]]
    return runs


def _frame(batches: Sequence[BatchItems]) -> pl.DataFrame:
    """The batches' items in processing order, each with its batch's position (member), run and id."""
    return pl.concat([_keyed(pl.from_arrow(batch.items)).with_columns(
        member=pl.lit(position, pl.UInt32), generated_at=pl.lit(batch.generated_at.astimezone(UTC)),
        batch_id=pl.lit(batch.batch_id)) for position, batch in enumerate(batches)], how="vertical_relaxed")


def _keyed(frame: pl.DataFrame) -> pl.DataFrame:
    """Adds the held key's store part: which kind of store, and its number."""
    ecom = pl.col("ecom_store_number") if "ecom_store_number" in frame.columns else pl.lit(None, pl.String)
    return frame.with_columns(is_ecom=ecom.is_not_null(), store_number=pl.coalesce("retail_store_number", ecom))


# --- judging ----------------------------------------------------------------------------------------------

_STORES = """
    SELECT FALSE AS is_ecom, number AS store_number, released, id AS retail_store_id
    FROM retail_stores
    WHERE tenant_id = :tenant_id AND number IN (SELECT store_number FROM {keys} WHERE NOT is_ecom)
    UNION ALL
    SELECT TRUE, number, released, NULL
    FROM ecom_stores
    WHERE tenant_id = :tenant_id AND number IN (SELECT store_number FROM {keys} WHERE is_ecom)
"""
_STORES_SCHEMA = {"is_ecom": pl.Boolean, "store_number": pl.String, "released": pl.Boolean,
                  "retail_store_id": pl.String}

_SKUS = "SELECT number AS sku_number, id AS sku_id FROM skus WHERE tenant_id = :tenant_id " \
        "AND number IN (SELECT sku_number FROM {keys})"
_SKUS_SCHEMA = {"sku_number": pl.String, "sku_id": pl.String}

# Per key: the store-specific line and the store's local and base assortment lines for the SKU, where held.
_LINES = """
    SELECT k.store_number, k.sku_number, l.replenishment_type AS store_type, l.locked,
           la.replenishment_type AS local_type, ba.replenishment_type AS base_type,
           l.sku_id IS NOT NULL AS held, l.generated_at AS held_generated_at
    FROM {keys} k
    JOIN retail_stores r ON r.tenant_id = :tenant_id AND r.number = k.store_number
    JOIN skus s ON s.tenant_id = :tenant_id AND s.number = k.sku_number
    LEFT JOIN store_assortment_lines l
        ON l.tenant_id = :tenant_id AND l.retail_store_id = r.id AND l.sku_id = s.id
    LEFT JOIN assortment_lines la
        ON la.tenant_id = :tenant_id AND la.assortment_id = r.local_assortment_id AND la.sku_id = s.id
    LEFT JOIN assortment_lines ba
        ON ba.tenant_id = :tenant_id AND ba.assortment_id = r.base_assortment_id AND ba.sku_id = s.id
"""
_INSTANT = pl.Datetime("us", "UTC")
_LINES_SCHEMA = {"store_number": pl.String, "sku_number": pl.String, "store_type": pl.String,
                 "locked": pl.Boolean, "local_type": pl.String, "base_type": pl.String, "held": pl.Boolean,
                 "held_generated_at": _INSTANT}

# Per key: the run of the held forecast, where one is held.
_HELD_FORECASTS = """
    SELECT k.is_ecom, k.store_number, k.sku_number, TRUE AS held, f.generated_at AS held_generated_at
    FROM {keys} k
    JOIN sales_forecasts f ON f.tenant_id = :tenant_id AND f.is_ecom = k.is_ecom
        AND f.store_number = k.store_number AND f.sku_number = k.sku_number
"""
_HELD_FORECASTS_SCHEMA = {"is_ecom": pl.Boolean, "store_number": pl.String, "sku_number": pl.String,
                          "held": pl.Boolean, "held_generated_at": _INSTANT}


def _with_references(conn: sa.Connection, tenant_id: str, keys: str, frame: pl.DataFrame) -> pl.DataFrame:
    """Adds the store's released flag and id, and the SKU's id; null where the tenant has no such one."""
    params = {"tenant_id": tenant_id}
    stores = bulk.fetch(conn, _STORES.format(keys=keys), params, _STORES_SCHEMA)
    skus = bulk.fetch(conn, _SKUS.format(keys=keys), params, _SKUS_SCHEMA)
    return (frame.join(stores, on=["is_ecom", "store_number"], how="left")
            .join(skus, on="sku_number", how="left"))


def _reference_checks() -> ChainedThen:
    """The rejections both kinds share, in the order the contract lists them: store first, then SKU."""
    def by_store_kind(retail: str, ecom: str) -> pl.Expr:
        return pl.when(pl.col("is_ecom")).then(pl.lit(ecom)).otherwise(pl.lit(retail))

    return (pl.when(pl.col("released").is_null())
            .then(by_store_kind("UNKNOWN_RETAIL_STORE", "UNKNOWN_ECOM_STORE"))
            .when(~pl.col("released"))
            .then(by_store_kind("RETAIL_STORE_NOT_RELEASED", "ECOM_STORE_NOT_RELEASED"))
            .when(pl.col("sku_id").is_null())
            .then(pl.lit("UNKNOWN_SKU")))


def _judge_forecasts(conn: sa.Connection, tenant_id: str, frame: pl.DataFrame) -> pl.DataFrame:
    """Adds a verdict per item (a rejection code, or null when the item may be applied), and whether its key
    is held (held) and from which run (held_generated_at)."""
    with staged(conn, frame.select(_KEY).unique().to_arrow()) as keys:
        known = _with_references(conn, tenant_id, keys, frame)
        held = bulk.fetch(conn, _HELD_FORECASTS.format(keys=keys), {"tenant_id": tenant_id}, _HELD_FORECASTS_SCHEMA)
    return (known.join(held, on=list(_KEY), how="left")
            .with_columns(verdict=_reference_checks().otherwise(pl.lit(None, pl.String)),
                          held=pl.col("held").fill_null(False)))


def _judge_parameters(conn: sa.Connection, tenant_id: str, frame: pl.DataFrame) -> pl.DataFrame:
    """Adds the resolved replenishment type, a verdict per item (a rejection code, _LOCKED, or null), and whether
    a store-specific line is held (held) and from which run (held_generated_at; null for a back-office line)."""
    with staged(conn, frame.select(_KEY).unique().to_arrow()) as keys:
        known = _with_references(conn, tenant_id, keys, frame)
        lines = bulk.fetch(conn, _LINES.format(keys=keys), {"tenant_id": tenant_id}, _LINES_SCHEMA)
    known = (known.join(lines, on=["store_number", "sku_number"], how="left")
             .with_columns(replenishment_type=pl.coalesce("store_type", "local_type", "base_type"),
                           held=pl.col("held").fill_null(False)))
    # Locked wins over MANUAL: a user's lock skips the item whatever its type.
    return known.with_columns(verdict=_reference_checks()
                              .when(pl.col("replenishment_type").is_null()).then(pl.lit("SKU_NOT_IN_ASSORTMENT"))
                              .when(pl.col("locked").fill_null(False)).then(pl.lit(_LOCKED))
                              .when(pl.col("replenishment_type") == "MANUAL").then(pl.lit("REPLENISHMENT_TYPE_MANUAL"))
                              .otherwise(pl.lit(None, pl.String)))


# --- settling -----------------------------------------------------------------------------------------------

def _settled(judged: pl.DataFrame) -> pl.DataFrame:
    """Adds to each item whether it applies (null when judged otherwise) and whether it is its key's last applied
    item (final), the one left held.

    One by one, an item applies when its run is no earlier than the held row's, which is the latest of the run
    held before the batches and the runs of the key's items of earlier batches (a superseded item was earlier
    than one of those): so a running maximum per key in processing order settles every item at once.
    """
    passed = judged.filter(pl.col("verdict").is_null()).sort(*_KEY, "member")  # each key's items in order
    # The latest earlier run of each item's key, without a window: Polars runs one that is not an aggregation group
    # by group (350 ms per 100,000 keys). Each key's items form a segment, and a run is coded as its segment's
    # number times (runs + 1) plus its rank among the runs, so a code is above every code of earlier segments: the
    # running maximum of the codes up to the previous row, less the item's segment base, is the rank of the latest
    # earlier run of its key, or not positive where there is none (20 ms per 100,000 items).
    first = pl.any_horizontal([pl.col(name).ne_missing(pl.col(name).shift(1)) for name in _KEY])  # row 0 too
    runs = passed.get_column("generated_at").n_unique()
    passed = passed.with_columns(run=pl.col("generated_at").rank("dense").cast(pl.Int64),
                                 base=first.cum_sum().cast(pl.Int64) * (runs + 1))
    latest_earlier_run = ((pl.col("base") + pl.col("run")).cum_max().shift(1) - pl.col("base")).fill_null(0)
    held = pl.col("held_generated_at")
    passed = passed.with_columns(applied=(held.is_null() | (pl.col("generated_at") >= held))
                                 & (latest_earlier_run <= pl.col("run")))
    last_applied = pl.when("applied").then(pl.col("member")).max().over(_KEY)
    passed = passed.with_columns(final=pl.col("applied") & (pl.col("member") == last_applied)).drop("run", "base")
    judged_otherwise = judged.filter(pl.col("verdict").is_not_null()).with_columns(
        applied=pl.lit(None, pl.Boolean), final=pl.lit(False))
    return pl.concat([passed, judged_otherwise])


# --- writing ----------------------------------------------------------------------------------------------

def _write_forecasts(conn: sa.Connection, tenant_id: str, now: datetime, settled: pl.DataFrame) -> int:
    """Replaces the held forecast of each key whole: horizon, quantities and provenance."""
    rows = settled.filter("final").select(
        pl.lit(tenant_id).alias("tenant_id"), *_KEY, "horizon_start_date", "horizon_end_date", "quantities",
        "generated_at", pl.lit(now).alias("modified_time"), "batch_id", "held")
    rows = rows.with_columns(stored(rows.get_column("quantities")))
    key = ("tenant_id", *_KEY)
    return _written(rows, bulk.write(conn, sales_forecasts, rows, key,
                                     [name for name in rows.columns if name not in (*key, "held")]))


def _write_parameters(conn: sa.Connection, tenant_id: str, now: datetime, settled: pl.DataFrame) -> int:
    """Writes the values to the store-specific line; a new line takes the type it inherited, unlocked."""
    rows = settled.filter("final").select(
        pl.lit(tenant_id).alias("tenant_id"), "retail_store_id", "sku_id", "replenishment_type",
        "reorder_point", "maximum_inventory", pl.lit(False).alias("locked"),
        pl.lit(now).alias("modified_time"), "generated_at", "held")
    # The back office writes store lines too, and may add one meanwhile.
    return _written(rows, bulk.write(conn, store_assortment_lines, rows, ("retail_store_id", "sku_id"),
                                     ("reorder_point", "maximum_inventory", "modified_time", "generated_at"),
                                     inserted_elsewhere=True))


def _written(rows: pl.DataFrame, written: int) -> int:
    if written != rows.height:
        raise HeldRowsChanged(f"{written} of {rows.height} settled rows written")
    return written


def _purge_expired_forecasts(conn: sa.Connection, tenant_id: str, today: date) -> None:
    conn.execute(sa.delete(sales_forecasts).where(sales_forecasts.c.tenant_id == tenant_id,
                                                  sales_forecasts.c.horizon_end_date < today))


# --- reporting --------------------------------------------------------------------------------------------

def _outcomes(settled: pl.DataFrame, batches: int) -> list[Outcome]:
    """The outcome of each of the batches (members 0 … batches − 1)."""
    verdict = pl.col("verdict")
    is_rejected = verdict.is_not_null() & (verdict != _LOCKED)
    counts = {row["member"]: row for row in settled.group_by("member").agg(
        items=pl.len(), applied=pl.col("applied").fill_null(False).sum(),
        superseded=(~pl.col("applied")).fill_null(False).sum(), locked=(verdict == _LOCKED).sum(),
        rejected=is_rejected.sum()).iter_rows(named=True)}
    listed: dict[int, list[dict[str, Any]]] = {}
    for row in (settled.filter(is_rejected).sort("member", "item_index")
                .group_by("member", maintain_order=True).head(MAX_REJECTED_ITEMS_LISTED).iter_rows(named=True)):
        listed.setdefault(row["member"], []).append(_rejected_item(row))
    outcomes = []
    for member in range(batches):
        found = counts.get(member, {})
        member_counts = {name: int(found.get(name, 0)) for name in ("items", "applied", "superseded", "locked",
                                                                    "rejected")}
        outcomes.append(Outcome(member_counts, listed.get(member, []),
                                member_counts["rejected"] > MAX_REJECTED_ITEMS_LISTED))
    return outcomes


def _rejected_item(row: dict[str, Any]) -> dict[str, Any]:
    store_field = "ecomStoreNumber" if row["is_ecom"] else "retailStoreNumber"
    return {"index": row["item_index"], store_field: row["store_number"], "skuNumber": row["sku_number"],
            "code": row["verdict"]}
