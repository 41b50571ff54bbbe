"""A planner's file (CSV or Parquet) read, checked and turned into the items of one upload run.

Shapes taken:
- forecasts, long: one row per store, SKU and day: `retailStoreNumber` or `ecomStoreNumber`, `skuNumber`, `date`,
  `quantity`. The rows of a store and SKU make one item; their days must follow each other without a gap (a day
  not forecast is a row with quantity 0: SPEC reads a shorter array as a shorter horizon, not as zero sales).
- forecasts, item: one row per store and SKU: `horizonStartDate`, `quantities` (a list in Parquet; in CSV the
  quantities separated by `;`), `horizonEndDate` optional (checked when present).
- replenishment: one row per store and SKU: `retailStoreNumber`, `skuNumber`, `reorderPoint`, `maximumInventory`.

Every rule the server checks at the door is checked here first, with the same codes and the formats of
`contracts/formats.py`, so a bad file is reported by row number (the data rows counted from 1, header not
counted) before anything is sent. A store and SKU twice in the file is an error (`DUPLICATE_KEY_IN_FILE`): the
batches of a run would silently replace each other's item.
"""

from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from contracts.batch_kinds import REPLENISHMENT_PARAMETER, SALES_FORECAST
from contracts.formats import DATE, DATE_SHAPE, DECIMAL, DECIMAL_SHAPE, KEY
from contracts.limits import MAX_HORIZON_DAYS, MAX_HORIZON_START_AGE_DAYS, MAX_VALIDATION_ERRORS_LISTED

ROW = "row"  # the row number column added to the file's own
RETAIL, ECOM, SKU = "retailStoreNumber", "ecomStoreNumber", "skuNumber"
FORECAST_LONG = (SKU, "date", "quantity")
FORECAST_ITEMS = (SKU, "horizonStartDate", "quantities")
REPLENISHMENT = (RETAIL, SKU, "reorderPoint", "maximumInventory")


@dataclass(frozen=True)
class Problem:
    rows: tuple[int, ...]  # empty for a problem of the whole file
    field: str
    code: str
    message: str

    def __str__(self) -> str:
        where = f"row {self.rows[0]}" if len(self.rows) == 1 else \
            f"rows {', '.join(map(str, self.rows))}" if self.rows else "file"
        return f"{where}: {self.field}: {self.message} ({self.code})"


class BadFile(Exception):
    """The file cannot be uploaded as it is; `problems` lists the first ones found, `count` all of them."""

    def __init__(self, problems: list[Problem], count: int | None = None) -> None:
        super().__init__(f"{count or len(problems)} problem(s) in the file; nothing was sent")
        self.problems, self.count = problems, count or len(problems)


@dataclass(frozen=True)
class Item:
    """One item of the run as it will be sent, and the rows of the file it came from."""

    body: dict[str, Any]
    rows: tuple[int, ...]

    @property
    def horizon_days(self) -> int:
        return len(self.body.get("quantities", ()))


def read_items(path: Path, kind: str, today: date) -> list[Item]:
    """The file's items in file order, or BadFile naming every problem (the first 1,000) by row number."""
    table = _read(path)
    if kind == REPLENISHMENT_PARAMETER:
        _require(table, REPLENISHMENT)
        _Checks(table).keys(RETAIL, SKU).decimals("reorderPoint", "maximumInventory").reorder_below_maximum() \
            .unique(RETAIL, SKU).raise_any()
        return _replenishment_items(table)
    if kind != SALES_FORECAST:
        raise ValueError(f"unknown batch kind {kind}")
    table = table.with_columns(*(pl.lit(None, pl.String).alias(c) for c in (RETAIL, ECOM) if c not in table.columns))
    if "date" in table.columns or "quantity" in table.columns:
        _require(table, FORECAST_LONG)
        return _long_forecast_items(table, today)
    _require(table, FORECAST_ITEMS)
    return _forecast_items(table, today)


def check_horizons(items: list[Item], max_horizon_days: int) -> None:
    """The server's own maxHorizonDays (GET /limits), when it is below the hard maximum checked on reading."""
    problems = [Problem(item.rows, "quantities", "HORIZON_TOO_LONG",
                        f"{item.horizon_days} days; this server takes at most {max_horizon_days}")
                for item in items if item.horizon_days > max_horizon_days]
    if problems:
        raise BadFile(problems[:MAX_VALIDATION_ERRORS_LISTED], len(problems))


def _read(path: Path) -> pl.DataFrame:
    suffix = path.suffix.lower()
    try:
        if suffix == ".parquet":
            table = pl.read_parquet(path)
        elif suffix in (".csv", ".txt"):
            table = pl.read_csv(path, infer_schema=False)  # every value a string: checked, then sent as written
        else:
            raise BadFile([Problem((), path.name, "UNSUPPORTED_FILE", "expected a .csv or .parquet file")])
    except (OSError, pl.exceptions.PolarsError) as error:
        raise BadFile([Problem((), path.name, "UNREADABLE_FILE", str(error).splitlines()[0])]) from None
    # Typed Parquet columns (dates, decimals, numbers) are checked and sent in their text form.
    as_text = [pl.col(name).cast(pl.List(pl.String) if isinstance(dtype, pl.List) else pl.String)
               for name, dtype in table.schema.items() if dtype not in (pl.String, pl.List(pl.String))]
    return table.with_columns(as_text).with_row_index(ROW, offset=1)


def _require(table: pl.DataFrame, columns: tuple[str, ...]) -> None:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise BadFile([Problem((), c, "MISSING_COLUMN", "the file has no such column") for c in missing])


def _text_matches(column: str, pattern: str) -> pl.Expr:
    return pl.col(column).str.contains(f"^(?:{pattern})$")


class _Checks:
    """Row rules over the whole table at once, each adding the rows it finds to the problems."""

    def __init__(self, table: pl.DataFrame) -> None:
        self._table = table
        self.problems: list[Problem] = []
        self.count = 0

    def rule(self, bad: pl.Expr, field: str, code: str, message: str, table: pl.DataFrame | None = None) -> "_Checks":
        rows = (table if table is not None else self._table).filter(bad.fill_null(False))[ROW]
        self.count += len(rows)
        room = MAX_VALIDATION_ERRORS_LISTED - len(self.problems)
        self.problems += [Problem((row,), field, code, message) for row in rows.head(max(room, 0)).to_list()]
        return self

    def keys(self, *columns: str, required: bool = True) -> "_Checks":
        for column in columns:
            if required:
                self.rule(pl.col(column).is_null(), column, "MISSING_FIELD", "is empty")
            self.rule(~_text_matches(column, KEY.re2_core), column, "INVALID_TYPE",
                      "must be 1 to 64 characters, without control characters or white space at either end")
        return self

    def decimals(self, *columns: str) -> "_Checks":
        for column in columns:
            self.rule(pl.col(column).is_null(), column, "MISSING_FIELD", "is empty")
            self.rule(~_text_matches(column, DECIMAL.re2_core), column, "INVALID_DECIMAL", f"must be {DECIMAL_SHAPE}")
        return self

    def dates(self, column: str) -> "_Checks":
        self.rule(pl.col(column).is_null(), column, "MISSING_FIELD", "is empty")
        return self.rule(pl.col(column).is_not_null() & _day(column).is_null(), column, "INVALID_DATE",
                         f"must be {DATE_SHAPE}")

    def one_store(self) -> "_Checks":
        return self.rule(pl.col(RETAIL).is_null() == pl.col(ECOM).is_null(), f"{RETAIL}/{ECOM}", "STORE_KEY_SHAPE",
                         "exactly one of retailStoreNumber and ecomStoreNumber must be set")

    def reorder_below_maximum(self) -> "_Checks":
        return self.rule(_decimal("reorderPoint") >= _decimal("maximumInventory"), "reorderPoint",
                         "REORDER_POINT_NOT_BELOW_MAXIMUM", "must be less than maximumInventory")

    def unique(self, *key: str) -> "_Checks":
        return self.rule(pl.struct(*key).is_duplicated(), "/".join(key), "DUPLICATE_KEY_IN_FILE",
                         "the same key is on another row too")

    def start_not_too_old(self, column: str, today: date) -> "_Checks":
        oldest = today - timedelta(days=MAX_HORIZON_START_AGE_DAYS)
        return self.rule(_day(column) < oldest, column, "HORIZON_START_TOO_OLD",
                         f"may not be before {oldest.isoformat()} ({MAX_HORIZON_START_AGE_DAYS} days ago)")

    def raise_any(self) -> None:
        if self.count:
            raise BadFile(sorted(self.problems, key=lambda p: p.rows), self.count)


def _day(column: str) -> pl.Expr:
    # The pattern first: strptime alone would take "2026-1-2"; strict=False makes a day like 02-30 null.
    return pl.when(_text_matches(column, DATE.re2_core)).then(pl.col(column).str.to_date("%Y-%m-%d", strict=False))


def _decimal(column: str) -> pl.Expr:
    return pl.when(_text_matches(column, DECIMAL.re2_core)).then(pl.col(column).str.to_decimal(scale=4))


def _store_keys(row: dict[str, Any]) -> dict[str, Any]:
    return {RETAIL: row[RETAIL]} if row[RETAIL] is not None else {ECOM: row[ECOM]}


def _replenishment_items(table: pl.DataFrame) -> list[Item]:
    return [Item({RETAIL: r[RETAIL], SKU: r[SKU], "reorderPoint": r["reorderPoint"],
                  "maximumInventory": r["maximumInventory"]}, (r[ROW],))
            for r in table.select(ROW, *REPLENISHMENT).iter_rows(named=True)]


def _long_forecast_items(table: pl.DataFrame, today: date) -> list[Item]:
    checks = _Checks(table).one_store().keys(RETAIL, ECOM, required=False).keys(SKU).dates("date") \
        .decimals("quantity").unique(RETAIL, ECOM, SKU, "date")
    checks.raise_any()
    days = table.with_columns(_day("date").alias("day")).sort(ROW)
    items = days.group_by(RETAIL, ECOM, SKU, maintain_order=True).agg(
        pl.col(ROW).sort_by("day"), pl.col("quantity").sort_by("day"), pl.col("day").min().alias("start"),
        pl.col("day").max().alias("end"), pl.col(ROW).min().alias("first"))
    spans = items.with_columns(length=(pl.col("end") - pl.col("start")).dt.total_days() + 1)
    horizon = spans.select(pl.col(ROW).alias("rows"), pl.col("first").alias(ROW), "start", "length",
                           pl.col(ROW).list.len().alias("count"))
    checks.rule(pl.col("count") != pl.col("length"), "date", "HORIZON_GAP",
                "the days of this row's store and SKU do not follow each other (send a day not forecast as 0)", horizon)
    checks.rule(pl.col("length") > MAX_HORIZON_DAYS, "date", "HORIZON_TOO_LONG",
                f"the days of this row's store and SKU span more than {MAX_HORIZON_DAYS}", horizon)
    checks.start_not_too_old("date", today).raise_any()
    return [Item(_store_keys(r) | {SKU: r[SKU], "horizonStartDate": r["start"].isoformat(),
                                   "horizonEndDate": r["end"].isoformat(), "quantities": r["quantity"]},
                 tuple(r[ROW])) for r in items.iter_rows(named=True)]


def _forecast_items(table: pl.DataFrame, today: date) -> list[Item]:
    if table.schema["quantities"] == pl.String:  # CSV: "1.5;2;0"
        table = table.with_columns(pl.col("quantities").str.split(";"))
    if "horizonEndDate" not in table.columns:
        table = table.with_columns(pl.lit(None, pl.String).alias("horizonEndDate"))
    table = table.with_columns(pl.col("quantities").list.len().alias("days"))
    checks = _Checks(table).one_store().keys(RETAIL, ECOM, required=False).keys(SKU).dates("horizonStartDate") \
        .start_not_too_old("horizonStartDate", today).unique(RETAIL, ECOM, SKU)
    checks.rule(pl.col("days").fill_null(0) == 0, "quantities", "HORIZON_EMPTY", "holds no day")
    checks.rule(pl.col("days") > MAX_HORIZON_DAYS, "quantities", "HORIZON_TOO_LONG",
                f"holds more than {MAX_HORIZON_DAYS} days")
    checks.rule(pl.col("horizonEndDate").is_not_null()
                & (_day("horizonEndDate") != _day("horizonStartDate") + pl.duration(days=pl.col("days") - 1)),
                "horizonEndDate", "HORIZON_LENGTH_MISMATCH", "must be horizonStartDate plus the days less one")
    valid_quantity = pl.element().str.contains(f"^(?:{DECIMAL.re2_core})$").fill_null(False)
    checks.rule(pl.col("quantities").list.eval(~valid_quantity).list.any(), "quantities", "INVALID_DECIMAL",
                f"every quantity must be {DECIMAL_SHAPE}")
    checks.raise_any()
    starts = table.with_columns(_day("horizonStartDate").alias("start"))
    return [Item(_store_keys(r) | {SKU: r[SKU], "horizonStartDate": r["start"].isoformat(),
                                   "horizonEndDate": (r["start"] + timedelta(days=r["days"] - 1)).isoformat(),
                                   "quantities": r["quantities"]}, (r[ROW],))
            for r in starts.iter_rows(named=True)]
