"""`pia worker` and `pia pipeline …`: the pipeline from the command line.

Exit codes: 0 done; 1 a batch ended FAILED; 2 nothing to do as asked (unknown batch, not FAILED, ambiguous id).
"""

import signal
import sys
import threading

import click
import orjson
import sqlalchemy as sa
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from pipeline.worker import Pipeline, tenant_locks_for
from settings import Settings
from store.batches import FAILED, UNFINISHED, counts_by_progress, find_batch, get_batch, requeue_failed
from store.engine import create_engine
from store.migrate import upgrade


def _pipeline() -> tuple[Settings, sa.Engine, Pipeline]:
    settings = Settings()
    engine = create_engine(settings)
    upgrade(engine)
    return settings, engine, Pipeline(engine, settings.resolved_staging_dir, tenant_locks_for(engine))


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    transient=False)


def _failed(engine: sa.Engine, batches: list[sa.Row]) -> list[sa.Row]:
    rows = [get_batch(engine, b.tenant_id, b.batch_id) for b in batches]
    return [row for row in rows if row.progress == FAILED]


@click.command()
def worker() -> None:
    """Process batches until stopped (SIGTERM/SIGINT); run several against PostgreSQL to scale out."""
    settings, _, pipeline = _pipeline()
    stop, wake = threading.Event(), threading.Event()

    def request_stop(*_: object) -> None:
        stop.set()
        wake.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    click.echo("pipeline worker started", err=True)
    pipeline.run(stop, wake, settings.worker_poll_seconds)


@click.group()
def pipeline() -> None:
    """Demand planning batches: status, processing, reruns."""


@pipeline.command()
def status() -> None:
    """Batches by progress state, as JSON."""
    _, engine, _ = _pipeline()
    click.echo(orjson.dumps(counts_by_progress(engine), option=orjson.OPT_INDENT_2).decode())


@pipeline.command()
def process() -> None:
    """Process every pending batch, then exit."""
    _, engine, runner = _pipeline()
    waiting = sum(counts_by_progress(engine)[state] for state in UNFINISHED)
    done: list[sa.Row] = []
    with _progress() as bar:
        task = bar.add_task("processing batches", total=waiting)
        runner.process_pending(on_batch=lambda batch: (done.append(batch), bar.advance(task)))
    failed = _failed(engine, done)
    click.echo(f"processed {len(done)} batch(es), {len(failed)} failed", err=True)
    for row in failed:
        click.echo(f"FAILED {row.tenant_id}/{row.batch_id}: {row.error_message}", err=True)
    sys.exit(1 if failed else 0)


@pipeline.command()
@click.argument("batch_id")
@click.option("--tenant", "tenant_id", help="Needed when several tenants used the same batch id.")
def rerun(batch_id: str, tenant_id: str | None) -> None:
    """Process a FAILED batch again from its staged file (and any batches of its tenant waiting before it)."""
    _, engine, runner = _pipeline()
    matches = [row for row in find_batch(engine, batch_id) if tenant_id in (None, row.tenant_id)]
    if len(matches) != 1:
        click.echo(f"{'no batch' if not matches else 'several tenants have batch'} {batch_id}; "
                   f"{'check the id' if not matches else 'name one with --tenant'}", err=True)
        sys.exit(2)
    batch = matches[0]
    if not requeue_failed(engine, batch.tenant_id, batch.batch_id):
        click.echo(f"batch {batch_id} is {batch.progress}, not FAILED; only FAILED batches are rerun", err=True)
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
