"""ingest: upload body → decompressed JSON → checked batch, with every refusal the contract names."""

import gzip
import os
import tracemalloc
import zlib
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import orjson
import pytest

from benchmarks.ingest_upload import TODAY as BENCH_TODAY
from benchmarks.ingest_upload import forecast_batch
from contracts.batch_kinds import REPLENISHMENT_PARAMETER, SALES_FORECAST
from contracts.errors import ApiError, BadRequest, LimitExceeded, UnsupportedMediaType, ValidationFailed
from contracts.limits import (
    MAX_DECOMPRESSED_BYTES,
    MAX_HORIZON_DAYS,
    MAX_ITEMS_PER_BATCH,
    MAX_REQUEST_BYTES,
    MAX_VALIDATION_ERRORS_LISTED,
    MAX_WARNINGS_LISTED,
)
from ingest import envelope
from ingest.body import decompress_body
from ingest.envelope import FORECAST_ITEMS_SCHEMA, REPLENISHMENT_ITEMS_SCHEMA, check_batch

TODAY = date(2026, 11, 21)
JSON = "application/json"
ABSENT = object()  # a field value meaning "leave the field out"


def forecast_item(index: int, days: int = 3, start: date = TODAY) -> dict[str, Any]:
    return {"retailStoreNumber": f"{100 + index}", "skuNumber": f"{4000000 + index}",
            "horizonStartDate": start.isoformat(), "horizonEndDate": (start + timedelta(days=days - 1)).isoformat(),
            "quantities": ["1.5"] * days}


def replenishment_item(index: int) -> dict[str, Any]:
    return {"retailStoreNumber": f"{100 + index}", "skuNumber": f"{4000000 + index}", "reorderPoint": "2",
            "maximumInventory": "10.5"}


ITEM_FACTORIES = {SALES_FORECAST: forecast_item, REPLENISHMENT_PARAMETER: replenishment_item}


def changed(obj: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    obj = {**obj, **changes}
    return {name: value for name, value in obj.items() if value is not ABSENT}


def document(kind: str = SALES_FORECAST, items: list[Any] | None = None, **fields: Any) -> dict[str, Any]:
    items = [ITEM_FACTORIES[kind](index) for index in range(3)] if items is None else items
    count = len(items) if type(items) is list else 3
    return changed({"generatedAt": "2026-11-21T02:00:00Z", "batchIndex": 1, "batchTotal": 2, "itemCount": count,
                    "items": items}, fields)


def check(doc: dict[str, Any], kind: str = SALES_FORECAST) -> envelope.CheckedBatch:
    return check_batch(kind, orjson.dumps(doc), TODAY)


def refusal(doc: dict[str, Any], kind: str = SALES_FORECAST) -> ValidationFailed:
    with pytest.raises(ValidationFailed) as raised:
        check(doc, kind)
    return raised.value


def listed(doc: dict[str, Any], kind: str = SALES_FORECAST) -> list[dict[str, Any]]:
    """The listed errors without their (free-text) messages, which must be there."""
    errors = refusal(doc, kind).details["errors"]
    assert all(error["message"] for error in errors)
    return [{name: value for name, value in error.items() if name != "message"} for error in errors]


def limit_details(raised: pytest.ExceptionInfo[ApiError]) -> dict[str, Any]:
    assert raised.value.status == 413 and raised.value.code == "LIMIT_EXCEEDED"
    return raised.value.details


# --- body: media type, sizes, gzip ------------------------------------------------------------------------


@pytest.mark.parametrize(("content_type", "content_encoding"), [
    (None, None), ("text/plain", None), ("application/jsonx", None), ("application/json; charset=latin-1", None),
    (JSON, "br"), (JSON, "deflate"), (JSON, "gzip, br"),
])
def test_only_utf8_json_sent_as_is_or_gzipped_is_taken(content_type: str | None, content_encoding: str | None) -> None:
    with pytest.raises(UnsupportedMediaType) as raised:
        decompress_body(b"{}", content_type, content_encoding)
    assert raised.value.status == 415 and raised.value.code == "UNSUPPORTED_MEDIA_TYPE"


@pytest.mark.parametrize(("content_type", "content_encoding"), [
    (JSON, None), ("Application/JSON; charset=UTF-8", "identity"), ('application/json;charset="utf-8"', ""),
])
def test_json_bodies_pass_through(content_type: str, content_encoding: str | None) -> None:
    assert decompress_body(b'{"a":1}', content_type, content_encoding) == b'{"a":1}'


@pytest.mark.parametrize("coding", ["gzip", "GZIP", "x-gzip"])
def test_gzip_is_inflated(coding: str) -> None:
    raw = orjson.dumps(document())
    assert decompress_body(gzip.compress(raw), JSON, coding) == raw


def test_concatenated_gzip_members_are_one_body() -> None:
    assert decompress_body(gzip.compress(b'{"a":') + gzip.compress(b"1}"), JSON, "gzip") == b'{"a":1}'


@pytest.mark.parametrize("body", [b"", b"not gzip at all", gzip.compress(b'{"a":1}')[:-12],
                                  gzip.compress(b'{"a":1}') + b"trailing"],
                         ids=["empty", "not gzip", "truncated", "trailing bytes"])  # stable ids for pytest-xdist
def test_broken_gzip_is_400(body: bytes) -> None:
    with pytest.raises(BadRequest):
        decompress_body(body, JSON, "gzip")


def test_body_over_max_request_bytes_is_413() -> None:
    with pytest.raises(LimitExceeded) as raised:
        decompress_body(b" " * (MAX_REQUEST_BYTES + 1), JSON, None)
    assert limit_details(raised) == {"limit": "maxRequestBytes", "max": MAX_REQUEST_BYTES,
                                     "received": MAX_REQUEST_BYTES + 1}


def zeros_gzip(mebibytes: int, prefix: bytes = b"") -> bytes:
    """A gzip stream of `prefix` then zeros, without compressing them all: after a full flush each further MiB
    of zeros compresses to the same bytes. No trailer: every test stops it before the end."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    head = compressor.compress(prefix + zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    block = compressor.compress(zeros) + compressor.flush(zlib.Z_FULL_FLUSH)
    return head + block * (mebibytes - 1)


def test_gzip_past_max_decompressed_bytes_is_413() -> None:
    # Random bytes keep the ratio under 100, so the size limit is the one tripped.
    body = zeros_gzip(60, prefix=os.urandom(600_000))
    with pytest.raises(LimitExceeded) as raised:
        decompress_body(body, JSON, "gzip")
    assert limit_details(raised) == {"limit": "maxDecompressedBytes", "max": MAX_DECOMPRESSED_BYTES,
                                     "received": MAX_DECOMPRESSED_BYTES + 1}


def test_gzip_past_the_compression_ratio_is_413() -> None:
    body = zeros_gzip(20)
    with pytest.raises(LimitExceeded) as raised:
        decompress_body(body, JSON, "gzip")
    assert limit_details(raised) == {"limit": "maxCompressionRatio", "max": 100, "received": 101}


def test_gzip_bomb_is_stopped_without_inflating_it() -> None:
    body = zeros_gzip(9_000)  # about 9 MB that would inflate to 9 GiB
    assert len(body) <= MAX_REQUEST_BYTES
    tracemalloc.start()
    try:
        with pytest.raises(LimitExceeded) as raised:
            decompress_body(body, JSON, "gzip")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert limit_details(raised)["limit"] == "maxDecompressedBytes"
    assert peak < MAX_DECOMPRESSED_BYTES + 4 * (1 << 20), peak  # the allowance and a chunk, not 9 GiB


# --- parse and items per batch ----------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "where"), [(b'{"items": [1,', "line 1"), (b"", "line 1"), (b"[1, 2]", "an array"),
                                            (b'"text"', "a string"), (b'{"a": NaN}', "line 1")])
def test_unparsable_or_non_object_body_is_400_bad_request(raw: bytes, where: str) -> None:
    with pytest.raises(BadRequest) as raised:
        check_batch(SALES_FORECAST, raw, TODAY)
    assert raised.value.code == "BAD_REQUEST" and where in raised.value.message


def test_more_items_than_max_items_per_batch_is_413_before_any_field_check() -> None:
    doc = document(items=[{"bad": True}] * (MAX_ITEMS_PER_BATCH + 1), generatedAt="yesterday", itemCount=1)
    with pytest.raises(LimitExceeded) as raised:
        check(doc)
    assert limit_details(raised) == {"limit": "maxItemsPerBatch", "max": MAX_ITEMS_PER_BATCH,
                                     "received": MAX_ITEMS_PER_BATCH + 1}


def test_refusals_come_in_the_documented_order() -> None:
    """415, then 413 body size, 413 decompression, 400 parse, 413 items, 400 validation."""
    too_many = orjson.dumps(document(items=[{}] * (MAX_ITEMS_PER_BATCH + 1), generatedAt=5))

    def outcome(body: bytes, content_type: str, coding: str | None) -> str:
        try:
            check_batch(SALES_FORECAST, decompress_body(body, content_type, coding), TODAY)
        except ApiError as error:
            return f"{error.status} {(error.details or {}).get('limit', error.code)}"
        return "accepted"

    oversized = b"{" * (MAX_REQUEST_BYTES + 1)
    assert outcome(oversized, "text/plain", None) == "415 UNSUPPORTED_MEDIA_TYPE"
    assert outcome(oversized, JSON, None) == "413 maxRequestBytes"
    assert outcome(zeros_gzip(60), JSON, "gzip") == "413 maxCompressionRatio"
    assert outcome(too_many[:-1], JSON, None) == "400 BAD_REQUEST"
    assert outcome(too_many, JSON, None) == "413 maxItemsPerBatch"
    assert outcome(orjson.dumps(document(generatedAt=5)), JSON, None) == "400 VALIDATION_ERROR"


# --- a valid batch ----------------------------------------------------------------------------------------


def test_valid_forecast_batch_becomes_the_documented_columns() -> None:
    items = [forecast_item(0), forecast_item(1, days=MAX_HORIZON_DAYS, start=TODAY - timedelta(days=7)),
             changed(forecast_item(2, days=1), {"retailStoreNumber": ABSENT, "ecomStoreNumber": "100",
                                                "ext": {"anything": [1, {"x": None}]}})]
    items[0]["quantities"] = ["0.0001", "12345678901234.5678", "0"]
    batch = check(document(items=items, batchIndex=2, batchTotal=2, ext={"run": "nightly"}))
    assert (batch.kind, batch.batch_index, batch.batch_total, batch.item_count, batch.warnings) == (
        SALES_FORECAST, 2, 2, 3, [])
    assert batch.generated_at.isoformat() == "2026-11-21T02:00:00+00:00"
    assert batch.items.schema == FORECAST_ITEMS_SCHEMA
    rows = batch.items.to_pylist()
    assert rows[0] == {"item_index": 0, "retail_store_number": "100", "ecom_store_number": None,
                       "sku_number": "4000000", "horizon_start_date": TODAY,
                       "horizon_end_date": TODAY + timedelta(days=2),
                       "quantities": [Decimal("0.0001"), Decimal("12345678901234.5678"), Decimal("0")]}
    assert str(rows[0]["quantities"][1]) == "12345678901234.5678"
    assert len(rows[1]["quantities"]) == MAX_HORIZON_DAYS
    assert (rows[2]["retail_store_number"], rows[2]["ecom_store_number"], rows[2]["item_index"]) == (None, "100", 2)


def test_valid_replenishment_batch_becomes_the_documented_columns() -> None:
    items = [replenishment_item(0), changed(replenishment_item(1), {"reorderPoint": "0", "ecomStoreNumber": None,
                                                                     "maximumInventory": "12345678901234.5678"})]
    batch = check(document(REPLENISHMENT_PARAMETER, items, batchIndex=ABSENT, batchTotal=ABSENT,
                           generatedAt="2026-11-21T03:00:00.5+01:00"), REPLENISHMENT_PARAMETER)
    assert (batch.batch_index, batch.batch_total, batch.generated_at.utcoffset()) == (None, None, timedelta(hours=1))
    assert batch.items.schema == REPLENISHMENT_ITEMS_SCHEMA
    assert batch.items.to_pylist() == [
        {"item_index": 0, "retail_store_number": "100", "sku_number": "4000000", "reorder_point": Decimal("2"),
         "maximum_inventory": Decimal("10.5")},
        {"item_index": 1, "retail_store_number": "101", "sku_number": "4000001", "reorder_point": Decimal("0"),
         "maximum_inventory": Decimal("12345678901234.5678")}]


@pytest.mark.parametrize("kind", [SALES_FORECAST, REPLENISHMENT_PARAMETER])
def test_empty_batch_is_valid(kind: str) -> None:
    batch = check(document(kind, items=[]), kind)
    assert batch.items.num_rows == 0 and batch.item_count == 0


def test_same_number_as_retail_and_as_ecom_store_is_not_a_duplicate() -> None:
    items = [forecast_item(0), changed(forecast_item(0), {"retailStoreNumber": ABSENT, "ecomStoreNumber": "100"})]
    assert check(document(items=items)).items.num_rows == 2


# --- every code where its condition holds -----------------------------------------------------------------

FORECAST_KEYS = {"retailStoreNumber": "101", "skuNumber": "4000001"}
ECOM = {"retailStoreNumber": ABSENT, "ecomStoreNumber": "W1"}
OLD = TODAY - timedelta(days=8)
ENVELOPE_CASES = [
    ({"generatedAt": ABSENT}, "generatedAt", "MISSING_FIELD"),
    ({"generatedAt": None}, "generatedAt", "MISSING_FIELD"),
    ({"generatedAt": "2026-11-21T02:00:00"}, "generatedAt", "INVALID_TIMESTAMP"),
    ({"generatedAt": "2026-11-21"}, "generatedAt", "INVALID_TIMESTAMP"),
    ({"generatedAt": "2026-11-21 02:00:00Z"}, "generatedAt", "INVALID_TIMESTAMP"),
    ({"generatedAt": "2026-11-21T25:00:00Z"}, "generatedAt", "INVALID_TIMESTAMP"),
    ({"generatedAt": 1763690400}, "generatedAt", "INVALID_TIMESTAMP"),
    ({"generatedAt": True}, "generatedAt", "INVALID_TYPE"),
    ({"generatedAt": "0001-01-01T00:00:00+01:00"}, "generatedAt", "INVALID_TIMESTAMP"),  # year 0 in UTC
    ({"generatedAt": "9999-12-31T23:59:59-01:00"}, "generatedAt", "INVALID_TIMESTAMP"),  # year 10000 in UTC
    ({"generatedAt": "2026-11-21T02:00:00+24:00"}, "generatedAt", "INVALID_TIMESTAMP"),
    ({"itemCount": ABSENT}, "itemCount", "MISSING_FIELD"),
    ({"itemCount": "3"}, "itemCount", "INVALID_TYPE"),
    ({"itemCount": 3.0}, "itemCount", "INVALID_TYPE"),
    ({"itemCount": 4}, "itemCount", "ITEM_COUNT_MISMATCH"),
    ({"batchTotal": ABSENT}, "batchTotal", "BATCH_INDEX_SHAPE"),
    ({"batchIndex": None}, "batchIndex", "BATCH_INDEX_SHAPE"),
    ({"batchIndex": 0}, "batchIndex", "BATCH_INDEX_RANGE"),
    ({"batchIndex": 3}, "batchIndex", "BATCH_INDEX_RANGE"),
    ({"batchIndex": 1, "batchTotal": 0}, "batchTotal", "BATCH_INDEX_RANGE"),
    ({"batchIndex": 1, "batchTotal": 2**31}, "batchTotal", "BATCH_INDEX_RANGE"),
    ({"batchIndex": 2**63, "batchTotal": 2**64 - 1}, "batchTotal", "BATCH_INDEX_RANGE"),
    ({"batchIndex": 2**31, "batchTotal": 2**31 - 1}, "batchIndex", "BATCH_INDEX_RANGE"),
    ({"itemCount": 2**63}, "itemCount", "ITEM_COUNT_MISMATCH"),
    ({"batchIndex": "1"}, "batchIndex", "INVALID_TYPE"),
    ({"batchTotal": True}, "batchTotal", "INVALID_TYPE"),
    ({"items": ABSENT}, "items", "MISSING_FIELD"),
    ({"items": {"0": {}}}, "items", "INVALID_TYPE"),
    ({"ext": "note"}, "ext", "INVALID_TYPE"),
]


@pytest.mark.parametrize(("fields", "path", "code"), ENVELOPE_CASES)
def test_envelope_error_codes(fields: dict[str, Any], path: str, code: str) -> None:
    assert listed(document(**fields)) == [{"path": path, "code": code}]


def test_an_integer_beyond_64_bits_is_invalid_type() -> None:
    raw = orjson.dumps(document()).replace(b'"batchIndex":1', b'"batchIndex":18446744073709551616')
    with pytest.raises(ValidationFailed) as raised:
        check_batch(SALES_FORECAST, raw, TODAY)
    assert [(e["path"], e["code"]) for e in raised.value.details["errors"]] == [("batchIndex", "INVALID_TYPE")]


@pytest.mark.parametrize("fields", [
    {"generatedAt": "0001-01-01T00:00:00Z"}, {"generatedAt": "0001-01-01T01:00:00+01:00"},
    {"generatedAt": "9999-12-31T23:59:59.999999Z"}, {"generatedAt": "9999-12-31T22:59:59-01:00"},
    {"batchIndex": 2**31 - 1, "batchTotal": 2**31 - 1},
])
def test_envelope_values_at_the_edge_of_the_range_are_taken(fields: dict[str, Any]) -> None:
    assert check(document(**fields)).item_count == 3


def test_keys_may_hold_inner_spaces_and_any_printable_character_and_decimals_leading_zeros() -> None:
    keys = ["1", "a b", "Ålesund 7", "店-١٢", "x" * 64, "😀"]
    items = [changed(forecast_item(index), {"skuNumber": key}) for index, key in enumerate(keys)]
    items[0]["quantities"] = ["007.5", "00000000000000.0000", "0"]
    batch = check(document(items=items))
    assert batch.items.column("sku_number").to_pylist() == keys
    assert batch.items.column("quantities")[0].as_py() == [Decimal("7.5"), Decimal(0), Decimal(0)]


FORECAST_ITEM_CASES = [
    ({"retailStoreNumber": ABSENT}, "items[1]", "STORE_KEY_SHAPE", {"skuNumber": "4000001"}),
    ({"ecomStoreNumber": "W1"}, "items[1]", "STORE_KEY_SHAPE", {**FORECAST_KEYS, "ecomStoreNumber": "W1"}),
    ({"retailStoreNumber": ""}, "items[1].retailStoreNumber", "INVALID_TYPE",
     {**FORECAST_KEYS, "retailStoreNumber": ""}),
    ({"retailStoreNumber": 101}, "items[1].retailStoreNumber", "INVALID_TYPE", {"skuNumber": "4000001"}),
    ({**ECOM, "ecomStoreNumber": ["W1"]}, "items[1].ecomStoreNumber", "INVALID_TYPE", {"skuNumber": "4000001"}),
    ({"skuNumber": ABSENT}, "items[1].skuNumber", "MISSING_FIELD", {"retailStoreNumber": "101"}),
    ({"skuNumber": "9" * 65}, "items[1].skuNumber", "INVALID_TYPE", {"retailStoreNumber": "101"}),
    ({"skuNumber": "4000\u00001"}, "items[1].skuNumber", "INVALID_TYPE", {**FORECAST_KEYS, "skuNumber": "4000\u00001"}),
    ({"skuNumber": "4000001\n"}, "items[1].skuNumber", "INVALID_TYPE", {**FORECAST_KEYS, "skuNumber": "4000001\n"}),
    ({"retailStoreNumber": " 101"}, "items[1].retailStoreNumber", "INVALID_TYPE",
     {**FORECAST_KEYS, "retailStoreNumber": " 101"}),
    ({"retailStoreNumber": "101\u3000"}, "items[1].retailStoreNumber", "INVALID_TYPE",
     {**FORECAST_KEYS, "retailStoreNumber": "101\u3000"}),
    ({"horizonStartDate": "2026-02-30"}, "items[1].horizonStartDate", "INVALID_DATE", FORECAST_KEYS),
    ({"horizonStartDate": "21.11.2026"}, "items[1].horizonStartDate", "INVALID_DATE", FORECAST_KEYS),
    ({"horizonStartDate": "2026-11-21T00:00:00Z"}, "items[1].horizonStartDate", "INVALID_DATE", FORECAST_KEYS),
    ({"horizonStartDate": 20261121}, "items[1].horizonStartDate", "INVALID_DATE", FORECAST_KEYS),
    ({"horizonEndDate": {}}, "items[1].horizonEndDate", "INVALID_TYPE", FORECAST_KEYS),
    ({"horizonEndDate": None}, "items[1].horizonEndDate", "MISSING_FIELD", FORECAST_KEYS),
    ({"horizonStartDate": OLD.isoformat(), "horizonEndDate": (OLD + timedelta(days=2)).isoformat()},
     "items[1].horizonStartDate", "HORIZON_START_TOO_OLD", FORECAST_KEYS),
    ({"horizonEndDate": "2026-11-24"}, "items[1].horizonEndDate", "HORIZON_LENGTH_MISMATCH", FORECAST_KEYS),
    ({"quantities": ["1", "2"]}, "items[1].horizonEndDate", "HORIZON_LENGTH_MISMATCH", FORECAST_KEYS),
    ({"quantities": []}, "items[1].quantities", "HORIZON_EMPTY", FORECAST_KEYS),
    ({"quantities": ["1"] * (MAX_HORIZON_DAYS + 1),
      "horizonEndDate": (TODAY + timedelta(days=MAX_HORIZON_DAYS)).isoformat()},
     "items[1].quantities", "HORIZON_TOO_LONG", FORECAST_KEYS),
    ({"quantities": ABSENT}, "items[1].quantities", "MISSING_FIELD", FORECAST_KEYS),
    ({"quantities": "1.5"}, "items[1].quantities", "INVALID_TYPE", FORECAST_KEYS),
    ({"ext": "mine"}, "items[1].ext", "INVALID_TYPE", FORECAST_KEYS),
    ({"ext": []}, "items[1].ext", "INVALID_TYPE", FORECAST_KEYS),
]


@pytest.mark.parametrize(("fields", "path", "code", "keys"), FORECAST_ITEM_CASES)
def test_forecast_item_error_codes(fields: dict[str, Any], path: str, code: str, keys: dict[str, str]) -> None:
    items = [forecast_item(index) for index in range(3)]
    items[1] = changed(items[1], fields)
    assert listed(document(items=items)) == [{"path": path, "code": code, **keys}]


@pytest.mark.parametrize(("quantity", "code"), [
    ("-1", "INVALID_DECIMAL"), ("1e3", "INVALID_DECIMAL"), ("1.23456", "INVALID_DECIMAL"),
    (" 1", "INVALID_DECIMAL"), ("", "INVALID_DECIMAL"), ("NaN", "INVALID_DECIMAL"), ("1.", "INVALID_DECIMAL"),
    (".5", "INVALID_DECIMAL"), ("+1", "INVALID_DECIMAL"), ("1,5", "INVALID_DECIMAL"), ("١", "INVALID_DECIMAL"),
    ("123456789012345", "INVALID_DECIMAL"), ("1\n2", "INVALID_DECIMAL"), (1.5, "INVALID_DECIMAL"),
    (2, "INVALID_DECIMAL"), (None, "INVALID_DECIMAL"), (True, "INVALID_TYPE"), (["1"], "INVALID_TYPE"),
    ({"value": "1"}, "INVALID_TYPE"),
])
def test_each_bad_quantity_is_reported_at_its_day(quantity: Any, code: str) -> None:
    items = [forecast_item(index) for index in range(3)]
    items[1]["quantities"][2] = quantity
    assert listed(document(items=items)) == [{"path": "items[1].quantities[2]", "code": code, **FORECAST_KEYS}]


def test_a_horizon_may_start_seven_days_ago() -> None:
    assert check(document(items=[forecast_item(0, start=TODAY - timedelta(days=7))])).item_count == 1


def test_a_horizon_that_would_end_after_the_last_calendar_day_is_a_mismatch_not_a_crash() -> None:
    item = changed(forecast_item(1), {"horizonStartDate": "9999-12-31", "horizonEndDate": "9999-12-31"})
    assert listed(document(items=[forecast_item(0), item])) == [
        {"path": "items[1].horizonEndDate", "code": "HORIZON_LENGTH_MISMATCH", **FORECAST_KEYS}]


@pytest.mark.parametrize("item", [5, None, "item", ["a"]])
def test_an_item_that_is_not_an_object_is_invalid_type(item: Any) -> None:
    items = [forecast_item(0), item]
    assert listed(document(items=items)) == [{"path": "items[1]", "code": "INVALID_TYPE"}]


def test_duplicates_are_reported_on_each_later_item_naming_the_first() -> None:
    items = [forecast_item(index) for index in range(3)] + [forecast_item(1), forecast_item(1)]
    errors = refusal(document(items=items)).details["errors"]
    assert [(error["path"], error["code"]) for error in errors] == [("items[3]", "DUPLICATE_KEY_IN_BATCH"),
                                                                    ("items[4]", "DUPLICATE_KEY_IN_BATCH")]
    assert all("items[1]" in error["message"] and error["skuNumber"] == "4000001" for error in errors)


REPLENISHMENT_KEYS = {"retailStoreNumber": "101", "skuNumber": "4000001"}
REPLENISHMENT_CASES = [
    ({"ecomStoreNumber": "W1"}, "items[1].ecomStoreNumber", "STORE_KEY_SHAPE",
     {**REPLENISHMENT_KEYS, "ecomStoreNumber": "W1"}),
    ({"retailStoreNumber": ABSENT}, "items[1].retailStoreNumber", "MISSING_FIELD", {"skuNumber": "4000001"}),
    ({"skuNumber": ""}, "items[1].skuNumber", "INVALID_TYPE", {**REPLENISHMENT_KEYS, "skuNumber": ""}),
    ({"reorderPoint": "10.5"}, "items[1].reorderPoint", "REORDER_POINT_NOT_BELOW_MAXIMUM", REPLENISHMENT_KEYS),
    ({"reorderPoint": "11"}, "items[1].reorderPoint", "REORDER_POINT_NOT_BELOW_MAXIMUM", REPLENISHMENT_KEYS),
    ({"reorderPoint": 2}, "items[1].reorderPoint", "INVALID_DECIMAL", REPLENISHMENT_KEYS),
    ({"reorderPoint": "2.00001"}, "items[1].reorderPoint", "INVALID_DECIMAL", REPLENISHMENT_KEYS),
    ({"maximumInventory": ABSENT}, "items[1].maximumInventory", "MISSING_FIELD", REPLENISHMENT_KEYS),
    ({"maximumInventory": False}, "items[1].maximumInventory", "INVALID_TYPE", REPLENISHMENT_KEYS),
    ({"ext": 1}, "items[1].ext", "INVALID_TYPE", REPLENISHMENT_KEYS),
    ({"retailStoreNumber": "100", "skuNumber": "4000000"}, "items[1]", "DUPLICATE_KEY_IN_BATCH",
     {"retailStoreNumber": "100", "skuNumber": "4000000"}),
]


@pytest.mark.parametrize(("fields", "path", "code", "keys"), REPLENISHMENT_CASES)
def test_replenishment_item_error_codes(fields: dict[str, Any], path: str, code: str, keys: dict[str, str]) -> None:
    items = [replenishment_item(index) for index in range(3)]
    items[1] = changed(items[1], fields)
    assert listed(document(REPLENISHMENT_PARAMETER, items), REPLENISHMENT_PARAMETER) == [
        {"path": path, "code": code, **keys}]


# --- all errors at once, the cap, warnings ----------------------------------------------------------------


def test_every_error_is_listed_in_one_response() -> None:
    items = [forecast_item(index) for index in range(4)]
    items[0] = changed(items[0], {"skuNumber": 7, "quantities": ["1", "x", "2"]})
    items[2] = changed(items[2], {"ecomStoreNumber": "W2", "horizonStartDate": "soon"})
    failed = refusal(document(items=items, generatedAt="now", batchIndex=ABSENT))
    assert failed.message == "6 validation error(s); nothing was stored."
    assert [(error["path"], error["code"]) for error in failed.details["errors"]] == [
        ("generatedAt", "INVALID_TIMESTAMP"), ("batchIndex", "BATCH_INDEX_SHAPE"),
        ("items[0].skuNumber", "INVALID_TYPE"), ("items[0].quantities[1]", "INVALID_DECIMAL"),
        ("items[2]", "STORE_KEY_SHAPE"), ("items[2].horizonStartDate", "INVALID_DATE")]
    assert failed.details["errorsTruncated"] is False


def test_errors_past_the_listed_maximum_are_counted_not_listed() -> None:
    items = [forecast_item(index, days=30) for index in range(50)]
    for item in items:
        item["quantities"] = ["x"] * 30
    failed = refusal(document(items=items))
    assert failed.message == "1500 validation error(s); nothing was stored."
    assert len(failed.details["errors"]) == MAX_VALIDATION_ERRORS_LISTED
    assert failed.details["errorsTruncated"] is True
    assert failed.details["errors"][-1]["path"] == "items[33].quantities[9]"


def test_unknown_field_warnings_are_capped_and_long_names_cut() -> None:
    items = [{**forecast_item(index), **{f"extra{index}-{n}": 1 for n in range(3)}} for index in range(60)]
    batch = check(document(items=items, **{"x" * 500: 1}))
    assert len(batch.warnings) == MAX_WARNINGS_LISTED + 1
    assert batch.warnings[0]["field"] == "x" * 100 + "…"
    assert all(warning["code"] == "UNKNOWN_FIELD" for warning in batch.warnings[:-1])
    assert batch.warnings[-1] == {
        "code": "WARNINGS_TRUNCATED", "field": None, "count": 1 + 180 - MAX_WARNINGS_LISTED,
        "message": f"{1 + 180 - MAX_WARNINGS_LISTED} more unknown field name(s) were ignored; only the first "
                   f"{MAX_WARNINGS_LISTED} are listed."}


def test_unknown_fields_are_warnings_counted_once_per_name() -> None:
    items = [forecast_item(index) for index in range(4)]
    for item in items[:3]:
        item["colour"] = "red"
    items[3]["note"] = None
    items[0]["ext"] = {"notAField": 1}
    batch = check(document(items=items, source="planner", ext={"alsoNot": 1}))
    assert sorted(batch.warnings, key=lambda warning: warning["field"]) == [
        {"code": "UNKNOWN_FIELD", "field": "items[].colour", "count": 3,
         "message": "Unknown field items[].colour was ignored (3 time(s))."},
        {"code": "UNKNOWN_FIELD", "field": "items[].note", "count": 1,
         "message": "Unknown field items[].note was ignored (1 time(s))."},
        {"code": "UNKNOWN_FIELD", "field": "source", "count": 1,
         "message": "Unknown field source was ignored (1 time(s))."}]


# --- the fast path (the agreement of both paths is a Hypothesis property in test_ingest_properties.py) -------


@pytest.mark.parametrize("kind", [SALES_FORECAST, REPLENISHMENT_PARAMETER])
def test_a_valid_batch_takes_the_fast_path(kind: str) -> None:
    items = [ITEM_FACTORIES[kind](index) for index in range(100)]
    assert envelope._RULES[kind].fast(items, TODAY) is not None


def test_the_benchmark_batch_is_valid_and_takes_the_fast_path() -> None:
    raw = forecast_batch(items=200)
    assert envelope._fast_forecasts(orjson.loads(raw)["items"], BENCH_TODAY) is not None
    assert check_batch(SALES_FORECAST, raw, BENCH_TODAY).items.num_rows == 200
