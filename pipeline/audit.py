"""`pia pipeline audit`: the data-quality contract (contracts/held_data_expectations.py) run over held data.

The held rows are read the way clients get them, through db/held.py (its expiry filter, and its parameter
pages with their resolution), so the audit sees exactly what the API returns. The lines the parameters
resolve from are read from the assortment tables on their own, to check the resolution against them. Polars
derives the facts each rule needs; great-expectations validates them and writes Data Docs.
"""

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

import great_expectations as gx
import polars as pl
import sqlalchemy as sa
from great_expectations.data_context import AbstractDataContext
from great_expectations.data_context.types.base import (
    DataContextConfig,
    InMemoryStoreBackendDefaults,
    ProgressBarsConfig,
)

from contracts.held_data_expectations import (
    AUDIT_ROW_KEY,
    DATASETS,
    HELD_REPLENISHMENT_PARAMETERS,
    HELD_SALES_FORECASTS,
    PARAMETER_SOURCES,
    STORE_ASSORTMENT_LINES,
    held_data_suites,
)
from contracts.held_datasets import DECIMAL
from contracts.limits import MAX_PAGE_SIZE
from db.held import KeyT, Page, replenishment_parameter_page, unexpired_forecasts
from db.held_quantities import POLARS_DECIMAL, QUANTITY_BYTES, SCALE, integers
from pipeline import bulk

# Offending rows listed per expectation in the report (the Data Docs list as many).
_EXAMPLES = 5
_DOCS_SITE = "audit"


@dataclass(frozen=True)
class AuditReport:
    success: bool
    summary: dict[str, Any]  # the JSON the command prints


def audit_held_data(engine: sa.Engine, tenant_ids: Sequence[str], today: date, docs_dir: Path) -> AuditReport:
    """Validates the tenants' held data as of today (UTC) and writes Data Docs under docs_dir."""
    datasets = {name: pl.concat([read(engine, tenant_id, today) for tenant_id in tenant_ids], how="vertical")
                for name, read in _READS.items()}
    outcomes = _validate(datasets, docs_dir)
    success = all(outcome["success"] for outcome in outcomes)
    return AuditReport(success, {
        "success": success,
        "today": today.isoformat(),
        "tenants": list(tenant_ids),
        "rows": {name: frame.height for name, frame in datasets.items()},
        "dataDocs": str(docs_dir / "index.html"),
        "expectations": outcomes,
    })


# --- reading ----------------------------------------------------------------------------------------------

def _all_rows(read_page: Callable[[KeyT | None], Page[KeyT]]) -> Iterator[sa.Row]:
    after: KeyT | None = None
    while True:
        page = read_page(after)
        yield from page.rows
        if page.next is None:
            return
        after = page.next


def _store_kind(is_ecom: pl.Expr) -> pl.Expr:
    return pl.when(is_ecom).then(pl.lit("ECOM")).otherwise(pl.lit("RETAIL"))


_KNOWN_STORES = """
    SELECT FALSE AS is_ecom, number AS store_number FROM retail_stores WHERE tenant_id = :tenant_id
    UNION ALL
    SELECT TRUE, number FROM ecom_stores WHERE tenant_id = :tenant_id
"""
_KNOWN_SKUS = "SELECT number AS sku_number FROM skus WHERE tenant_id = :tenant_id"

# A quantity is held as its integer of ten-thousandths (db.held_quantities), of which DECIMAL(18,4) holds 18 digits.
_LARGEST_QUANTITY_HELD = 10**DECIMAL.precision - 1


def _held_forecasts(engine: sa.Engine, tenant_id: str, today: date) -> pl.DataFrame:
    """The forecasts GET /sales_forecasts returns today, with the facts the forecast rules check."""
    held_columns = ("is_ecom", "store_number", "sku_number", "horizon_start_date", "horizon_end_date", "quantities")
    unexpired = unexpired_forecasts(tenant_id, today).subquery()
    with engine.connect() as conn:
        rows = conn.execute(sa.select(*(unexpired.c[name] for name in held_columns))).all()
        held = pl.DataFrame(rows, orient="row", schema={
            "is_ecom": pl.Boolean, "store_number": pl.String, "sku_number": pl.String,
            "horizon_start_date": pl.Date, "horizon_end_date": pl.Date, "quantities": pl.Binary})
        stores = bulk.fetch(conn, _KNOWN_STORES, {"tenant_id": tenant_id},
                            {"is_ecom": pl.Boolean, "store_number": pl.String})
        skus = bulk.fetch(conn, _KNOWN_SKUS, {"tenant_id": tenant_id}, {"sku_number": pl.String})
    size = pl.col("quantities").bin.size()
    held = held.with_columns(quantities_readable=size % QUANTITY_BYTES == 0, horizon_days=size // QUANTITY_BYTES)
    # Bytes of a length no quantities have are reported as such; the rest are read.
    readable = held.select(pl.when("quantities_readable").then("quantities").otherwise(pl.lit(b""))).to_series()
    held = held.with_columns(pl.Series("quantities", integers(readable.to_arrow())))
    quantities = pl.col("quantities")
    return (held
            .join(stores.with_columns(store_known=pl.lit(True)), on=["is_ecom", "store_number"], how="left")
            .join(skus.with_columns(sku_known=pl.lit(True)), on="sku_number", how="left")
            .select(
                pl.lit(tenant_id).alias("tenant_id"), _store_kind(pl.col("is_ecom")).alias("store_kind"),
                "store_number", "sku_number", "horizon_start_date", "horizon_end_date",
                "quantities_readable", horizon_days := pl.col("horizon_days"),
                (pl.col("horizon_start_date") + pl.duration(days=horizon_days - 1)).alias("expected_end_date"),
                quantities.list.eval(pl.element().abs() > _LARGEST_QUANTITY_HELD).list.sum()
                .alias("out_of_range_quantities"),
                # A float's sign is exact, which is all "non-negative" asks of it.
                (quantities.list.min() / 10**SCALE).alias("smallest_quantity"),
                (pl.col("horizon_end_date") < today).alias("ended_before_today"),
                pl.col("store_known").fill_null(False), pl.col("sku_known").fill_null(False)))


# Every line a retail store's parameters may resolve from, by the source name a resolved row would give it.
_LINES = """
    SELECT s.number AS store_number, k.number AS sku_number, 'RETAIL_STORE_SPECIFIC' AS source,
           l.reorder_point, l.maximum_inventory, l.locked
    FROM store_assortment_lines l
    JOIN retail_stores s ON s.tenant_id = l.tenant_id AND s.id = l.retail_store_id
    JOIN skus k ON k.tenant_id = l.tenant_id AND k.id = l.sku_id
    WHERE l.tenant_id = :tenant_id
    UNION ALL
    SELECT s.number, k.number, CASE WHEN a.assortment_id = s.local_assortment_id THEN 'LOCAL_ASSORTMENT'
                                    ELSE 'BASE_ASSORTMENT' END,
           a.reorder_point, a.maximum_inventory, NULL
    FROM retail_stores s
    JOIN assortment_lines a ON a.tenant_id = s.tenant_id
                           AND a.assortment_id IN (s.local_assortment_id, s.base_assortment_id)
    JOIN skus k ON k.tenant_id = a.tenant_id AND k.id = a.sku_id
    WHERE s.tenant_id = :tenant_id
"""
_LINES_SCHEMA = {"store_number": pl.String, "sku_number": pl.String, "source": pl.String,
                 "reorder_point": POLARS_DECIMAL, "maximum_inventory": POLARS_DECIMAL, "locked": pl.Boolean}


def _held_parameters(engine: sa.Engine, tenant_id: str, today: date) -> pl.DataFrame:
    """The rows GET /replenishment_parameters returns, each beside its lines, with the facts the rules check."""
    rows = [(row.store_number, row.sku_number, row.reorder_point, row.maximum_inventory, row.parameter_source,
             row.locked)
            for row in _all_rows(lambda after: replenishment_parameter_page(
                engine, tenant_id, retail_store_number=None, modified_since=None, after=after,
                limit=MAX_PAGE_SIZE))]
    resolved = pl.DataFrame(rows, orient="row", schema={
        "store_number": pl.String, "sku_number": pl.String, "reorder_point": POLARS_DECIMAL,
        "maximum_inventory": POLARS_DECIMAL, "parameter_source": pl.String, "locked": pl.Boolean})
    with engine.connect() as conn:
        lines = bulk.fetch(conn, _LINES, {"tenant_id": tenant_id}, _LINES_SCHEMA)
    return parameter_facts(resolved, lines).select(
        pl.lit(tenant_id).alias("tenant_id"), pl.lit("RETAIL").alias("store_kind"), pl.all())


def parameter_facts(resolved: pl.DataFrame, lines: pl.DataFrame) -> pl.DataFrame:
    """The resolved rows with the facts of "parameter source consistent with the lines" (see the contract).

    lines has one row per line of a store and SKU: store_number, sku_number, source (the parameterSource that
    names its kind), reorder_point, maximum_inventory, and locked (store-specific lines only).
    """
    keys = ["store_number", "sku_number"]
    columns = ("reorder_point", "maximum_inventory", "locked")
    beside = resolved
    for source in PARAMETER_SOURCES:
        of_source = lines.filter(pl.col("source") == source).select(
            *keys, pl.lit(True).alias(f"{source}_exists"),
            *(pl.col(name).alias(f"{source}_{name}") for name in columns))
        beside = beside.join(of_source, on=keys, how="left")

    def exists(source: str) -> pl.Expr:
        return pl.col(f"{source}_exists").fill_null(False)

    def has_values(source: str) -> pl.Expr:
        return pl.col(f"{source}_reorder_point").is_not_null() | pl.col(f"{source}_maximum_inventory").is_not_null()

    def of_named_source(make: Callable[[str], pl.Expr]) -> pl.Expr:
        """make(source) taken from the source the row names."""
        named = pl.when(pl.col("parameter_source") == PARAMETER_SOURCES[0]).then(make(PARAMETER_SOURCES[0]))
        for source in PARAMETER_SOURCES[1:]:
            named = named.when(pl.col("parameter_source") == source).then(make(source))
        return named.otherwise(pl.lit(None))

    # The values come as a pair from the most specific line that has any; failing all, the most specific line.
    expected = pl.coalesce(*(pl.when(has_values(source)).then(pl.lit(source)) for source in PARAMETER_SOURCES),
                           *(pl.when(exists(source)).then(pl.lit(source)) for source in PARAMETER_SOURCES))
    store_line = PARAMETER_SOURCES[0]
    return beside.select(
        *keys, "reorder_point", "maximum_inventory", "parameter_source", "locked",
        of_named_source(exists).fill_null(False).alias("source_line_exists"),
        of_named_source(lambda source: exists(source)
                        & pl.col("reorder_point").eq_missing(pl.col(f"{source}_reorder_point"))
                        & pl.col("maximum_inventory").eq_missing(pl.col(f"{source}_maximum_inventory")))
        .fill_null(False).alias("source_line_carries_values"),
        expected.eq_missing(pl.col("parameter_source")).alias("follows_resolution_order"),
        pl.col("locked").eq_missing(pl.col(f"{store_line}_locked").fill_null(False)).alias("locked_as_store_line"))


# A line of a store or SKU that no longer exists is named by the id it holds.
_STORE_LINES = """
    SELECT COALESCE(s.number, 'unknown id ' || l.retail_store_id) AS store_number,
           COALESCE(k.number, 'unknown id ' || l.sku_id) AS sku_number,
           s.id IS NOT NULL AS store_known, k.id IS NOT NULL AS sku_known
    FROM store_assortment_lines l
    LEFT JOIN retail_stores s ON s.tenant_id = l.tenant_id AND s.id = l.retail_store_id
    LEFT JOIN skus k ON k.tenant_id = l.tenant_id AND k.id = l.sku_id
    WHERE l.tenant_id = :tenant_id
"""


def _store_lines(engine: sa.Engine, tenant_id: str, today: date) -> pl.DataFrame:
    with engine.connect() as conn:
        lines = bulk.fetch(conn, _STORE_LINES, {"tenant_id": tenant_id}, {
            "store_number": pl.String, "sku_number": pl.String, "store_known": pl.Boolean, "sku_known": pl.Boolean})
    return lines.select(pl.lit(tenant_id).alias("tenant_id"), pl.lit("RETAIL").alias("store_kind"), pl.all())


_READS: dict[str, Callable[[sa.Engine, str, date], pl.DataFrame]] = {
    HELD_SALES_FORECASTS: _held_forecasts,
    HELD_REPLENISHMENT_PARAMETERS: _held_parameters,
    STORE_ASSORTMENT_LINES: _store_lines,
}
assert set(_READS) == set(DATASETS), "every dataset of the contract is read"


# --- validating -------------------------------------------------------------------------------------------

def _context(docs_dir: Path) -> AbstractDataContext:
    """An in-memory context whose only on-disk output is the Data Docs site; no usage statistics are sent."""
    site = {"class_name": "SiteBuilder", "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(docs_dir)}}
    return gx.get_context(mode="ephemeral", project_config=DataContextConfig(
        analytics_enabled=False, store_backend_defaults=InMemoryStoreBackendDefaults(),
        progress_bars=ProgressBarsConfig(globally=False), data_docs_sites={_DOCS_SITE: site}))


def _validate(datasets: dict[str, pl.DataFrame], docs_dir: Path) -> list[dict[str, Any]]:
    """Runs each dataset's suite, then builds the Data Docs of the run; one outcome per expectation."""
    context = _context(docs_dir)
    source = context.data_sources.add_pandas("held_data")
    result_format = {"result_format": "SUMMARY", "unexpected_index_column_names": list(AUDIT_ROW_KEY),
                     "partial_unexpected_count": _EXAMPLES}
    outcomes = []
    for name, suite in held_data_suites().items():
        batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe(name)
        definition = context.validation_definitions.add(
            gx.ValidationDefinition(name=name, data=batch, suite=context.suites.add(suite)))
        result = definition.run(batch_parameters={"dataframe": datasets[name].to_pandas()},
                                result_format=result_format)
        outcomes += [_outcome(name, item) for item in result.results]
    context.build_data_docs(site_names=[_DOCS_SITE])
    return outcomes


def _outcome(dataset: str, item: Any) -> dict[str, Any]:
    meta, result = item.expectation_config.meta, item.result
    return {"name": meta["name"], "dataset": dataset, "rule": meta["rule"], "success": bool(item.success),
            "unexpectedCount": int(result.get("unexpected_count") or 0),
            "offendingRows": [{name: _plain(value) for name, value in row.items()}
                              for row in result.get("partial_unexpected_index_list") or []]}


def _plain(value: Any) -> Any:
    """A value of a pandas row as JSON can hold it."""
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    if isinstance(value, datetime):  # pandas turns the datasets' dates into timestamps
        return value.date().isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return str(value)  # Decimal
