"""`pia-upload forecasts|replenishment FILE` (also `pia upload` on a server): a planner's file to any pia server,
checked, batched and followed.

Exit codes:
  0  every batch was accepted (with --wait: and applied, nothing rejected)
  1  with --wait: items were rejected, or a batch FAILED (--rejected FILE.csv lists the rejected items)
  2  the file or the options are wrong; nothing was sent
  3  a batch could not be delivered: the server refused it (400, 409, 413, 401, 403) or stayed unreachable after
     the retries; a rerun with the same file and --generated-at sends what is missing
"""

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import httpx
import orjson
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from tenacity import RetryCallState

from contracts.batch_kinds import REPLENISHMENT_PARAMETER, SALES_FORECAST
from contracts.formats import TIMESTAMP_SHAPE, timestamp_value
from pia_client.api import PiaClient
from pia_client.retries import ApiCallFailed
from pia_client.tokens import Credentials, CredentialsMissing, credentials_from_file
from pia_client.upload import (
    Delivery,
    generated_at_of_file,
    plan_batches,
    rejected_items,
    send_batches,
    wait_for_batches,
)
from pia_client.upload_file import BadFile, check_horizons, read_items

KINDS = {"forecasts": SALES_FORECAST, "replenishment": REPLENISHMENT_PARAMETER}
ALL_APPLIED, SOME_REJECTED, BAD_INPUT, NOT_DELIVERED = 0, 1, 2, 3
PROBLEMS_SHOWN = 50


@dataclass
class Report:
    """What the run tells its user: a progress bar on a terminal, a line per batch otherwise (stderr)."""

    console: Console
    progress: Progress | None = None
    task: Any = None

    def say(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)

    @contextmanager
    def batches(self, total_items: int) -> Iterator[None]:
        if not self.console.is_terminal:
            yield
            return
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=self.console) as self.progress:
            self.task = self.progress.add_task("items sent", total=total_items)
            yield
        self.progress = None

    def retrying(self, state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0
        self.say(f"attempt {state.attempt_number} failed ({error}); trying again in {wait:.1f} s")

    def delivered(self, delivery: Delivery) -> None:
        batch = delivery.batch
        if delivery.error is not None:
            self.say(f"batch {batch.index}/{batch.total} {batch.batch_id} not delivered: {delivery.error}")
        elif self.progress is not None:
            self.progress.advance(self.task, len(batch.items))
        else:
            how = "accepted" if delivery.created else "already held (replayed)"
            self.say(f"batch {batch.index}/{batch.total} {batch.batch_id} {how}: {len(batch.items)} items")


def upload_file(client: PiaClient, kind: str, path: Path, generated_at: str | None, *, wait: bool,
                rejected_path: Path | None, report: Report, items_per_batch: int | None = None,
                first_poll: float = 0.5) -> tuple[int, dict[str, Any]]:
    """The whole run; its exit code and a summary (printed as JSON by the command)."""
    try:
        items = read_items(path, kind, datetime.now(UTC).date())
        if not items:
            raise BadFile([], 0)
    except BadFile as bad:
        _report_problems(report, path, bad)
        return BAD_INPUT, {"problems": bad.count}
    generated_at = generated_at or generated_at_of_file(path)
    limits = client.limits()
    try:
        check_horizons(items, limits["maxHorizonDays"])
    except BadFile as bad:
        _report_problems(report, path, bad)
        return BAD_INPUT, {"problems": bad.count}
    batches = plan_batches(items, kind, generated_at, limits, items_per_batch)
    report.say(f"{len(items)} items of {path.name} in {len(batches)} batch{'es' if len(batches) != 1 else ''}, "
               f"generatedAt {generated_at}")
    with report.batches(len(items)):
        deliveries = send_batches(client, kind, batches, report.delivered)
    summary: dict[str, Any] = {
        "generatedAt": generated_at, "batches": len(batches), "items": len(items),
        "accepted": sum(d.created for d in deliveries),
        "replayed": sum(d.delivered and not d.created for d in deliveries),
        "notDelivered": len(batches) - sum(d.delivered for d in deliveries)}
    if summary["notDelivered"]:
        same = f"--generated-at {generated_at}" + (f" --batch-items {items_per_batch}" if items_per_batch else "")
        report.say(f"{summary['notDelivered']} of {len(batches)} batches not delivered; rerun with {same} to send "
                   "them (batches the server holds already are answered 200, not applied twice)")
    if not wait:
        return (NOT_DELIVERED if summary["notDelivered"] else ALL_APPLIED), summary
    report.say("waiting for the server to apply the batches")
    statuses = wait_for_batches(client, kind, deliveries, first_poll=first_poll)
    finals = list(statuses.values())
    summary["counts"] = {key: sum((s["counts"] or {}).get(key, 0) for s in finals)
                         for key in ("items", "applied", "superseded", "locked", "rejected")}
    summary["failed"] = [s["batchId"] for s in finals if s["progress"] == "FAILED"]
    summary["rejectedItemsTruncated"] = any(s["rejectedItemsTruncated"] for s in finals)
    rejected = rejected_items(deliveries, statuses)
    if rejected_path is not None and summary["counts"]["rejected"]:
        rejected.write_csv(rejected_path)
        report.say(f"{rejected.height} rejected items written to {rejected_path}"
                   + (" (the server lists the first 500 of a batch only)" if summary["rejectedItemsTruncated"]
                      else ""))
    for status in finals:
        if status["progress"] == "FAILED":
            report.say(f"batch {status['batchIndex']} {status['batchId']} FAILED: {status['errorMessage']}")
    if summary["notDelivered"]:
        return NOT_DELIVERED, summary
    return (SOME_REJECTED if summary["failed"] or summary["counts"]["rejected"] else ALL_APPLIED), summary


def _report_problems(report: Report, path: Path, bad: BadFile) -> None:
    if not bad.count:
        report.say(f"{path}: no rows; nothing was sent")
        return
    report.say(f"{path}: {bad.count} problem(s); nothing was sent")
    for problem in bad.problems[:PROBLEMS_SHOWN]:
        report.say(f"  {problem}")
    if bad.count > PROBLEMS_SHOWN:
        report.say(f"  … and {bad.count - PROBLEMS_SHOWN} more")


def _credentials(credentials_file: Path | None, tenant_id: str) -> Credentials:
    # The secret is read from the environment, never from the command line (where `ps` would show it).
    client_id, secret = os.environ.get("PIA_CLIENT_ID"), os.environ.get("PIA_CLIENT_SECRET")
    try:
        if credentials_file is not None:
            return credentials_from_file(credentials_file, tenant_id, "demand_planning")
        if client_id and secret:
            return Credentials(client_id, secret)
        raise CredentialsMissing("set PIA_CLIENT_ID and PIA_CLIENT_SECRET or pass --credentials FILE "
                                 "(a demand_planning client)")
    except (CredentialsMissing, orjson.JSONDecodeError, KeyError, OSError) as error:
        raise click.UsageError(f"no credentials: {error}") from None


def _generated_at(_: click.Context, __: click.Parameter, value: str | None) -> str | None:
    if value is not None and timestamp_value(value) is None:
        raise click.BadParameter(f"must be {TIMESTAMP_SHAPE}")
    return value


@click.command()
@click.argument("kind", type=click.Choice(sorted(KINDS)))
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--tenant", "tenant_id", required=True, help="The tenant's id.")
@click.option("--url", envvar="PIA_URL", help="Base URL of the pia server (default: PIA_URL).")
@click.option("--credentials", "credentials_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="JSON file with the demand_planning client: demo-credentials.json or {clientId, clientSecret}. "
                   "Default: PIA_CLIENT_ID and PIA_CLIENT_SECRET.")
@click.option("--generated-at", callback=_generated_at,
              help="The planning run's timestamp, the same on a rerun (default: the file's modification time).")
@click.option("--batch-items", type=click.IntRange(min=1),
              help="At most this many items per batch (default: the server's recommendedItemsPerBatch). Keep it "
                   "the same on a rerun.")
@click.option("--wait", is_flag=True, help="Follow the batches until they are applied; exit 1 if items were "
                                           "rejected or a batch failed.")
@click.option("--rejected", "rejected_path", type=click.Path(dir_okay=False, path_type=Path),
              help="With --wait: write the rejected items (with their rows in FILE) to this CSV.")
def upload(kind: str, file: Path, tenant_id: str, url: str | None, credentials_file: Path | None,
           generated_at: str | None, batch_items: int | None, wait: bool, rejected_path: Path | None) -> None:
    """Upload a planner's CSV or Parquet file of sales forecasts or replenishment parameters (long or item shape)."""
    if not url:
        raise click.UsageError("no server: pass --url or set PIA_URL")
    credentials = _credentials(credentials_file, tenant_id)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request would bury the report
    report = Report(Console(stderr=True, soft_wrap=True))
    # Failures outside a batch's own delivery (the token, GET /limits, polling) end the run as not delivered.
    try:
        with PiaClient(url, tenant_id, credentials, on_retry=report.retrying) as client:
            code, summary = upload_file(client, KINDS[kind], file, generated_at, wait=wait,
                                        rejected_path=rejected_path, report=report, items_per_batch=batch_items)
    except ApiCallFailed as failed:
        click.echo(f"{url}: {failed}", err=True)
        code, summary = NOT_DELIVERED, {"error": failed.body}
    except httpx.TransportError as error:
        click.echo(f"cannot reach {url}: {error}", err=True)
        code, summary = NOT_DELIVERED, {"error": str(error)}
    click.echo(orjson.dumps(summary).decode())
    sys.exit(code)
