"""Putting a FAILED batch back in line to be processed again from its staged file: `pia pipeline rerun` and the
admin API (the console's "rerun") both come here, so both refuse the same batches with the same words."""

from pathlib import Path

import sqlalchemy as sa

from contracts.errors import BatchNotFailed, StagedFileGone
from db.batches import FAILED, requeue_failed


def requeue_for_rerun(engine: sa.Engine, staging_dir: Path, staged_retention_days: int, batch: sa.Row) -> None:
    """Put the batch (a row of db.batches) back at its original place in line with its attempts counted from zero;
    a worker then processes it. BatchNotFailed or StagedFileGone (nothing changed) when it cannot be rerun."""
    if batch.progress != FAILED:
        raise BatchNotFailed(f"batch {batch.batch_id} is {batch.progress}, not FAILED; only FAILED batches are rerun")
    if not (staging_dir / batch.staged_path).is_file():
        raise StagedFileGone(f"batch {batch.batch_id} cannot be rerun: its staged file {batch.staged_path} is gone "
                             f"(staged files are removed {staged_retention_days} days after upload, "
                             "PIA_STAGED_RETENTION_DAYS); upload the data again as a new batch")
    if not requeue_failed(engine, batch.tenant_id, batch.batch_id):
        raise BatchNotFailed(f"batch {batch.batch_id} is no longer FAILED; only FAILED batches are rerun")
