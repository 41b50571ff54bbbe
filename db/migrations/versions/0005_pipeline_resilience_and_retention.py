"""Pipeline resilience and retention: batch retry time, worker heartbeats, unfinished-batch and audit-age indexes

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22 10:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    op.add_column("batches", sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "pipeline_workers",
        sa.Column("worker_id", sa.String(length=36), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("heartbeat_time", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("worker_id", name=op.f("pk_pipeline_workers")),
    )
    if _postgresql():
        op.create_index("ix_batches_unfinished", "batches", ["tenant_id", "received_time", "batch_id"],
                        postgresql_where=sa.text("progress IN ('PENDING', 'PROCESSING')"),
                        postgresql_include=["retry_at"])
        op.create_index("ix_audit_events_time", "audit_events", ["time"], postgresql_using="brin")


def downgrade() -> None:
    if _postgresql():
        op.drop_index("ix_audit_events_time", table_name="audit_events")
        op.drop_index("ix_batches_unfinished", table_name="batches")
    op.drop_table("pipeline_workers")
    if _postgresql():
        op.drop_column("batches", "retry_at")
    else:  # DuckDB drops no column of a table that has an index
        op.drop_index("ix_batches_tenant_id_received_time", table_name="batches")
        op.drop_column("batches", "retry_at")
        op.create_index("ix_batches_tenant_id_received_time", "batches", ["tenant_id", "received_time"])
