"""The analyst notebooks run top to bottom against a real `pia demo` server loaded with data, and are kept in git
without outputs."""

import gzip
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nbformat
import orjson
import pytest
from nbclient import NotebookClient

from contracts.batch_kinds import REPLENISHMENT_PARAMETER as PARAMETERS
from contracts.batch_kinds import SALES_FORECAST as FORECASTS
from pia_client.api import PiaClient
from pia_client.tokens import credentials_from_file
from tests.batches import final_status
from tests.demo_process import Demo

NOTEBOOKS = Path(__file__).parent.parent / "notebooks"


def run_notebook(name: str, demo: Demo, tenant_id: str, workdir: Path) -> dict:
    """Execute the notebook with its parameters cell pointed at the demo; the summary its last cell prints."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    parameters = next(cell for cell in notebook.cells if "parameters" in cell.metadata.get("tags", []))
    parameters.source += (f"\nPIA_URL = {demo.url!r}\nCREDENTIALS = {str(demo.data_dir / 'demo-credentials.json')!r}"
                          f"\nTENANT_ID = {tenant_id!r}")
    # A failing cell raises CellExecutionError, which fails the test with the cell's traceback.
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(workdir)}}).execute()
    last = notebook.cells[-1].outputs
    return json.loads("".join(output.get("text", "") for output in last if output.output_type == "stream"))


def upload(client: PiaClient, kind: str, generated_at: datetime, items: list[dict]) -> str:
    batch_id = str(uuid.uuid4())
    document = {"generatedAt": generated_at.isoformat().replace("+00:00", "Z"), "itemCount": len(items),
                "items": items}
    client.put_batch(kind, batch_id, gzip.compress(orjson.dumps(document)))
    return batch_id


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory):
    data_dir = tmp_path_factory.mktemp("notebook-demo") / "pia-data"
    demo = Demo(data_dir)
    yield demo
    demo.stop()


def test_notebooks_are_kept_without_outputs() -> None:
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        nbformat.validate(notebook)
        code = [cell for cell in notebook.cells if cell.cell_type == "code"]
        assert code and all(not cell.outputs and cell.execution_count is None for cell in code), path.name


def test_notebooks_run_against_a_loaded_demo(demo: Demo, tmp_path: Path) -> None:
    credentials = json.loads((demo.data_dir / "demo-credentials.json").read_text())
    tenant_id = next(tenant["id"] for tenant in credentials["tenants"] if not tenant["test"])
    client = PiaClient(demo.url, tenant_id, credentials_from_file(demo.data_dir / "demo-credentials.json",
                                                                  tenant_id, "demand_planning"))
    stores = [store["number"] for store in client.retail_stores() if store["status"] == "RELEASED"][:3]
    skus = sorted({row["skuNumber"] for row in client.iter_replenishment_parameters(stores[0])})[:4]
    today = datetime.now(UTC).date()

    def forecast(store: str, sku: str, quantity: int) -> dict:
        return {"retailStoreNumber": store, "skuNumber": sku, "horizonStartDate": today.isoformat(),
                "horizonEndDate": (today + timedelta(days=13)).isoformat(), "quantities": [str(quantity)] * 14}

    first_run = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
    first = upload(client, FORECASTS, first_run, [forecast(store, sku, 2) for store in stores for sku in skus]
                   + [forecast(stores[0], "NO-SUCH-SKU", 1)])
    final_status(client, FORECASTS, first)
    summary = run_notebook("held_forecasts.ipynb", demo, tenant_id, tmp_path)
    keys = len(stores) * len(skus)
    assert summary == {"horizons": keys, "days": keys * 14, "stores": len(stores),
                       "weeks": len({today + timedelta(days=n) - timedelta(days=(today + timedelta(days=n))
                                                                            .weekday()) for n in range(14)}),
                       "previousRun": False, "changeOnCommonDays": None}

    # A second run raises one store's forecasts by 1 a day; a late batch of an older run is superseded.
    second = upload(client, FORECASTS, first_run + timedelta(hours=1), [forecast(stores[0], sku, 3) for sku in skus])
    late = upload(client, FORECASTS, first_run - timedelta(hours=1), [forecast(stores[1], sku, 9) for sku in skus])
    parameters = upload(client, PARAMETERS, first_run, [
        {"retailStoreNumber": stores[0], "skuNumber": skus[0], "reorderPoint": "4", "maximumInventory": "12"},
        {"retailStoreNumber": stores[0], "skuNumber": "NO-SUCH-SKU", "reorderPoint": "1", "maximumInventory": "2"}])
    outcomes = [final_status(client, kind, batch_id) for kind, batch_id in
                ((FORECASTS, first), (FORECASTS, second), (FORECASTS, late), (PARAMETERS, parameters))]
    assert outcomes[2]["counts"]["superseded"] == len(skus)

    summary = run_notebook("held_forecasts.ipynb", demo, tenant_id, tmp_path)
    assert summary["previousRun"] is True and summary["horizons"] == keys
    assert summary["changeOnCommonDays"] == pytest.approx(len(skus) * 14 * 1.0)

    quality = run_notebook("batch_quality.ipynb", demo, tenant_id, tmp_path)
    codes: dict[str, int] = {}
    for status in outcomes:
        for item in status["rejectedItems"] or []:
            codes[item["code"]] = codes.get(item["code"], 0) + 1
    assert quality == {
        "batches": len(outcomes),
        "accepted": sum(status["counts"]["applied"] for status in outcomes),
        "rejected": sum(status["counts"]["rejected"] for status in outcomes),
        "superseded": sum(status["counts"]["superseded"] for status in outcomes),
        "codes": codes, "truncatedBatches": 0,
    }
    assert codes  # the unknown SKUs were rejected, and the notebook counted them by code
