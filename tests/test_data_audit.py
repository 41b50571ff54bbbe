"""`pia pipeline audit` on both backends: clean held data passes with Data Docs; rows corrupted with SQL fail it,
each named by its expectation and its row.

great-expectations is slow (seconds to import, about a second a run), so each backend gets two audit runs: one
clean, one with every corruption at once (each on its own row and expectation).
"""

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from contracts.batch_kinds import REPLENISHMENT_PARAMETER, SALES_FORECAST
from db.backoffice import load_document
from db.engine import create_engine
from db.held_quantities import stored_value
from db.ids import new_id
from db.schema import retail_stores, sales_forecasts, skus, store_assortment_lines
from db.tenants import create_tenant
from ingest.accept import accept_batch
from pipeline.worker import Pipeline
from serving.cli import main
from serving.demo_data import demo_document
from settings import Settings
from tests.batches import body, envelope, forecast_item, new_batch_id, replenishment_item

STORE = "1001"
# One forecast per corruption (and one left clean), all of store 1001.
FORECAST_SKUS = ("100001", "100002", "100003", "100004", "100005")


def load_held_data(settings: Settings, engine: sa.Engine) -> str:
    """A tenant with the demo back office, and forecasts and parameters applied through the real pipeline."""
    tenant_id = create_tenant(engine, f"audit {new_id()}", is_test=True)
    load_document(engine, tenant_id, demo_document("audit"))
    now = datetime.now(UTC)
    uploads = ((SALES_FORECAST, [forecast_item(sku, retail=STORE, days=7) for sku in FORECAST_SKUS]
                + [forecast_item("100001", retail=None, ecom="2001", days=3)]),
               (REPLENISHMENT_PARAMETER, [replenishment_item("100003", STORE, "5", "20")]))
    for kind, items in uploads:
        raw, headers = body(envelope(items, generated_at=now.isoformat()))
        accept_batch(engine, settings.resolved_staging_dir, tenant_id, new_batch_id(), kind, body=raw,
                     content_type=headers["Content-Type"], content_encoding=headers["Content-Encoding"], now=now)
    Pipeline.from_settings(settings, engine).process_pending()
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(sales_forecasts)
                            .where(sales_forecasts.c.tenant_id == tenant_id)).scalar_one() == 6
    return tenant_id


def run_audit(settings: Settings, *args: str) -> tuple[int, dict[str, Any], str]:
    env = {"PIA_DATA_DIR": str(settings.data_dir), "PIA_DATABASE_URL": settings.database_url,
           "PIA_SECRET_KEY": settings.secret_key.get_secret_value()}
    result = CliRunner().invoke(main, ["pipeline", "audit", *args], env=env)
    summary = json.loads(result.stdout) if result.stdout.strip() else {}
    return result.exit_code, summary, result.stderr


def expectations(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {outcome["name"]: outcome for outcome in summary["expectations"]}


def corrupt_forecast(conn: sa.Connection, tenant_id: str, sku: str, **values: Any) -> None:
    conn.execute(sales_forecasts.update().where(
        sales_forecasts.c.tenant_id == tenant_id, sales_forecasts.c.store_number == STORE,
        sales_forecasts.c.sku_number == sku).values(**values))


def store_line_of(tenant_id: str, sku: str) -> sa.ColumnElement[bool]:
    """The store line of store 1001 and the SKU."""
    lines = store_assortment_lines
    store_id = sa.select(retail_stores.c.id).where(retail_stores.c.tenant_id == tenant_id,
                                                   retail_stores.c.number == STORE).scalar_subquery()
    sku_id = sa.select(skus.c.id).where(skus.c.tenant_id == tenant_id, skus.c.number == sku).scalar_subquery()
    return sa.and_(lines.c.tenant_id == tenant_id, lines.c.retail_store_id == store_id, lines.c.sku_id == sku_id)


def test_clean_data_passes_and_each_corruption_is_named(own_store: tuple[Settings, sa.Engine]) -> None:
    settings, engine = own_store
    tenant_id = load_held_data(settings, engine)
    today = datetime.now(UTC).date()
    # An expired row is still held until the next batch purges it, but never returned: the audit passes it by.
    with engine.begin() as conn:
        conn.execute(sales_forecasts.insert().values(
            tenant_id=tenant_id, is_ecom=False, store_number="1002", sku_number="100001",
            horizon_start_date=today - timedelta(days=3), horizon_end_date=today - timedelta(days=1),
            quantities=stored_value(["1", "2", "3"]), generated_at=datetime.now(UTC),
            modified_time=datetime.now(UTC), batch_id=new_id()))

    code, summary, stderr = run_audit(settings)
    assert code == 0, (stderr, summary)
    assert summary["success"] and summary["tenants"] == [tenant_id]
    # Six forecasts returned (not the expired one); 60 + 50 + 50 + 60 resolved rows; the demo's 5 store lines
    # and the uploaded one.
    assert summary["rows"] == {"held_sales_forecasts": 6, "held_replenishment_parameters": 220,
                               "store_assortment_lines": 6}
    assert all(outcome["success"] and outcome["unexpectedCount"] == 0 for outcome in summary["expectations"])
    assert len(summary["expectations"]) == 16
    docs = Path(summary["dataDocs"])
    assert docs == settings.data_dir / "audit" / "index.html" and docs.is_file()
    assert "held_sales_forecasts" in docs.read_text()
    assert "0 expectation(s) failed" in stderr

    with engine.begin() as conn:
        seven = ["1.5"] * 7
        corrupt_forecast(conn, tenant_id, "100001", quantities=stored_value(["-1", *seven[1:]]))
        # One ten-thousandth more than DECIMAL(18,4) holds: 8 bytes take it.
        corrupt_forecast(conn, tenant_id, "100002", quantities=stored_value(seven[:6]) + (10**18).to_bytes(8, "big"))
        # A byte more than seven quantities.
        corrupt_forecast(conn, tenant_id, "100005", quantities=stored_value(seven) + b"\x00")
        corrupt_forecast(conn, tenant_id, "100003", horizon_end_date=today + timedelta(days=7))
        corrupt_forecast(conn, tenant_id, "100004", sku_number="999999")
        conn.execute(store_assortment_lines.update().where(store_line_of(tenant_id, "100003"))
                     .values(reorder_point=Decimal("30"), maximum_inventory=Decimal("20")))
        # Equal is not below either (the demo's locked line of 100001).
        conn.execute(store_assortment_lines.update().where(store_line_of(tenant_id, "100001"))
                     .values(reorder_point=Decimal("60"), maximum_inventory=Decimal("60")))
        # A store line whose SKU is gone: the read path leaves it out silently.
        conn.execute(store_assortment_lines.update().where(store_line_of(tenant_id, "100051"))
                     .values(sku_id=new_id()))

    code, summary, stderr = run_audit(settings, "--tenant", tenant_id)
    assert code == 1, (stderr, summary)
    outcomes = expectations(summary)
    failed = {name for name, outcome in outcomes.items() if not outcome["success"]}
    assert failed == {"forecast_quantities_readable", "forecast_quantities_non_negative",
                      "forecast_quantities_fit_decimal", "forecast_horizon_end_is_start_plus_length",
                      "forecast_sku_known", "parameter_reorder_point_below_maximum", "store_line_sku_known"}
    assert "7 expectation(s) failed" in stderr

    def offending(name: str) -> dict[str, Any]:
        outcome = outcomes[name]
        assert outcome["unexpectedCount"] == 1, outcome
        [row] = outcome["offendingRows"]
        assert (row["tenant_id"], row["store_kind"], row["store_number"]) == (tenant_id, "RETAIL", STORE)
        return row

    assert offending("forecast_quantities_non_negative")["sku_number"] == "100001"
    assert offending("forecast_quantities_non_negative")["smallest_quantity"] == -1
    assert offending("forecast_quantities_fit_decimal")["sku_number"] == "100002"
    assert offending("forecast_quantities_fit_decimal")["out_of_range_quantities"] == 1
    assert offending("forecast_quantities_readable")["sku_number"] == "100005"
    wrong_end = offending("forecast_horizon_end_is_start_plus_length")
    assert (wrong_end["sku_number"], wrong_end["horizon_end_date"], wrong_end["expected_end_date"]) == \
        ("100003", (today + timedelta(days=7)).isoformat(), (today + timedelta(days=6)).isoformat())
    assert offending("forecast_sku_known")["sku_number"] == "999999"
    not_below = outcomes["parameter_reorder_point_below_maximum"]
    assert not_below["unexpectedCount"] == 2
    assert sorted((row["tenant_id"], row["store_number"], row["sku_number"], row["reorder_point"],
                   row["maximum_inventory"]) for row in not_below["offendingRows"]) == [
        (tenant_id, STORE, "100001", "60.0000", "60.0000"), (tenant_id, STORE, "100003", "30.0000", "20.0000")]
    assert offending("store_line_sku_known")["sku_number"].startswith("unknown id ")


def resolved_row(source: str, reorder: str, maximum: str, locked: bool) -> dict[str, Any]:
    return {"store_number": STORE, "sku_number": "100001", "reorder_point": Decimal(reorder),
            "maximum_inventory": Decimal(maximum), "parameter_source": source, "locked": locked}


def line(source: str, reorder: str | None, maximum: str | None, locked: bool | None = None) -> dict[str, Any]:
    return {"store_number": STORE, "sku_number": "100001", "source": source,
            "reorder_point": Decimal(reorder) if reorder else None,
            "maximum_inventory": Decimal(maximum) if maximum else None, "locked": locked}


DECIMALS = {"reorder_point": pl.Decimal(18, 4), "maximum_inventory": pl.Decimal(18, 4)}


@pytest.mark.parametrize(("lines", "row", "broken"), [
    # As the read path resolves them: every fact holds.
    ([line("RETAIL_STORE_SPECIFIC", "2", "6", True), line("BASE_ASSORTMENT", "1", "3")],
     resolved_row("RETAIL_STORE_SPECIFIC", "2", "6", True), set()),
    # A lock-only store line leaves the values to the local line, and still locks the store and SKU.
    ([line("RETAIL_STORE_SPECIFIC", None, None, True), line("LOCAL_ASSORTMENT", "4", "12")],
     resolved_row("LOCAL_ASSORTMENT", "4", "12", True), set()),
    # The source names a line that is not there.
    ([line("BASE_ASSORTMENT", "1", "3")], resolved_row("LOCAL_ASSORTMENT", "1", "3", False),
     {"source_line_exists", "source_line_carries_values", "follows_resolution_order"}),
    # The values are not the named line's.
    ([line("BASE_ASSORTMENT", "1", "3")], resolved_row("BASE_ASSORTMENT", "2", "3", False),
     {"source_line_carries_values"}),
    # A less specific line named while the store line has values.
    ([line("RETAIL_STORE_SPECIFIC", "2", "6", False), line("BASE_ASSORTMENT", "1", "3")],
     resolved_row("BASE_ASSORTMENT", "1", "3", False), {"follows_resolution_order"}),
    # Locked without a locked store-specific line, and unlocked despite one.
    ([line("BASE_ASSORTMENT", "1", "3")], resolved_row("BASE_ASSORTMENT", "1", "3", True), {"locked_as_store_line"}),
    ([line("RETAIL_STORE_SPECIFIC", "2", "6", True)], resolved_row("RETAIL_STORE_SPECIFIC", "2", "6", False),
     {"locked_as_store_line"}),
])
def test_parameter_source_facts_against_the_lines(lines: list[dict], row: dict, broken: set[str]) -> None:
    """The resolution is computed when read, so SQL cannot corrupt a source or lock: these rows stand for a
    faulty read path, which the facts behind the source and lock expectations must catch."""
    # Imported here, not at the top: the module imports great-expectations (8 s of CPU on a slow machine), which
    # every test process would otherwise pay while collecting, whether or not it runs these tests.
    from pipeline.audit import parameter_facts

    resolved = pl.DataFrame([row], schema_overrides=DECIMALS)
    facts = parameter_facts(resolved, pl.DataFrame(lines, schema_overrides={**DECIMALS, "locked": pl.Boolean}))
    flags = ("source_line_exists", "source_line_carries_values", "follows_resolution_order", "locked_as_store_line")
    assert {flag for flag in flags if not facts.item(0, flag)} == broken


def test_an_empty_store_an_unknown_tenant_and_a_tenant_with_nothing_held(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, database_url="")
    code, summary, stderr = run_audit(settings)
    assert (code, summary) == (2, {}) and "no tenants" in stderr
    code, summary, stderr = run_audit(settings, "--tenant", new_id())
    assert (code, summary) == (2, {}) and "no tenant" in stderr
    assert not (tmp_path / "audit").exists()

    engine = create_engine(settings)
    tenant_id = create_tenant(engine, "nothing held", is_test=True)
    engine.dispose()
    code, summary, stderr = run_audit(settings)
    assert code == 0, (stderr, summary)
    assert summary["tenants"] == [tenant_id] and set(summary["rows"].values()) == {0}
    assert (tmp_path / "audit" / "index.html").is_file()


def test_the_server_does_not_import_great_expectations() -> None:
    """Its import takes seconds: only the audit command may load it."""
    probe = "import sys, serving.cli, serving.app; print('great_expectations' in sys.modules)"
    output = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert output.strip() == "False"
