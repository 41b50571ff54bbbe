"""SQLAlchemy Core schema shared by DuckDB and PostgreSQL.

Every row carries tenant_id (signing keys are the one service-wide table). Foreign keys are left to the
loader and the store functions: DuckDB refuses to update a row that another row references, which would
make ordinary upserts of stores and SKUs impossible there.
"""

import sqlalchemy as sa

metadata = sa.MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)


def _id(name: str = "id") -> sa.Column:
    return sa.Column(name, sa.String(36), primary_key=True)


def _tenant() -> sa.Column:
    return sa.Column("tenant_id", sa.String(36), nullable=False)


def _ref(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.String(36), nullable=nullable)


def _instant(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _decimal(name: str, nullable: bool = True) -> sa.Column:
    return sa.Column(name, sa.Numeric(18, 4), nullable=nullable)


tenants = sa.Table(
    "tenants",
    metadata,
    _id(),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("is_test", sa.Boolean, nullable=False),
    _instant("created_time"),
)

companies = sa.Table(
    "companies",
    metadata,
    _id(),
    _tenant(),
    sa.Column("number", sa.String(64), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("currency_iso_code", sa.String(3), nullable=False),
    sa.UniqueConstraint("tenant_id", "number"),
)

# A BASE assortment is shared by many stores; a LOCAL assortment refines it for a group of stores.
assortments = sa.Table(
    "assortments",
    metadata,
    _id(),
    _tenant(),
    sa.Column("code", sa.String(64), nullable=False),
    sa.Column("kind", sa.String(8), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.UniqueConstraint("tenant_id", "code"),
)

assortment_lines = sa.Table(
    "assortment_lines",
    metadata,
    _tenant(),
    sa.Column("assortment_id", sa.String(36), primary_key=True),
    sa.Column("sku_id", sa.String(36), primary_key=True),
    sa.Column("replenishment_type", sa.String(8), nullable=False),
    _decimal("reorder_point"),
    _decimal("maximum_inventory"),
    _instant("modified_time"),
)

retail_stores = sa.Table(
    "retail_stores",
    metadata,
    _id(),
    _tenant(),
    _ref("company_id"),
    sa.Column("number", sa.String(64), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("released", sa.Boolean, nullable=False),
    sa.Column("street", sa.String(200)),
    sa.Column("post_code", sa.String(32)),
    sa.Column("city", sa.String(100)),
    sa.Column("country_iso_code", sa.String(2)),
    _ref("base_assortment_id", nullable=True),
    _ref("local_assortment_id", nullable=True),
    sa.UniqueConstraint("tenant_id", "number"),
)

ecom_stores = sa.Table(
    "ecom_stores",
    metadata,
    _id(),
    _tenant(),
    _ref("company_id"),
    sa.Column("number", sa.String(64), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("released", sa.Boolean, nullable=False),
    sa.UniqueConstraint("tenant_id", "number"),
)

loyalty_programs = sa.Table(
    "loyalty_programs",
    metadata,
    _id(),
    _tenant(),
    sa.Column("code", sa.String(64), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.UniqueConstraint("tenant_id", "code"),
)

loyalty_program_stores = sa.Table(
    "loyalty_program_stores",
    metadata,
    _tenant(),
    sa.Column("loyalty_program_id", sa.String(36), primary_key=True),
    sa.Column("retail_store_id", sa.String(36), primary_key=True),
)

skus = sa.Table(
    "skus",
    metadata,
    _id(),
    _tenant(),
    sa.Column("number", sa.String(64), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.UniqueConstraint("tenant_id", "number"),
)

# The retail store's own line for a SKU; its values win over the local and base assortment defaults.
store_assortment_lines = sa.Table(
    "store_assortment_lines",
    metadata,
    _tenant(),
    sa.Column("retail_store_id", sa.String(36), primary_key=True),
    sa.Column("sku_id", sa.String(36), primary_key=True),
    sa.Column("replenishment_type", sa.String(8), nullable=False),
    _decimal("reorder_point"),
    _decimal("maximum_inventory"),
    sa.Column("locked", sa.Boolean, nullable=False),
    _instant("modified_time"),
    # The planning run that last wrote the values through the API; older runs are then superseded.
    _instant("generated_at", nullable=True),
)

api_clients = sa.Table(
    "api_clients",
    metadata,
    _id(),
    _tenant(),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("scope", sa.String(32), nullable=False),
    # The eCom store or loyalty program the client is bound to; null for demand_planning.
    _ref("resource_id", nullable=True),
    # Space-separated permission names, like an OAuth scope string.
    sa.Column("permissions", sa.String(200), nullable=False),
    sa.Column("secret_hash", sa.String(200), nullable=False),
    sa.Column("enabled", sa.Boolean, nullable=False),
    sa.Column("rate_limit_per_minute", sa.Integer, nullable=True),
    _instant("created_time"),
)

signing_keys = sa.Table(
    "signing_keys",
    metadata,
    sa.Column("kid", sa.String(64), primary_key=True),
    # The private JWK sealed by store/secrets.py; NULL only on a row from before revision 0004 not yet sealed.
    sa.Column("sealed_private_jwk", sa.Text),
    # Before revision 0004 the private JWK was kept here in plain text; the first start seals it and clears this.
    sa.Column("private_jwk", sa.Text),
    _instant("created_time"),
    # Set when a newer key takes over; the key is still published until its last token expires.
    _instant("retired_time", nullable=True),
)

audit_events = sa.Table(
    "audit_events",
    metadata,
    _id(),
    _tenant(),
    _ref("client_id"),
    sa.Column("token_id", sa.String(64), nullable=False),
    sa.Column("request_id", sa.String(64), nullable=False),
    sa.Column("method", sa.String(10), nullable=False),
    sa.Column("path", sa.String(2000), nullable=False),
    sa.Column("status", sa.Integer, nullable=False),
    sa.Column("duration_ms", sa.Float, nullable=False),
    _instant("time"),
    sa.Index(None, "tenant_id", "client_id", "time"),
)
# Retention deletes audit rows by age. Rows arrive in time order, so on PostgreSQL a BRIN index (a few pages
# for millions of rows, next to nothing per insert) finds the old ones without a scan of the table.
sa.Index("ix_audit_events_time", audit_events.c.time, postgresql_using="brin").ddl_if(dialect="postgresql")


# Demand planning batches as uploaded: the staged Parquet file holds the items, this row the status.
batches = sa.Table(
    "batches",
    metadata,
    sa.Column("tenant_id", sa.String(36), primary_key=True),
    sa.Column("batch_id", sa.String(36), primary_key=True),
    sa.Column("kind", sa.String(32), nullable=False),
    # SHA-256 of the decompressed body: the same id with the same body is the same upload.
    sa.Column("body_sha256", sa.String(64), nullable=False),
    sa.Column("staged_path", sa.String(1000), nullable=False),
    _instant("generated_at"),
    sa.Column("batch_index", sa.Integer),
    sa.Column("batch_total", sa.Integer),
    sa.Column("item_count", sa.Integer, nullable=False),
    sa.Column("progress", sa.String(40), nullable=False),
    _instant("received_time"),
    _instant("started_time", nullable=True),
    _instant("completed_time", nullable=True),
    sa.Column("applied_count", sa.Integer),
    sa.Column("superseded_count", sa.Integer),
    sa.Column("locked_count", sa.Integer),
    sa.Column("rejected_count", sa.Integer),
    sa.Column("rejected_items", sa.Text),  # JSON list, the first 500
    sa.Column("rejected_items_truncated", sa.Boolean, nullable=False),
    sa.Column("warnings", sa.Text, nullable=False),  # JSON list
    sa.Column("error_message", sa.Text),
    # Processing attempts since upload or the last rerun: a crash or a transient failure ended the others.
    sa.Column("attempts", sa.Integer, nullable=False),
    # After a transient failure: the batch (and so its tenant) waits until then for its next attempt.
    _instant("retry_at", nullable=True),
    # Not indexed on progress on DuckDB: it rewrites indexed columns on update, which trips its key checks.
    sa.Index(None, "tenant_id", "received_time"),
)
# The workers' idle poll and each tenant's next batch read only unfinished batches: on PostgreSQL a partial
# index holds just those, so the poll costs the same with a year of finished batches. DuckDB has no partial
# indexes; it scans the progress column, which its min/max zone maps and columnar storage keep cheap.
sa.Index("ix_batches_unfinished", batches.c.tenant_id, batches.c.received_time, batches.c.batch_id,
         postgresql_where=batches.c.progress.in_(["PENDING", "PROCESSING"]),
         postgresql_include=["retry_at"]).ddl_if(dialect="postgresql")

# One row per running pipeline worker (process or in-process thread): /healthcheck reads the heartbeats so a
# dead worker is visible. Service-wide, like signing keys: a worker serves every tenant.
pipeline_workers = sa.Table(
    "pipeline_workers",
    metadata,
    sa.Column("worker_id", sa.String(36), primary_key=True),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    _instant("started_time"),
    _instant("heartbeat_time"),
)

# The held forecast per store and SKU: the latest run's complete horizon for that key.
sales_forecasts = sa.Table(
    "sales_forecasts",
    metadata,
    sa.Column("tenant_id", sa.String(36), primary_key=True),
    # False (retail store) sorts before True (eCom store), the order the contract lists them in.
    sa.Column("is_ecom", sa.Boolean, primary_key=True),
    sa.Column("store_number", sa.String(64), primary_key=True),
    sa.Column("sku_number", sa.String(64), primary_key=True),
    sa.Column("horizon_start_date", sa.Date, nullable=False),
    sa.Column("horizon_end_date", sa.Date, nullable=False),
    sa.Column("quantities", sa.Text, nullable=False),  # JSON array of canonical decimal strings
    _instant("generated_at"),
    _instant("modified_time"),
    sa.Column("batch_id", sa.String(36), nullable=False),
)
# Each batch purges the tenant's expired forecasts; PostgreSQL would otherwise scan every held row to find them.
# DuckDB finds them fast without it, and its indexes slow its bulk upserts down.
sa.Index("ix_sales_forecasts_tenant_id_horizon_end_date", sales_forecasts.c.tenant_id,
         sales_forecasts.c.horizon_end_date).ddl_if(dialect="postgresql")
