"""`pia pipeline …`: the pipeline from the command line (`pia worker`, the long-running process, is
serving/worker_process.py).

Exit codes: 0 done; 1 a batch ended FAILED (or, for process, still waits for a retry); 2 nothing to do as asked
(unknown batch, not FAILED, ambiguous id, staged file gone).
"""

import importlib.util
import logging
import sys
from datetime import UTC, datetime
from pathlib import Path

import click
import orjson
import sqlalchemy as sa
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from contracts.errors import Conflict
from db.batches import FAILED, UNFINISHED, counts_by_progress, find_batch, get_batch, outcomes
from db.engine import create_engine
from db.held_export import LAYOUTS, Layout
from db.ids import utc_now
from db.migrate import upgrade
from db.tenants import list_tenants
from pipeline.export import export_held
from pipeline.rerun import requeue_for_rerun
from pipeline.worker import Pipeline
from settings import Settings

# The audit's libraries are the pia distribution's `audit` extra.
AUDIT_INSTALL = "pip install 'pia[audit]' (in a checkout: uv sync --extra audit)"


def pipeline_from_environment() -> tuple[Settings, sa.Engine, Pipeline]:
    """The settings, a migrated engine and the pipeline, as every command that runs it starts."""
    settings = Settings()
    engine = create_engine(settings)
    upgrade(engine)
    return settings, engine, Pipeline.from_settings(settings, engine)


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    transient=False)


@click.group()
def pipeline() -> None:
    """Demand planning batches: status, processing, reruns; the audit of held data."""


@pipeline.command()
def status() -> None:
    """Batches by progress state, as JSON."""
    _, engine, _ = pipeline_from_environment()
    click.echo(orjson.dumps(counts_by_progress(engine), option=orjson.OPT_INDENT_2).decode())


@pipeline.command()
def process() -> None:
    """Process every pending batch, then exit."""
    _, engine, runner = pipeline_from_environment()
    waiting = sum(counts_by_progress(engine)[state] for state in UNFINISHED)
    handled: list[tuple[str, str]] = []
    with _progress() as bar:
        task = bar.add_task("processing batches", total=waiting)
        runner.process_pending(on_batch=lambda tenant_id, batch_id: (handled.append((tenant_id, batch_id)),
                                                                     bar.advance(task)))
    rows = outcomes(engine, handled)
    failed = [row for row in rows if row.progress == FAILED]
    retrying = [row for row in rows if row.progress in UNFINISHED]
    click.echo(f"processed {len(rows)} batch(es), {len(failed)} failed, {len(retrying)} to be retried", err=True)
    for row in failed:
        click.echo(f"FAILED {row.tenant_id}/{row.batch_id}: {row.error_message}", err=True)
    for row in retrying:
        click.echo(f"RETRY {row.tenant_id}/{row.batch_id}: a transient failure; a worker (or process, run "
                   "again) tries it after its backoff", err=True)
    sys.exit(1 if failed or retrying else 0)


@pipeline.command()
@click.argument("batch_id")
@click.option("--tenant", "tenant_id", help="Needed when several tenants used the same batch id.")
def rerun(batch_id: str, tenant_id: str | None) -> None:
    """Process a FAILED batch again from its staged file (and any batches of its tenant waiting before it)."""
    settings, engine, runner = pipeline_from_environment()
    matches = [row for row in find_batch(engine, batch_id) if tenant_id in (None, row.tenant_id)]
    if len(matches) != 1:
        click.echo(f"{'no batch' if not matches else 'several tenants have batch'} {batch_id}; "
                   f"{'check the id' if not matches else 'name one with --tenant'}", err=True)
        sys.exit(2)
    batch = matches[0]
    try:
        requeue_for_rerun(engine, settings.resolved_staging_dir, settings.staged_retention_days, batch)
    except Conflict as refused:
        click.echo(refused.message, err=True)
        sys.exit(2)
    with _progress() as bar:
        task = bar.add_task(f"rerunning {batch_id}", total=None)
        if runner.process_tenant(batch.tenant_id) is None:
            click.echo("a running worker has this tenant; it will process the batch, follow its status", err=True)
        bar.update(task, total=1, completed=1)
    row = get_batch(engine, batch.tenant_id, batch.batch_id)
    click.echo(orjson.dumps({"batchId": row.batch_id, "progress": row.progress,
                             "errorMessage": row.error_message}).decode())
    sys.exit(1 if row.progress == FAILED else 0)


@pipeline.command()
@click.option("--tenant", "tenant_id", help="Audit this tenant only (default: every tenant).")
def audit(tenant_id: str | None) -> None:
    """Check held data against the data-quality contract, as JSON, with Data Docs under DATA_DIR/audit/.

    Exit 0 when every expectation holds, 1 when one fails, 2 for an unknown tenant or none at all, or without
    great-expectations (the `audit` extra).
    """
    if importlib.util.find_spec("great_expectations") is None:  # looked up, not imported: that takes seconds
        click.echo(f"pia pipeline audit needs great-expectations: {AUDIT_INSTALL}", err=True)
        sys.exit(2)
    settings, engine, _ = pipeline_from_environment()
    tenant_ids = [row.id for row in list_tenants(engine)]
    if tenant_id is not None:
        if tenant_id not in tenant_ids:
            click.echo(f"no tenant {tenant_id}", err=True)
            sys.exit(2)
        tenant_ids = [tenant_id]
    if not tenant_ids:
        click.echo("no tenants: nothing to audit", err=True)
        sys.exit(2)
    # great-expectations takes seconds to import: only this command loads it. Its set-up logs at INFO, which
    # the pia command's logging would otherwise print around the report.
    logging.getLogger("great_expectations").setLevel(logging.WARNING)
    from pipeline.audit import audit_held_data

    report = audit_held_data(engine, tenant_ids, datetime.now(UTC).date(), settings.data_dir / "audit")
    click.echo(orjson.dumps(report.summary, option=orjson.OPT_INDENT_2).decode())
    failed = [outcome["name"] for outcome in report.summary["expectations"] if not outcome["success"]]
    click.echo(f"{len(failed)} expectation(s) failed{': ' + ', '.join(failed) if failed else ''}; "
               f"Data Docs: {report.summary['dataDocs']}", err=True)
    sys.exit(0 if report.success else 1)


@pipeline.command()
@click.argument("dataset", type=click.Choice(["forecasts", "parameters"]))
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The Parquet file to write (replaced when complete).")
@click.option("--tenant", "tenant_id", help="Needed when the store holds several tenants.")
@click.option("--layout", type=click.Choice(LAYOUTS), default="horizon", show_default=True,
              help="forecasts: a row per forecast (horizon) or per store, SKU and day (daily).")
def export(dataset: str, out: Path, tenant_id: str | None, layout: Layout) -> None:
    """Write a tenant's held forecasts or replenishment parameters to Parquet, in the columnar reads' schema."""
    _, engine, _ = pipeline_from_environment()
    tenants = [row.id for row in list_tenants(engine) if tenant_id in (None, row.id)]
    if len(tenants) != 1:
        click.echo(f"{'no tenant ' + tenant_id if tenant_id else 'several tenants'}; name one with --tenant "
                   "(pia admin list-tenants)", err=True)
        sys.exit(2)
    rows = export_held(engine, tenants[0], dataset, out, today=utc_now().date(), layout=layout)
    click.echo(orjson.dumps({"tenantId": tenants[0], "dataset": dataset, "layout": layout, "rows": rows,
                             "out": str(out)}).decode())
