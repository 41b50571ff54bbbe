"""`pia upload`: the file checked before anything is sent, deterministic batches, a kill -9 and a rerun, a server
answering 429 and 503 at random, and --wait with the rejected items by row number."""

import gzip
import io
import os
import signal
import subprocess
import sys
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from rich.console import Console

from contracts.batch_kinds import REPLENISHMENT_PARAMETER, SALES_FORECAST
from contracts.limits import published_limits
from db.schema import batches
from pia_client.api import PiaClient
from pia_client.cli import Report, upload, upload_file
from pia_client.retries import RetryPolicy
from pia_client.tokens import credentials_from_file
from pia_client.upload import batch_id, plan_batches
from pia_client.upload_file import BadFile, read_items
from serving.demo import seed_demo_tenant
from tests.fault_proxy import FaultProxy

pytestmark = pytest.mark.without_shop

PIA = str(Path(sys.executable).parent / "pia")
TODAY = datetime.now(UTC).date()
QUICK = RetryPolicy(attempts=40, first_wait=0.001, longest_wait=0.01, longest_retry_after=0.01)
STORES, SKUS = ("1001", "1002", "1003"), [str(100001 + n) for n in range(60)]


def write_csv(path: Path, header: str, rows: list[str]) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def long_forecasts(path: Path, days: int = 3) -> Path:
    """One row per store, SKU and day, the days of a store and SKU out of order (planners' exports are)."""
    rows = [f"{store},{sku},{(TODAY + timedelta(days=day)).isoformat()},{(int(sku) % 7) + day}.5"
            for store in STORES for sku in SKUS for day in reversed(range(days))]
    return write_csv(path, "retailStoreNumber,skuNumber,date,quantity", rows)


@pytest.fixture
def tenant(server, engine, tmp_path) -> dict[str, Any]:
    """A fresh tenant (the demo's stores and assortments, no web shop) and its demo-style credentials file."""
    world = seed_demo_tenant(engine, f"upload tenant {uuid.uuid4()}", is_test=True, shop=False)
    path = tmp_path / "demo-credentials.json"
    path.write_bytes(orjson.dumps({"tenants": [world]}))
    return {**world, "credentialsFile": path}


def client(url: str, tenant: dict[str, Any], **options: Any) -> PiaClient:
    return PiaClient(url, tenant["id"], credentials_from_file(tenant["credentialsFile"], tenant["id"],
                                                              "demand_planning"), **options)


def held_batches(engine: sa.Engine, tenant_id: str) -> list[tuple[str, int, str]]:
    with engine.connect() as conn:
        return sorted(conn.execute(sa.select(batches.c.batch_id, batches.c.batch_index, batches.c.progress)
                                   .where(batches.c.tenant_id == tenant_id)).all(), key=lambda row: row[1])


def assert_forecasts_held_as_in(pia: PiaClient, path: Path) -> None:
    held = pia.held_forecasts()
    expected = pl.read_csv(path, schema_overrides={"skuNumber": pl.String, "retailStoreNumber": pl.String}) \
        .group_by("retailStoreNumber", "skuNumber").agg(pl.col("quantity").sort_by("date"), pl.col("date").min())
    as_held = {(r["retailStoreNumber"], r["skuNumber"]): (r["horizonStartDate"], r["quantities"])
               for r in held.iter_rows(named=True)}
    assert as_held == {(r["retailStoreNumber"], r["skuNumber"]):
                       (date.fromisoformat(r["date"]), [Decimal(str(q)) for q in r["quantity"]])
                       for r in expected.iter_rows(named=True)}


# The file, checked before anything is sent


def test_bad_rows_are_named_by_row_number_with_the_servers_codes(tmp_path) -> None:
    old = (TODAY - timedelta(days=8)).isoformat()
    path = write_csv(tmp_path / "forecasts.csv", "retailStoreNumber,ecomStoreNumber,skuNumber,date,quantity", [
        f"1001,,100001,{TODAY},1.5",
        f"1001,2001,100002,{TODAY},1",  # two stores
        f" 1001,,100003,{TODAY},1",  # key with a space
        "1001,,100004,2026-02-30,1",  # no such day
        f"1001,,100005,{TODAY},-1",  # negative
        f"1001,,100001,{TODAY},2",  # same store, SKU and day as row 1
    ])
    with pytest.raises(BadFile) as bad:
        read_items(path, SALES_FORECAST, TODAY)
    assert [(p.rows, p.code) for p in bad.value.problems] == [
        ((1,), "DUPLICATE_KEY_IN_FILE"), ((2,), "STORE_KEY_SHAPE"), ((3,), "INVALID_TYPE"), ((4,), "INVALID_DATE"),
        ((5,), "INVALID_DECIMAL"), ((6,), "DUPLICATE_KEY_IN_FILE")]
    gaps = write_csv(tmp_path / "gaps.csv", "retailStoreNumber,skuNumber,date,quantity", [
        f"1001,100001,{TODAY},1", f"1001,100001,{TODAY + timedelta(days=2)},1", f"1002,100001,{old},1"])
    with pytest.raises(BadFile) as bad:
        read_items(gaps, SALES_FORECAST, TODAY)
    assert [(p.rows, p.code) for p in bad.value.problems] == [((1,), "HORIZON_GAP"), ((3,), "HORIZON_START_TOO_OLD")]


def test_item_shape_csv_and_typed_parquet_become_the_same_items(tmp_path) -> None:
    end = TODAY + timedelta(days=2)
    csv = write_csv(tmp_path / "items.csv", "ecomStoreNumber,skuNumber,horizonStartDate,horizonEndDate,quantities",
                    [f"2001,100001,{TODAY},{end},1.5;0;2", f"2001,100002,{TODAY},,7"])
    parquet = tmp_path / "items.parquet"
    quantities = [[Decimal("1.5"), Decimal(0), Decimal(2)], [Decimal(7)]]
    pl.DataFrame({"ecomStoreNumber": ["2001", "2001"], "skuNumber": ["100001", "100002"],
                  "horizonStartDate": [TODAY, TODAY], "quantities": quantities},
                 schema_overrides={"quantities": pl.List(pl.Decimal(18, 1))}).write_parquet(parquet)
    from_csv, from_parquet = read_items(csv, SALES_FORECAST, TODAY), read_items(parquet, SALES_FORECAST, TODAY)
    assert [i.body for i in from_csv] == [
        {"ecomStoreNumber": "2001", "skuNumber": "100001", "horizonStartDate": TODAY.isoformat(),
         "horizonEndDate": end.isoformat(), "quantities": ["1.5", "0", "2"]},
        {"ecomStoreNumber": "2001", "skuNumber": "100002", "horizonStartDate": TODAY.isoformat(),
         "horizonEndDate": TODAY.isoformat(), "quantities": ["7"]}]
    assert [[Decimal(q) for q in i.body["quantities"]] for i in from_parquet] == \
        [[Decimal(q) for q in i.body["quantities"]] for i in from_csv]
    wrong = write_csv(tmp_path / "wrong.csv", "retailStoreNumber,skuNumber,horizonStartDate,horizonEndDate,quantities",
                      [f"1001,100001,{TODAY},{TODAY},1;2", f"1001,100002,{TODAY},,1;x", f"1001,100003,{TODAY},,"])
    with pytest.raises(BadFile) as bad:
        read_items(wrong, SALES_FORECAST, TODAY)
    assert [(p.rows, p.code) for p in bad.value.problems] == [
        ((1,), "HORIZON_LENGTH_MISMATCH"), ((2,), "INVALID_DECIMAL"), ((3,), "HORIZON_EMPTY")]


def test_replenishment_rows_and_missing_columns(tmp_path) -> None:
    path = write_csv(tmp_path / "parameters.csv", "retailStoreNumber,skuNumber,reorderPoint,maximumInventory",
                     ["1001,100001,5,20", "1001,100002,20,20", "1001,100003,1.23456,20", "1001,,1,2"])
    with pytest.raises(BadFile) as bad:
        read_items(path, REPLENISHMENT_PARAMETER, TODAY)
    assert [(p.rows, p.field, p.code) for p in bad.value.problems] == [
        ((2,), "reorderPoint", "REORDER_POINT_NOT_BELOW_MAXIMUM"), ((3,), "reorderPoint", "INVALID_DECIMAL"),
        ((4,), "skuNumber", "MISSING_FIELD")]
    with pytest.raises(BadFile) as bad:
        read_items(write_csv(tmp_path / "short.csv", "retailStoreNumber,skuNumber", ["1001,1"]),
                   REPLENISHMENT_PARAMETER, TODAY)
    assert [(p.field, p.code) for p in bad.value.problems] == [("reorderPoint", "MISSING_COLUMN"),
                                                               ("maximumInventory", "MISSING_COLUMN")]


# Batches


def test_batches_are_the_same_bytes_and_ids_on_every_run_and_respect_the_size_limits(tmp_path) -> None:
    items = read_items(long_forecasts(tmp_path / "f.csv", days=30), SALES_FORECAST, TODAY)
    limits = published_limits()
    first, again = (plan_batches(items, SALES_FORECAST, "2026-11-21T02:00:00Z", limits, 50) for _ in range(2))
    assert [(b.batch_id, b.content) for b in first] == [(b.batch_id, b.content) for b in again]
    assert len(first) == 4 and [len(b.items) for b in first] == [50, 50, 50, 30]
    assert first[1].batch_id == batch_id("2026-11-21T02:00:00Z", SALES_FORECAST, 2) != \
        batch_id("2026-11-21T02:00:00Z", REPLENISHMENT_PARAMETER, 2)
    document = orjson.loads(gzip.decompress(first[3].content))
    assert (document["batchIndex"], document["batchTotal"], document["itemCount"]) == (4, 4, 30)
    assert document["items"] == [item.body for item in first[3].items]

    small = plan_batches(items, SALES_FORECAST, "2026-11-21T02:00:00Z", limits | {"recommendedRequestBytes": 400})
    assert len(small) > 10 and all(len(b.content) <= 400 for b in small)
    assert [i for b in small for i in b.items] == items  # every item once, in file order
    # Data compressing beyond maxCompressionRatio goes uncompressed rather than be refused.
    plain = plan_batches(items, SALES_FORECAST, "2026-11-21T02:00:00Z", limits | {"maxCompressionRatio": 2})
    assert plain[0].content_encoding is None and orjson.loads(plain[0].content)["itemCount"] == len(items)


# Against the server


def test_a_malformed_file_exits_2_names_the_rows_and_sends_nothing(server, tenant, tmp_path) -> None:
    path = write_csv(tmp_path / "bad.csv", "retailStoreNumber,skuNumber,reorderPoint,maximumInventory",
                     ["1001,100001,5,20", "1001,100002,9,3", "1001,100003,5,20", "1001,100004,five,20"])
    with FaultProxy(server.url) as proxy:  # here only to count what reaches the server
        done = CliRunner().invoke(upload, ["replenishment", str(path), "--url", proxy.url, "--tenant", tenant["id"],
                                           "--credentials", str(tenant["credentialsFile"])])
    assert done.exit_code == 2, done.output
    assert "row 2: reorderPoint" in done.stderr and "row 4: reorderPoint" in done.stderr
    assert "nothing was sent" in done.stderr
    assert proxy.requests == 0  # not even a token request


def test_kill_9_in_the_middle_then_a_rerun_applies_every_batch_exactly_once(server, engine, tenant, tmp_path) -> None:
    path = long_forecasts(tmp_path / "forecasts.csv")  # 180 items of 3 days
    command = [PIA, "upload", "forecasts", str(path), "--tenant", tenant["id"], "--credentials",
               str(tenant["credentialsFile"]), "--batch-items", "6"]
    with FaultProxy(server.url, delay=0.1) as proxy:  # slow enough to be killed half way
        run = subprocess.Popen([*command, "--url", proxy.url], stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
        for line in run.stderr:  # type: ignore[union-attr]
            if line.startswith("batch 4/30 "):
                os.kill(run.pid, signal.SIGKILL)
                break
        run.wait(timeout=60)
    assert run.returncode == -signal.SIGKILL
    before = held_batches(engine, tenant["id"])
    assert 4 <= len(before) < 30

    rerun = CliRunner().invoke(upload, [*command[2:], "--url", server.url, "--wait"])  # the same command again
    assert rerun.exit_code == 0, rerun.output
    summary = orjson.loads(rerun.stdout.strip().splitlines()[-1])
    assert summary["replayed"] == len(before) and summary["accepted"] == 30 - len(before)
    assert summary["counts"] == {"items": 180, "applied": 180, "superseded": 0, "locked": 0, "rejected": 0}
    after = held_batches(engine, tenant["id"])
    assert [row[0] for row in after] == [batch_id(summary["generatedAt"], SALES_FORECAST, i) for i in range(1, 31)]
    assert {row[2] for row in after} == {"COMPLETED"}
    with client(server.url, tenant) as pia:
        assert_forecasts_held_as_in(pia, path)


def test_a_server_answering_429_and_503_at_random_gets_every_batch(server, engine, tenant, tmp_path) -> None:
    path = long_forecasts(tmp_path / "forecasts.csv", days=5)
    # The proxy is a deliberate fault injector in front of the real server: 30% of requests answered 429 or 503,
    # half of them after the server did the work (so some batches are sent again and answered 200).
    report = Report(Console(file=io.StringIO(), soft_wrap=True))
    with FaultProxy(server.url, fault_rate=0.3) as proxy, \
            client(proxy.url, tenant, retry=QUICK, on_retry=report.retrying) as pia:
        code, summary = upload_file(pia, SALES_FORECAST, path, "2026-11-21T03:00:00Z", wait=True, rejected_path=None,
                                    report=report, items_per_batch=9, first_poll=0.05)
        assert_forecasts_held_as_in(pia, path)
    assert code == 0 and summary["notDelivered"] == 0 and summary["counts"]["applied"] == 180
    assert proxy.faults[429] > 0 and proxy.faults[503] > 0
    told = report.console.file.getvalue()  # type: ignore[attr-defined]
    assert "failed (HTTP 429 INJECTED_FAULT: fault proxy); trying again" in told and "HTTP 503" in told
    puts = sum(n for key, n in proxy.forwarded.items() if key.startswith("PUT"))
    assert puts > 20  # 20 batches, some of them reached the server more than once
    after = held_batches(engine, tenant["id"])
    assert [row[0] for row in after] == [batch_id("2026-11-21T03:00:00Z", SALES_FORECAST, i) for i in range(1, 21)]


def test_wait_lists_rejected_items_with_their_rows_and_exits_1(server, tenant, tmp_path) -> None:
    path = write_csv(tmp_path / "parameters.csv", "retailStoreNumber,skuNumber,reorderPoint,maximumInventory", [
        "1001,100002,5,20",
        "1003,100020,5,20",  # replenished by hand
        "1002,100055,1,3",  # only in the local assortment, which 1002 does not carry
        "9999,100001,1,2",  # no such store
        "1003,100003,1,2",
    ])
    rejected = tmp_path / "rejected.csv"
    done = CliRunner().invoke(upload, ["replenishment", str(path), "--url", server.url, "--tenant", tenant["id"],
                                       "--credentials", str(tenant["credentialsFile"]), "--wait", "--rejected",
                                       str(rejected), "--generated-at", "2026-11-21T04:00:00+01:00"])
    assert done.exit_code == 1, done.output
    summary = orjson.loads(done.stdout.strip().splitlines()[-1])
    assert summary["counts"] == {"items": 5, "applied": 2, "superseded": 0, "locked": 0, "rejected": 3}
    listed = pl.read_csv(rejected, infer_schema=False)
    assert listed.select("rows", "retailStoreNumber", "skuNumber", "code").rows() == [
        ("2", "1003", "100020", "REPLENISHMENT_TYPE_MANUAL"), ("3", "1002", "100055", "SKU_NOT_IN_ASSORTMENT"),
        ("4", "9999", "100001", "UNKNOWN_RETAIL_STORE")]


def test_without_credentials_or_server_it_is_a_usage_error(tenant, tmp_path) -> None:
    path = long_forecasts(tmp_path / "f.csv", days=1)
    no_url = CliRunner(env={"PIA_URL": ""}).invoke(upload, ["forecasts", str(path), "--tenant", tenant["id"]])
    no_client = CliRunner(env={"PIA_CLIENT_ID": "", "PIA_CLIENT_SECRET": ""}).invoke(
        upload, ["forecasts", str(path), "--tenant", tenant["id"], "--url", "http://127.0.0.1:9"])
    assert (no_url.exit_code, no_client.exit_code) == (2, 2)
    assert "PIA_URL" in no_url.output and "PIA_CLIENT_ID" in no_client.output


def test_a_changed_file_sent_as_the_same_run_is_refused_with_exit_3(server, tenant, tmp_path) -> None:
    header = "retailStoreNumber,skuNumber,reorderPoint,maximumInventory"
    path = write_csv(tmp_path / "parameters.csv", header, ["1001,100002,5,20", "1003,100003,1,2"])
    arguments = ["replenishment", str(path), "--url", server.url, "--tenant", tenant["id"], "--credentials",
                 str(tenant["credentialsFile"]), "--generated-at", "2026-11-21T05:00:00Z"]
    assert CliRunner().invoke(upload, arguments).exit_code == 0
    assert CliRunner().invoke(upload, arguments).exit_code == 0  # the same file again: replayed
    write_csv(path, header, ["1001,100002,6,20", "1003,100003,1,2"])
    changed = CliRunner().invoke(upload, arguments)
    assert changed.exit_code == 3, changed.output
    assert "BATCH_ID_REUSED" in changed.stderr
    assert orjson.loads(changed.stdout.strip().splitlines()[-1])["notDelivered"] == 1
