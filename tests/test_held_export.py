"""Tenant-wide exports of held data: both layouts and formats over HTTP, the Arrow pages' rows exactly, expiry and
tenancy as the lists, query errors and access, streaming in bounded batches, and `pia pipeline export`."""

import asyncio
import io
import threading
from collections.abc import Generator
from dataclasses import astuple
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from contracts.held_datasets import (
    ARROW_STREAM,
    PARQUET,
    REPLENISHMENT_PARAMETERS,
    SALES_FORECAST_DAYS,
    SALES_FORECASTS,
    encoded,
)
from db.adbc import inlined
from db.held import PAGE_PART, ForecastKey, held_forecasts, key_names, page_query
from db.held_export import (
    _FORECAST_COLUMNS,
    _forecast_page_template,
    _forecasts_after_template,
    parts_in_key_order,
    replenishment_parameter_batches,
    sales_forecast_batches,
)
from db.held_quantities import stored_value
from db.ids import new_id, utc_now
from db.schema import sales_forecasts
from db.tenants import create_tenant
from pipeline.cli import pipeline
from serving.routes.demand_planning import streamed
from settings import Settings
from tests.conftest import bearer, client_of, get_token
from tests.test_columnar_reads import held_rows, read_arrow, seed_held, walk

pytestmark = pytest.mark.without_shop

SCHEMAS = {("sales_forecasts", "horizon"): SALES_FORECASTS, ("sales_forecasts", "daily"): SALES_FORECAST_DAYS,
           ("replenishment_parameters", None): REPLENISHMENT_PARAMETERS}


@pytest.fixture(scope="module")
def held_world(engine: sa.Engine) -> dict[str, Any]:
    return seed_held(engine, "held export")


@pytest.fixture(scope="module")
def other_held_world(engine: sa.Engine) -> dict[str, Any]:
    """The same stores and SKUs in another tenant, with other quantities."""
    return seed_held(engine, "held export other", quantities=["7"])


def planner_of(http: httpx.Client, world: dict[str, Any]) -> tuple[str, dict[str, str]]:
    token = get_token(http, world, client_of(world, "demand_planning"))
    return f"/v1/tenants/{world['id']}/demand_planning", bearer(token)


@pytest.fixture
def planner(http: httpx.Client, held_world: dict[str, Any]) -> tuple[str, dict[str, str]]:
    return planner_of(http, held_world)


def export(http: httpx.Client, planner: tuple[str, dict[str, str]], collection: str, layout: str | None,
           accept: str | None = None) -> httpx.Response:
    params = {"layout": layout} if layout else {}
    headers = {**planner[1], **({"Accept": accept} if accept else {})}
    return http.get(f"{planner[0]}/{collection}/export", params=params, headers=headers)


def days_of(forecasts: pa.Table) -> list[dict[str, Any]]:
    """The daily layout of horizon rows, computed row by row as an analyst would."""
    return [{**{name: row[name] for name in ("retailStoreNumber", "ecomStoreNumber", "skuNumber")},
             "date": row["horizonStartDate"] + timedelta(days=index), "quantity": quantity,
             "generatedAt": row["generatedAt"], "modifiedTime": row["modifiedTime"]}
            for row in forecasts.to_pylist() for index, quantity in enumerate(row["quantities"])]


@pytest.mark.parametrize(("collection", "layout"), list(SCHEMAS))
def test_an_arrow_export_holds_every_row_of_the_arrow_pages(http: httpx.Client, planner: tuple[str, dict[str, str]],
                                                            collection: str, layout: str | None) -> None:
    exported = read_arrow(export(http, planner, collection, layout))
    pages = pa.concat_tables(table for table, _ in walk(http, f"{planner[0]}/{collection}?limit=2", planner[1],
                                                       arrow=True))
    assert exported.schema.equals(SCHEMAS[(collection, layout)])
    if layout == "daily":
        assert exported.to_pylist() == days_of(pages)
    else:
        assert exported.equals(pages)
    assert exported.num_rows >= 9  # every live forecast (and more parameters or days)


@pytest.mark.parametrize(("collection", "layout"), list(SCHEMAS))
def test_a_parquet_export_holds_what_the_arrow_one_does(http: httpx.Client, planner: tuple[str, dict[str, str]],
                                                        collection: str, layout: str | None) -> None:
    response = export(http, planner, collection, layout, accept=PARQUET)
    assert response.status_code == 200 and response.headers["Content-Type"] == PARQUET
    parquet = pq.read_table(io.BytesIO(response.content))
    arrow = read_arrow(export(http, planner, collection, layout, accept=ARROW_STREAM))
    assert parquet.schema.equals(SCHEMAS[(collection, layout)]) and parquet.equals(arrow)


@pytest.mark.parametrize(("accept", "media_type"), [("*/*", ARROW_STREAM),
                                                    (f"{PARQUET}, {ARROW_STREAM};q=0.5", PARQUET),
                                                    (f"{PARQUET};q=0.5, {ARROW_STREAM}", ARROW_STREAM)])
def test_the_accept_header_chooses_the_export_format(http: httpx.Client, planner: tuple[str, dict[str, str]],
                                                     accept: str, media_type: str) -> None:
    response = export(http, planner, "replenishment_parameters", None, accept=accept)
    assert response.status_code == 200 and response.headers["Content-Type"] == media_type


def test_exports_leave_out_expired_forecasts_and_other_tenants(http: httpx.Client, planner: tuple[str, dict[str, str]],
                                                               other_held_world: dict[str, Any]) -> None:
    mine = read_arrow(export(http, planner, "sales_forecasts", "daily"))
    theirs = read_arrow(export(http, planner_of(http, other_held_world), "sales_forecasts", "daily"))
    assert "100006" not in mine.column("skuNumber").to_pylist()  # 1002's expired forecast
    assert min(mine.column("date").to_pylist()) == utc_now().date() - timedelta(days=1)
    assert {str(value) for value in theirs.column("quantity").to_pylist()} == {"7.0000"}
    assert "7.0000" not in {str(value) for value in mine.column("quantity").to_pylist()}
    # Planner tokens are for their own tenant only.
    other = f"/v1/tenants/{other_held_world['id']}/demand_planning/sales_forecasts/export"
    assert http.get(other, headers=planner[1]).status_code == 403


def test_an_invalid_layout_is_refused_with_its_path(http: httpx.Client, planner: tuple[str, dict[str, str]]) -> None:
    response = export(http, planner, "sales_forecasts", "wide")
    assert response.status_code == 400 and response.json()["error"] == "VALIDATION_ERROR"
    assert [(error["path"], error["code"]) for error in response.json()["details"]["errors"]] == [
        ("layout", "INVALID_VALUE")]


@pytest.mark.parametrize("collection", ["sales_forecasts", "replenishment_parameters"])
def test_exports_need_the_permitted_demand_planning_client(http: httpx.Client, held_world: dict[str, Any],
                                                           collection: str) -> None:
    url = f"/v1/tenants/{held_world['id']}/demand_planning/{collection}/export"
    assert http.get(url).status_code == 401
    unpermitted = get_token(http, held_world, client_of(held_world, "demand_planning", permitted=False))
    assert http.get(url, headers=bearer(unpermitted)).status_code == 403


def test_an_export_streams_record_batches_of_bounded_size(http: httpx.Client, engine: sa.Engine) -> None:
    """Many forecasts come as many record batches, sent chunked as they are made, not as one body."""
    world = seed_held(engine, "held export many")
    today = utc_now().date()
    rows = [{**row, "sku_number": f"{number:06d}"} for number in range(40_000)
            for row in held_rows(world["id"], today, ["1"])[:1]]
    with engine.begin() as conn:
        conn.execute(sales_forecasts.delete().where(sales_forecasts.c.tenant_id == world["id"]))
        conn.execute(sales_forecasts.insert(), rows)
    planner = planner_of(http, world)
    with http.stream("GET", f"{planner[0]}/sales_forecasts/export", headers=planner[1]) as response:
        assert "Content-Length" not in response.headers  # streamed (chunked), not one body built in memory
        reader = pa.ipc.open_stream(b"".join(response.iter_bytes()))
        sizes = [batch.num_rows for batch in reader]
    assert sum(sizes) == 40_000 and len(sizes) >= 3 and max(sizes) <= 16_384


def test_the_reader_holds_one_batch_while_the_database_streams(engine: sa.Engine, backend: str) -> None:
    """The first batch arrives while the query still runs: on PostgreSQL the COPY has not read every row yet."""
    tenant_id = create_tenant(engine, f"held export stream {new_id()}", is_test=True)
    today = utc_now().date()
    # 60 days of quantities: some 20 MB of CSV, more than the socket's buffers hold.
    template = {**held_rows(tenant_id, today, ["1.2345"])[0], "horizon_end_date": today + timedelta(days=58),
                "quantities": stored_value(["1.2345"] * 60)}
    with engine.begin() as conn:
        conn.execute(sales_forecasts.insert(), [{**template, "sku_number": f"{n:06d}"} for n in range(30_000)])
    batches = sales_forecast_batches(engine, tenant_id, today=today, batch_rows=1_000)
    first = next(batches)
    if backend == "postgresql":
        with engine.connect() as conn:
            copied = conn.execute(sa.text("SELECT tuples_processed FROM pg_stat_progress_copy")).scalars().all()
        assert copied and all(count < 30_000 for count in copied), copied
    rest = [batch.num_rows for batch in batches]
    assert first.num_rows == 1_000 and len(rest) == 29 and set(rest) == {1_000}


def store_of(settings: Settings) -> dict[str, str]:
    """The environment that points `pia` at the session's store."""
    return {"PIA_DATA_DIR": str(settings.data_dir), "PIA_DATABASE_URL": settings.database_url,
            "PIA_SECRET_KEY": settings.secret_key.get_secret_value()}


@pytest.mark.parametrize(("dataset", "layout", "schema"), [("forecasts", "horizon", SALES_FORECASTS),
                                                            ("forecasts", "daily", SALES_FORECAST_DAYS),
                                                            ("parameters", "horizon", REPLENISHMENT_PARAMETERS)])
def test_pipeline_export_writes_the_columnar_schema(settings: Settings, engine: sa.Engine, held_world: dict[str, Any],
                                                    tmp_path: Path, dataset: str,
                                                    layout: str, schema: pa.Schema) -> None:
    out = tmp_path / "held.parquet"
    result = CliRunner().invoke(pipeline, ["export", dataset, "--out", str(out), "--tenant", held_world["id"],
                                           "--layout", layout], env=store_of(settings))
    assert result.exit_code == 0, result.output
    written = pq.read_table(out)
    if dataset == "forecasts":
        expected = pa.Table.from_batches(list(sales_forecast_batches(engine, held_world["id"],
                                                                    today=utc_now().date(), layout=layout)), schema)
    else:
        expected = pa.Table.from_batches(list(replenishment_parameter_batches(engine, held_world["id"])), schema)
    assert written.schema.equals(schema) and written.equals(expected) and written.num_rows
    assert orjson.loads(result.stdout)["rows"] == written.num_rows


def test_pipeline_export_names_the_tenant_when_several_hold_data(settings: Settings, engine: sa.Engine,
                                                                 tmp_path: Path) -> None:
    for _ in range(2):
        create_tenant(engine, f"held export tenant {new_id()}", is_test=True)
    out = tmp_path / "held.parquet"
    for arguments in (["export", "forecasts", "--out", str(out)],
                      ["export", "forecasts", "--out", str(out), "--tenant", "no-such-tenant"]):
        result = CliRunner().invoke(pipeline, arguments, env=store_of(settings))
        assert result.exit_code == 2 and "--tenant" in result.output and not out.exists()


@pytest.mark.parametrize("retail, ecom, after", [
    (None, None, ForecastKey(False, "1001", "100")), ("10'01", None, ForecastKey(False, "1001", "a\\b'c")),
    (None, "2001", ForecastKey(True, "2", "9"))])
def test_forecast_page_templates_write_what_inlining_writes(retail: str | None, ecom: str | None,
                                                            after: ForecastKey) -> None:
    """The PostgreSQL SQL of a first page and of the rest of the list after a key, compiled once and their values
    written in, is the SQL compiling them with their values as literals gives (quotes and backslashes included)."""
    today = utc_now().date()
    values = {"tenant_id": "t'1", "today": today, "retail_store_number": retail, "ecom_store_number": ecom}
    rows = held_forecasts("t'1", retail_store_number=retail, ecom_store_number=ecom, today=today,
                          columns=list(_FORECAST_COLUMNS))
    first = _forecast_page_template(retail is not None, ecom is not None, 50).render(values)
    assert first == inlined(page_query(rows, ForecastKey, None, 50, ordered=False))
    rest = _forecasts_after_template(retail is not None, ecom is not None).render(
        {**values, **{f"after_{name}": value for name, value in after.to_dict().items()}})
    key = [rows.c[name] for name in key_names(ForecastKey)]
    after_key = [sa.literal(value, column.type) for value, column in zip(astuple(after), key, strict=True)]
    assert rest == inlined(sa.select(rows).where(sa.tuple_(*key) > sa.tuple_(*after_key)).order_by(*key))


@given(skus=st.lists(st.text("ABC0123", min_size=1, max_size=4), min_size=1, max_size=30, unique=True),
       next_store=st.booleans(), shuffle=st.randoms(use_true_random=False))
def test_the_page_reads_come_out_in_key_order_however_the_union_brings_them(
        skus: list[str], next_store: bool, shuffle: Any) -> None:
    rows = [{PAGE_PART: 0, "store": "S1", "sku": sku} for sku in sorted(skus)]
    if next_store:
        rows.append({PAGE_PART: 1, "store": "S2", "sku": min(skus)})  # ahead of part 0's last by number
    expected = pl.DataFrame(rows).drop(PAGE_PART)
    shuffle.shuffle(rows)
    assert parts_in_key_order(pl.DataFrame(rows), "sku").equals(expected)


async def test_an_export_cancelled_while_a_chunk_is_made_closes_its_read_once_the_chunk_is_made() -> None:
    """A client gone mid-stream cancels the request while a worker thread makes the next chunk: the stream closes
    the read (here a generator standing for the database read, whose closing would give its connection back) once
    that thread is done, instead of failing with "generator already executing" and leaving the read open."""
    batch = pa.RecordBatch.from_pylist([], schema=REPLENISHMENT_PARAMETERS)
    reading, go_on, closed = threading.Event(), threading.Event(), threading.Event()

    def read() -> Generator[pa.RecordBatch, None, None]:
        try:
            yield batch
            reading.set()
            go_on.wait(10)
            yield batch
        finally:
            closed.set()

    batches = read()
    stream = streamed(encoded(batches, REPLENISHMENT_PARAMETERS, ARROW_STREAM), batches)
    assert await anext(stream)  # the schema and the first batch
    next_chunk = asyncio.ensure_future(anext(stream))
    assert await asyncio.to_thread(reading.wait, 10)
    next_chunk.cancel()
    await asyncio.sleep(0.05)  # the stream's closing has begun, and waits for the chunk being made
    assert not closed.is_set()
    go_on.set()
    with pytest.raises(asyncio.CancelledError):
        await next_chunk
    assert closed.is_set()
