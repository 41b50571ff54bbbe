"""Decompressed demand-planning body → CheckedBatch, or the 400/413 the contract names; pure, no I/O.

Two paths apply one set of rules. The fast path parses once with orjson and checks every rule on columns
(Arrow kernels, one RE2 match over all decimals joined as text, an exact decimal parse of that text by Polars);
it builds the items table. Only when it sees any problem does the exact path walk the items in Python and list
every error with its path; the 400 is raised from there. Both apply the format rules of contracts/formats.py, and
Hypothesis properties (tests/test_ingest_properties.py) hold them to the same verdicts and the same table.
Precedence (DESIGN.md): parse (400 BAD_REQUEST), items per batch (413), then field validation (400
VALIDATION_ERROR).

Decisions SPEC.md leaves open (the format rules of keys, decimals, dates and timestamps are in contracts/formats.py):
- A JSON number where a decimal, date or timestamp is expected gets that format's code (INVALID_DECIMAL,
  INVALID_DATE, INVALID_TIMESTAMP) with a message saying it is sent as a string: the likely mistake (the API
  used to take epoch seconds). A boolean, object or array there is INVALID_TYPE.
- A null quantity is INVALID_DECIMAL (a day without a forecast is "0"); a null field is MISSING_FIELD.
- A key that breaks the key rule (empty, too long, a control character, white space at an end) is INVALID_TYPE,
  the code SPEC.md gives an empty key. An item's business keys are echoed in its errors when they are at most
  64 characters long, so a huge bad key is not repeated in every error of its item.
- Integers (itemCount, batchIndex, batchTotal) are JSON integers; 1.0 is INVALID_TYPE. batchTotal is at most
  2^31-1 (the store's INTEGER; BATCH_INDEX_RANGE), which bounds batchIndex; itemCount equals the item count.
- A generatedAt whose instant in UTC falls outside years 1 to 9999 is INVALID_TIMESTAMP.
- STORE_KEY_SHAPE is reported at items[i] for a forecast (the pair is wrong) and at
  items[i].ecomStoreNumber for a replenishment parameter (retail stores only).
- DUPLICATE_KEY_IN_BATCH is reported on every later item with the key, naming the first one's index.
- Unknown fields (envelope and item level, not inside ext) are warnings, one per name with the number of
  objects carrying it; they are returned with a valid batch only, as the 400 body has no place for them. The first
  MAX_WARNINGS_LISTED names are listed (a name cut to 100 characters); a final warning WARNINGS_TRUNCATED
  (field null) counts the names not listed.
"""

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from itertools import islice, repeat
from typing import Any, TypeVar

import orjson
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from contracts import formats
from contracts.batch_kinds import REPLENISHMENT_PARAMETER, SALES_FORECAST
from contracts.errors import BadRequest, LimitExceeded, ValidationFailed
from contracts.limits import (
    MAX_DECIMAL_PLACES,
    MAX_HORIZON_DAYS,
    MAX_HORIZON_START_AGE_DAYS,
    MAX_ITEMS_PER_BATCH,
    MAX_VALIDATION_ERRORS_LISTED,
    MAX_WARNINGS_LISTED,
)

DECIMAL = pa.decimal128(formats.DECIMAL_PRECISION, MAX_DECIMAL_PLACES)  # DECIMAL(18,4) in the store

FORECAST_ITEMS_SCHEMA = pa.schema([
    pa.field("item_index", pa.int32(), nullable=False),
    pa.field("retail_store_number", pa.string()),
    pa.field("ecom_store_number", pa.string()),
    pa.field("sku_number", pa.string(), nullable=False),
    pa.field("horizon_start_date", pa.date32(), nullable=False),
    pa.field("horizon_end_date", pa.date32(), nullable=False),
    pa.field("quantities", pa.list_(DECIMAL), nullable=False),
])
REPLENISHMENT_ITEMS_SCHEMA = pa.schema([
    pa.field("item_index", pa.int32(), nullable=False),
    pa.field("retail_store_number", pa.string(), nullable=False),
    pa.field("sku_number", pa.string(), nullable=False),
    pa.field("reorder_point", DECIMAL, nullable=False),
    pa.field("maximum_inventory", DECIMAL, nullable=False),
])


@dataclass(frozen=True)
class CheckedBatch:
    kind: str
    generated_at: datetime
    batch_index: int | None
    batch_total: int | None
    item_count: int
    warnings: list[dict[str, Any]]
    items: pa.Table


def check_batch(kind: str, raw: bytes, today: date) -> CheckedBatch:
    rules = _RULES[kind]
    document = _parse(raw)
    items = document.get("items")
    if type(items) is list and len(items) > MAX_ITEMS_PER_BATCH:
        raise LimitExceeded("maxItemsPerBatch", MAX_ITEMS_PER_BATCH, len(items))
    errors = _Errors()
    generated_at, batch_index, batch_total, item_count = _check_envelope(document, errors)
    table = None
    if type(items) is list:
        table = rules.fast(items, today) if items else rules.schema.empty_table()
        if table is None:
            rules.exact(items, today, errors)
    errors.raise_if_any()
    if table is None:  # a bug, not the client's fault
        raise RuntimeError("the fast path refused a batch in which the exact path found nothing wrong")
    assert generated_at is not None and item_count is not None  # read, as nothing was wrong
    return CheckedBatch(kind, generated_at, batch_index, batch_total, item_count,
                        _unknown_fields(document, items, rules.item_fields), table)


def _parse(raw: bytes) -> dict[str, Any]:
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise BadRequest(f"The body is not valid JSON: {error}.") from None
    if type(document) is not dict:
        raise BadRequest(f"The body must be a JSON object, not {_json_type(document)}.")
    return document


# --- errors -------------------------------------------------------------------------------------------------


class _Errors:
    """Every error is counted; the first MAX_VALIDATION_ERRORS_LISTED are listed."""

    def __init__(self) -> None:
        self.count = 0
        self.listed: list[dict[str, str]] = []

    @property
    def full(self) -> bool:
        return len(self.listed) >= MAX_VALIDATION_ERRORS_LISTED

    def add(self, path: str, code: str, message: str, keys: dict[str, str] | None = None) -> None:
        self.count += 1
        if not self.full:
            self.listed.append({"path": path, "code": code, "message": message, **(keys or {})})

    def raise_if_any(self) -> None:
        if self.count:
            raise ValidationFailed(
                f"{self.count} validation error(s); nothing was stored.",
                {"errors": self.listed, "errorsTruncated": self.count > len(self.listed)},
            )


class _Invalid(Exception):
    """A value breaks a rule; `problem` completes a sentence that starts with the field's name."""

    def __init__(self, code: str, problem: str) -> None:
        super().__init__(problem)
        self.code, self.problem = code, problem


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names[type(value)]


def _shown(value: object) -> str:
    text = orjson.dumps(value).decode()
    return text if len(text) <= 40 else text[:37] + "..."


# --- value rules, shared by the envelope and the exact path ----------------------------------------------------

T = TypeVar("T")


def _text_format(value: object, parse: Callable[[str], T | None], code: str, shape: str) -> T:
    if type(value) is str:
        if (parsed := parse(value)) is not None:
            return parsed
        raise _Invalid(code, f"is {_shown(value)}, not {shape}.")
    if type(value) in (int, float):
        raise _Invalid(code, f"is the number {_shown(value)}; it is sent as a string: {shape}.")
    raise _Invalid("INVALID_TYPE", f"must be a string ({shape}), not {_json_type(value)}.")


def _timestamp(value: object) -> datetime:
    return _text_format(value, formats.timestamp_value, "INVALID_TIMESTAMP", formats.TIMESTAMP_SHAPE)


def _date(value: object) -> date:
    return _text_format(value, formats.date_value, "INVALID_DATE", formats.DATE_SHAPE)


def _decimal(value: object) -> Decimal:
    if value is None:
        raise _Invalid("INVALID_DECIMAL", 'is null; a day without a forecast is sent as "0".')
    return _text_format(value, formats.decimal_value, "INVALID_DECIMAL", formats.DECIMAL_SHAPE)


def _key(value: object) -> str:
    if type(value) is not str:
        raise _Invalid("INVALID_TYPE", f"must be a string, not {_json_type(value)}.")
    if (problem := formats.key_problem(value)) is not None:
        raise _Invalid("INVALID_TYPE", problem)
    return value


def _integer(value: object) -> int:
    if type(value) is not int:
        raise _Invalid("INVALID_TYPE", f"must be an integer, not {_shown(value)}.")
    return value


def _object(value: object) -> dict[str, Any]:
    if type(value) is not dict:
        raise _Invalid("INVALID_TYPE", f"must be an object, not {_json_type(value)}.")
    return value


def _checked(value: object, rule: Callable[[object], T], path: str, name: str, errors: _Errors,
             keys: dict[str, str] | None = None) -> T | None:
    try:
        return rule(value)
    except _Invalid as invalid:
        errors.add(path, invalid.code, f"{name} {invalid.problem}", keys)
        return None


def _field(obj: dict[str, Any], name: str, rule: Callable[[object], T], errors: _Errors, prefix: str = "",
           keys: dict[str, str] | None = None, required: bool = True) -> T | None:
    value = obj.get(name)
    if value is None:
        if required:
            errors.add(prefix + name, "MISSING_FIELD", f"{name} is required.", keys)
        return None
    return _checked(value, rule, prefix + name, name, errors, keys)


# --- envelope ----------------------------------------------------------------------------------------------

_ENVELOPE_FIELDS = frozenset({"generatedAt", "batchIndex", "batchTotal", "itemCount", "items", "ext"})


def _check_envelope(document: dict[str, Any], errors: _Errors) -> tuple[datetime | None, int | None,
                                                                         int | None, int | None]:
    generated_at = _field(document, "generatedAt", _timestamp, errors)
    batch_index = _field(document, "batchIndex", _integer, errors, required=False)
    batch_total = _field(document, "batchTotal", _integer, errors, required=False)
    item_count = _field(document, "itemCount", _integer, errors)
    items = _field(document, "items", _array, errors)
    _field(document, "ext", _object, errors, required=False)
    index_set, total_set = document.get("batchIndex") is not None, document.get("batchTotal") is not None
    if index_set != total_set:
        missing = "batchTotal" if index_set else "batchIndex"
        errors.add(missing, "BATCH_INDEX_SHAPE", f"batchIndex and batchTotal are set together; {missing} is missing.")
    elif batch_total is not None and not 1 <= batch_total <= formats.MAX_INTEGER:
        errors.add("batchTotal", "BATCH_INDEX_RANGE",
                   f"batchTotal must be within 1..{formats.MAX_INTEGER}, not {batch_total}.")
    elif batch_index is not None and batch_total is not None and not 1 <= batch_index <= batch_total:
        errors.add("batchIndex", "BATCH_INDEX_RANGE", f"batchIndex must be within 1..{batch_total}, not {batch_index}.")
    if item_count is not None and items is not None and item_count != len(items):
        errors.add("itemCount", "ITEM_COUNT_MISMATCH", f"itemCount is {item_count} but items has {len(items)}.")
    return generated_at, batch_index, batch_total, item_count


def _array(value: object) -> list[Any]:
    if type(value) is not list:
        raise _Invalid("INVALID_TYPE", f"must be an array, not {_json_type(value)}.")
    return value


_MAX_FIELD_NAME_SHOWN = 100


def _unknown_fields(document: dict[str, Any], items: list[dict[str, Any]], item_fields: frozenset[str]
                    ) -> list[dict[str, Any]]:
    found = Counter(name for name in document if name not in _ENVELOPE_FIELDS)
    if not set().union(*items) <= item_fields:  # one C-level pass; counting only when there is something
        found.update(f"items[].{name}" for item in items for name in item if name not in item_fields)
    warnings = []
    for name, count in islice(found.items(), MAX_WARNINGS_LISTED):
        field = name if len(name) <= _MAX_FIELD_NAME_SHOWN else name[:_MAX_FIELD_NAME_SHOWN] + "…"
        warnings.append({"code": "UNKNOWN_FIELD", "field": field, "count": count,
                         "message": f"Unknown field {field} was ignored ({count} time(s))."})
    if (unlisted := len(found) - MAX_WARNINGS_LISTED) > 0:
        warnings.append({"code": "WARNINGS_TRUNCATED", "field": None, "count": unlisted,
                         "message": f"{unlisted} more unknown field name(s) were ignored; only the first "
                                    f"{MAX_WARNINGS_LISTED} are listed."})
    return warnings


# --- exact path: every error with its path -------------------------------------------------------------------

_KEY_FIELDS = ("retailStoreNumber", "ecomStoreNumber", "skuNumber")


def _item_prefix(index: int, item: object, errors: _Errors) -> tuple[str, dict[str, str]] | None:
    if type(item) is not dict:
        errors.add(f"items[{index}]", "INVALID_TYPE", f"items[{index}] must be an object, not {_json_type(item)}.")
        return None
    keys = {name: item[name] for name in _KEY_FIELDS
            if type(item.get(name)) is str and len(item[name]) <= formats.MAX_KEY_LENGTH}
    return f"items[{index}].", keys


def _check_duplicate(key: tuple[str | None, ...], index: int, seen: dict[tuple[str | None, ...], int],
                     errors: _Errors, keys: dict[str, str]) -> None:
    first = seen.setdefault(key, index)
    if first != index:
        errors.add(f"items[{index}]", "DUPLICATE_KEY_IN_BATCH",
                   f"items[{index}] has the same store and SKU as items[{first}].", keys)


def _exact_forecasts(items: list[Any], today: date, errors: _Errors) -> None:
    oldest = today - timedelta(days=MAX_HORIZON_START_AGE_DAYS)
    seen: dict[tuple[str | None, ...], int] = {}
    for index, item in enumerate(items):
        if (located := _item_prefix(index, item, errors)) is None:
            continue
        prefix, keys = located
        retail = _field(item, "retailStoreNumber", _key, errors, prefix, keys, required=False)
        ecom = _field(item, "ecomStoreNumber", _key, errors, prefix, keys, required=False)
        store_keys_set = (item.get("retailStoreNumber") is not None) + (item.get("ecomStoreNumber") is not None)
        if store_keys_set != 1:
            errors.add(f"items[{index}]", "STORE_KEY_SHAPE",
                       "Exactly one of retailStoreNumber and ecomStoreNumber is set.", keys)
        sku = _field(item, "skuNumber", _key, errors, prefix, keys)
        start = _field(item, "horizonStartDate", _date, errors, prefix, keys)
        end = _field(item, "horizonEndDate", _date, errors, prefix, keys)
        days = _check_quantities(item, prefix, keys, errors)
        if start is not None and start < oldest:
            errors.add(prefix + "horizonStartDate", "HORIZON_START_TOO_OLD",
                       f"horizonStartDate {start} is before {oldest}, {MAX_HORIZON_START_AGE_DAYS} days ago.", keys)
        if start is not None and end is not None and days and (end - start).days != days - 1:
            errors.add(prefix + "horizonEndDate", "HORIZON_LENGTH_MISMATCH",
                       f"horizonEndDate {end} must be {days - 1} day(s) after horizonStartDate {start}, "
                       f"as there are {days} quantities.", keys)
        _field(item, "ext", _object, errors, prefix, keys, required=False)
        if sku is not None and (retail is not None or ecom is not None) and store_keys_set == 1:
            _check_duplicate((retail, ecom, sku), index, seen, errors, keys)


def _check_quantities(item: dict[str, Any], prefix: str, keys: dict[str, str], errors: _Errors) -> int:
    """Checks the quantities; returns their number (0 when absent or not an array)."""
    quantities = _field(item, "quantities", _array, errors, prefix, keys)
    if quantities is None:
        return 0
    path = prefix + "quantities"
    if not quantities:
        errors.add(path, "HORIZON_EMPTY", "quantities must have at least one day.", keys)
    elif len(quantities) > MAX_HORIZON_DAYS:
        errors.add(path, "HORIZON_TOO_LONG",
                   f"quantities has {len(quantities)} days, more than maxHorizonDays ({MAX_HORIZON_DAYS}).", keys)
    for day, quantity in enumerate(quantities):
        if type(quantity) is str and formats.DECIMAL.matches(quantity):
            continue
        if errors.full:  # only counted from here: a batch may hold over a million bad quantities
            errors.count += 1
        else:
            _checked(quantity, _decimal, f"{path}[{day}]", f"quantities[{day}]", errors, keys)
    return len(quantities)


def _exact_replenishment(items: list[Any], today: date, errors: _Errors) -> None:
    seen: dict[tuple[str | None, ...], int] = {}
    for index, item in enumerate(items):
        if (located := _item_prefix(index, item, errors)) is None:
            continue
        prefix, keys = located
        retail = _field(item, "retailStoreNumber", _key, errors, prefix, keys)
        if item.get("ecomStoreNumber") is not None:
            errors.add(prefix + "ecomStoreNumber", "STORE_KEY_SHAPE",
                       "Replenishment parameters are for retail stores only; ecomStoreNumber is not allowed.", keys)
        sku = _field(item, "skuNumber", _key, errors, prefix, keys)
        reorder_point = _field(item, "reorderPoint", _decimal, errors, prefix, keys)
        maximum = _field(item, "maximumInventory", _decimal, errors, prefix, keys)
        if reorder_point is not None and maximum is not None and reorder_point >= maximum:
            errors.add(prefix + "reorderPoint", "REORDER_POINT_NOT_BELOW_MAXIMUM",
                       f"reorderPoint {reorder_point} must be less than maximumInventory {maximum}.", keys)
        _field(item, "ext", _object, errors, prefix, keys, required=False)
        if retail is not None and sku is not None:
            _check_duplicate((retail, sku), index, seen, errors, keys)


# --- fast path: columns and vectorised rules; None means "let the exact path say what is wrong" ----------------

_DECIMALS_RE = f"^(?:{formats.DECIMAL.re2_core}\n)*{formats.DECIMAL.re2_core}$"
_FORECAST_FIELDS = ("retailStoreNumber", "ecomStoreNumber", "skuNumber", "horizonStartDate", "horizonEndDate",
                    "quantities")
_REPLENISHMENT_FIELDS = ("retailStoreNumber", "ecomStoreNumber", "skuNumber", "reorderPoint", "maximumInventory")
_POLARS_DECIMAL = pl.Decimal(DECIMAL.precision, DECIMAL.scale)


def _columns(items: list[Any], names: tuple[str, ...]) -> dict[str, list[Any]] | None:
    if not set(map(type, items)) <= {dict}:
        return None
    columns = {name: list(map(dict.get, items, repeat(name))) for name in (*names, "ext")}
    if not set(map(type, columns.pop("ext"))) <= {dict, type(None)}:
        return None
    return columns


def _keys(values: list[Any], required: bool) -> pa.Array | None:
    try:
        keys = pa.array(values, pa.string())
    except (pa.ArrowException, TypeError):  # a value that is not a string
        return None
    if required and keys.null_count:
        return None
    if not pc.all(pc.match_substring_regex(keys, formats.KEY.re2), min_count=0).as_py():  # nulls are skipped
        return None
    return keys


_FIRST_DAY = (date.min - date(1970, 1, 1)).days  # 0001-01-01 as date32: Arrow also takes year 0, Python does not


def _dates(values: list[Any]) -> pa.Array | None:
    try:
        text = pa.array(values, pa.string())
    except (pa.ArrowException, TypeError):
        return None
    if text.null_count or not pc.all(pc.match_substring_regex(text, formats.DATE.re2)).as_py():
        return None
    try:
        dates = text.cast(pa.date32())  # a real calendar day
    except pa.ArrowException:
        return None
    return dates if pc.min(dates.cast(pa.int32())).as_py() >= _FIRST_DAY else None


def _decimals(joined: str, count: int) -> pa.Array | None:
    """`count` newline-separated decimal strings → exact decimal128 values; one RE2 match checks them all.

    Joining the strings in Python and parsing the text once in native code is several times cheaper than
    converting each string object. Once the text is known to be plain decimal lines (no quote, no comma), Polars'
    CSV reader parses it straight to decimals, faster and steadier under load than split-and-cast."""
    if count == 0:
        return pa.array([], DECIMAL)
    if not pc.match_substring_regex(pa.array([joined]), _DECIMALS_RE)[0].as_py():
        return None
    values = pl.read_csv(joined.encode(), has_header=False, schema={"value": _POLARS_DECIMAL}).to_series()
    if len(values) != count:  # a value held a newline of its own
        return None
    return values.to_arrow()


def _unique(*keys: pa.Array) -> bool:
    return pl.DataFrame([pl.from_arrow(key) for key in keys]).n_unique() == len(keys[0])


def _table(schema: pa.Schema, *columns: pa.Array) -> pa.Table:
    item_index = pl.int_range(len(columns[0]), dtype=pl.Int32, eager=True).to_arrow()
    return pa.Table.from_arrays([item_index, *columns], schema=schema)


def _fast_forecasts(items: list[Any], today: date) -> pa.Table | None:
    columns = _columns(items, _FORECAST_FIELDS)
    if columns is None:
        return None
    quantities = columns["quantities"]
    if set(map(type, quantities)) != {list}:
        return None
    days = pa.array(list(map(len, quantities)), pa.int32())
    if pc.min(days).as_py() < 1 or pc.max(days).as_py() > MAX_HORIZON_DAYS:
        return None
    retail, ecom = _keys(columns["retailStoreNumber"], False), _keys(columns["ecomStoreNumber"], False)
    sku = _keys(columns["skuNumber"], True)
    start, end = _dates(columns["horizonStartDate"]), _dates(columns["horizonEndDate"])
    if retail is None or ecom is None or sku is None or start is None or end is None:
        return None
    try:
        joined = "\n".join(map("\n".join, quantities))
    except TypeError:  # a quantity that is not a string
        return None
    offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(days)])
    values = _decimals(joined, offsets[-1].as_py())
    if values is None:
        return None
    start_days, end_days = start.cast(pa.int32()), end.cast(pa.int32())
    oldest = (today - timedelta(days=MAX_HORIZON_START_AGE_DAYS) - date(1970, 1, 1)).days
    horizon_fits = pc.equal(pc.subtract(end_days, start_days), pc.subtract(days, 1))
    if not (pc.all(pc.xor(pc.is_valid(retail), pc.is_valid(ecom))).as_py() and pc.all(horizon_fits).as_py()
            and pc.min(start_days).as_py() >= oldest and _unique(retail, ecom, sku)):
        return None
    return _table(FORECAST_ITEMS_SCHEMA, retail, ecom, sku, start, end, pa.ListArray.from_arrays(offsets, values))


def _fast_replenishment(items: list[Any], today: date) -> pa.Table | None:
    columns = _columns(items, _REPLENISHMENT_FIELDS)
    if columns is None or not set(map(type, columns["ecomStoreNumber"])) <= {type(None)}:
        return None
    retail, sku = _keys(columns["retailStoreNumber"], True), _keys(columns["skuNumber"], True)
    try:
        reorder_point = _decimals("\n".join(columns["reorderPoint"]), len(items))
        maximum = _decimals("\n".join(columns["maximumInventory"]), len(items))
    except TypeError:
        return None
    if retail is None or sku is None or reorder_point is None or maximum is None:
        return None
    if not (pc.all(pc.less(reorder_point, maximum)).as_py() and _unique(retail, sku)):
        return None
    return _table(REPLENISHMENT_ITEMS_SCHEMA, retail, sku, reorder_point, maximum)


@dataclass(frozen=True)
class _Rules:
    schema: pa.Schema
    item_fields: frozenset[str]
    fast: Callable[[list[Any], date], pa.Table | None]
    exact: Callable[[list[Any], date, _Errors], None]


_RULES = {
    SALES_FORECAST: _Rules(FORECAST_ITEMS_SCHEMA, frozenset({*_FORECAST_FIELDS, "ext"}),
                           _fast_forecasts, _exact_forecasts),
    REPLENISHMENT_PARAMETER: _Rules(REPLENISHMENT_ITEMS_SCHEMA, frozenset({*_REPLENISHMENT_FIELDS, "ext"}),
                                    _fast_replenishment, _exact_replenishment),
}
