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


def _decimal(name: str, nullable: bool = True, server_default: str | None = None) -> sa.Column:
    return sa.Column(name, sa.Numeric(18, 4), nullable=nullable, server_default=server_default)


tenants = sa.Table(
    "tenants",
    metadata,
    _id(),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("is_test", sa.Boolean, nullable=False),
    _instant("created_time"),
    # Counted up by every back-office load, in its transaction: what order creation keeps per process of the
    # tenant's catalogue holds while it stands (db/order_context.py).
    sa.Column("catalogue_version", sa.Integer, nullable=False, server_default="0"),
)

companies = sa.Table(
    "companies",
    metadata,
    _id(),
    _tenant(),
    sa.Column("number", sa.String(64), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("currency_iso_code", sa.String(3), nullable=False),
    # The company's base prices: what an eCom store without a price list of its own sells at.
    _ref("base_price_list_id", nullable=True),
    # The VAT rate (percent) of freight on orders.
    _decimal("freight_vat_rate"),
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
    # The assortment, like a retail store's: a SKU is visible when a line of either holds it.
    _ref("base_assortment_id", nullable=True),
    _ref("local_assortment_id", nullable=True),
    # Consumer prices; null means the company's base price list.
    _ref("price_list_id", nullable=True),
    sa.Column("lead_time_days", sa.Integer, nullable=False, server_default="0"),
    sa.Column("payment_capture_enabled", sa.Boolean, nullable=False, server_default=sa.false()),
    # The customer of orders sent without customerId.
    _ref("default_customer_id", nullable=True),
    sa.UniqueConstraint("tenant_id", "number"),
)

# The warehouses that ship an eCom store's orders, in the order they are tried.
ecom_store_warehouses = sa.Table(
    "ecom_store_warehouses",
    metadata,
    _tenant(),
    sa.Column("ecom_store_id", sa.String(36), primary_key=True),
    sa.Column("warehouse_id", sa.String(36), primary_key=True),
    sa.Column("priority", sa.Integer, nullable=False),
)

# Where an eCom store's change events go (delivered by the events work). The secret (Service Bus shared access
# key or webhook signing secret) is sealed by db/secrets.py and never returned.
ecom_store_event_destinations = sa.Table(
    "ecom_store_event_destinations",
    metadata,
    _tenant(),
    sa.Column("ecom_store_id", sa.String(36), primary_key=True),
    sa.Column("kind", sa.String(16), nullable=False),  # SERVICE_BUS or WEBHOOK
    sa.Column("endpoint", sa.String(1000), nullable=False),  # namespace host name, or the webhook URL
    sa.Column("entity_path", sa.String(260)),  # queue or topic (Service Bus only)
    sa.Column("shared_access_key_name", sa.String(256)),  # policy name (Service Bus only)
    sa.Column("sealed_secret", sa.Text, nullable=False),
    _instant("modified_time"),
)

warehouses = sa.Table(
    "warehouses",
    metadata,
    _id(),
    _tenant(),
    _ref("company_id"),
    sa.Column("number", sa.String(64), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.UniqueConstraint("tenant_id", "number"),
)

# Stock per location (a warehouse or a retail store; their ids never collide) and SKU. `reserved` is the sum of the
# location's ACTIVE stock_reservations of the SKU, kept so in the transaction that changes them (db/reservations.py).
stock_levels = sa.Table(
    "stock_levels",
    metadata,
    _tenant(),
    sa.Column("location_id", sa.String(36), primary_key=True),
    sa.Column("sku_id", sa.String(36), primary_key=True),
    _decimal("on_hand", nullable=False),
    _decimal("reserved", nullable=False),
    _instant("modified_time"),
    sa.Index(None, "tenant_id", "sku_id"),
    sa.CheckConstraint("on_hand >= 0", name="ck_stock_levels_on_hand"),
    sa.CheckConstraint("reserved >= 0", name="ck_stock_levels_reserved"),
)

# Every reserved unit belongs to one of these rows: its owner (an order line or a click and collect cart line), where
# and what it is, and its state: ACTIVE (counted in stock_levels.reserved), CONSUMED (the units left: delivered or
# collected), RELEASED (cancelled, or taken back by a stock count: an order's units wait for stock again), EXPIRED (a
# cart not collected in time) or SHORT (a cart line's units a stock count found missing). Ending part of a row splits
# it, so each row keeps its own quantity and times. Not indexed on state: DuckDB rewrites indexed columns on update.
stock_reservations = sa.Table(
    "stock_reservations",
    metadata,
    _id(),
    _tenant(),
    sa.Column("owner_type", sa.String(16), nullable=False),  # ORDER_LINE, CART_LINE
    _ref("owner_id"),  # order_lines.id or click_and_collect_lines.id
    _ref("location_id"),
    _ref("sku_id"),
    _decimal("quantity", nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    _instant("created_time"),
    _instant("ended_time", nullable=True),
    sa.Index(None, "tenant_id", "owner_id"),
    sa.Index(None, "tenant_id", "location_id", "sku_id"),
    sa.CheckConstraint("quantity > 0", name="ck_stock_reservations_quantity"),
)

loyalty_programs = sa.Table(
    "loyalty_programs",
    metadata,
    _id(),
    _tenant(),
    sa.Column("code", sa.String(64), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    # The company whose currency the program counts in; null on programs loaded before revision 0006.
    _ref("company_id", nullable=True),
    sa.UniqueConstraint("tenant_id", "code"),
)

loyalty_program_stores = sa.Table(
    "loyalty_program_stores",
    metadata,
    _tenant(),
    sa.Column("loyalty_program_id", sa.String(36), primary_key=True),
    sa.Column("retail_store_id", sa.String(36), primary_key=True),
)

# The 12 reference lists of GET /product_schema/*, one table: `list_name` is the route's last segment
# (brands, product_colors, sizes, dynamic_attributes_options, ...). Columns beyond code and name belong to
# one list each.
reference_entries = sa.Table(
    "reference_entries",
    metadata,
    _id(),
    _tenant(),
    sa.Column("list_name", sa.String(40), nullable=False),
    sa.Column("code", sa.String(64), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("color_code", sa.String(16)),  # product_colors
    sa.Column("sort_order", sa.Integer),  # sizes, dynamic_attributes_options
    sa.Column("value_type", sa.String(8)),  # dynamic_attributes: TEXT, NUMBER, BOOLEAN, OPTION
    _ref("dynamic_attribute_id", nullable=True),  # dynamic_attributes_options
    _instant("modified_time"),
    sa.UniqueConstraint("tenant_id", "list_name", "code"),
)

vat_rates = sa.Table(
    "vat_rates",
    metadata,
    _id(),
    _tenant(),
    sa.Column("code", sa.String(64), nullable=False),
    _decimal("rate", nullable=False),  # percent
    sa.UniqueConstraint("tenant_id", "code"),
)

products = sa.Table(
    "products",
    metadata,
    _id(),
    _tenant(),
    sa.Column("number", sa.String(64), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("description", sa.Text),
    sa.Column("released", sa.Boolean, nullable=False),
    # Ids into reference_entries of the list the column names.
    _ref("brand_id", nullable=True),
    _ref("product_category_id", nullable=True),
    _ref("main_product_group_id", nullable=True),
    _ref("sub_product_group_id", nullable=True),
    _ref("product_concept_id", nullable=True),
    _ref("exclusivity_level_id", nullable=True),
    _ref("main_activity_id", nullable=True),
    # Last change of the product, its SKUs, images, attribute values or prices.
    _instant("modified_time"),
    sa.UniqueConstraint("tenant_id", "number"),
)

product_images = sa.Table(
    "product_images",
    metadata,
    _tenant(),
    sa.Column("product_id", sa.String(36), primary_key=True),
    sa.Column("sort_order", sa.Integer, primary_key=True),
    sa.Column("url", sa.String(2000), nullable=False),
    sa.Column("alt_text", sa.String(500)),
)

# A product's value of a dynamic attribute: text for TEXT/NUMBER/BOOLEAN, option ids for OPTION.
product_attribute_values = sa.Table(
    "product_attribute_values",
    metadata,
    _tenant(),
    sa.Column("product_id", sa.String(36), primary_key=True),
    sa.Column("dynamic_attribute_id", sa.String(36), primary_key=True),
    sa.Column("value", sa.Text),
    sa.Column("option_ids", sa.Text),  # JSON array of option ids
)

skus = sa.Table(
    "skus",
    metadata,
    _id(),
    _tenant(),
    sa.Column("number", sa.String(64), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    # Null on SKUs loaded before revision 0006 (demand planning needs no product); such a SKU is never visible
    # to an eCom store.
    _ref("product_id", nullable=True),
    sa.Column("gtin", sa.String(14)),
    _ref("product_color_id", nullable=True),
    _ref("size_id", nullable=True),
    _ref("unit_of_measure_id", nullable=True),
    _ref("vat_rate_id", nullable=True),
    sa.Column("published", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.UniqueConstraint("tenant_id", "number"),
    sa.Index(None, "tenant_id", "product_id"),
)

price_lists = sa.Table(
    "price_lists",
    metadata,
    _id(),
    _tenant(),
    sa.Column("code", sa.String(64), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.UniqueConstraint("tenant_id", "code"),
)

# Consumer prices including VAT, in the company's currency.
prices = sa.Table(
    "prices",
    metadata,
    _tenant(),
    sa.Column("price_list_id", sa.String(36), primary_key=True),
    sa.Column("sku_id", sa.String(36), primary_key=True),
    _decimal("price", nullable=False),
)

campaigns = sa.Table(
    "campaigns",
    metadata,
    _id(),
    _tenant(),
    _ref("company_id"),
    sa.Column("code", sa.String(64), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("campaign_type", sa.String(16), nullable=False),  # NORMAL or THREE_FOR_TWO
    sa.Column("valid_from", sa.Date, nullable=False),
    sa.Column("valid_to", sa.Date, nullable=False),
    sa.Column("released", sa.Boolean, nullable=False),
    _ref("loyalty_program_id", nullable=True),
    _instant("modified_time"),
    sa.UniqueConstraint("tenant_id", "code"),
)

campaign_skus = sa.Table(
    "campaign_skus",
    metadata,
    _tenant(),
    sa.Column("campaign_id", sa.String(36), primary_key=True),
    sa.Column("sku_id", sa.String(36), primary_key=True),
    _decimal("campaign_price", nullable=False),
    sa.Column("loyalty_membership_required", sa.Boolean, nullable=False),
)

# B2C customers belong to the tenant. E-mail (compared lower-cased, through email_key) and phone are each
# unique within it; NULLs do not collide. Callers choose customer ids, so the key is (tenant_id, id): a test
# tenant and its production tenant may hold the same customer under one id.
customers = sa.Table(
    "customers",
    metadata,
    sa.Column("id", sa.String(36), nullable=False),
    _tenant(),
    sa.Column("first_name", sa.String(200)),
    sa.Column("last_name", sa.String(200)),
    sa.Column("email", sa.String(320)),
    sa.Column("email_key", sa.String(320)),
    sa.Column("phone", sa.String(16)),
    sa.Column("birth_date", sa.Date),
    sa.Column("delivery_address", sa.Text),  # JSON object
    sa.Column("invoice_address", sa.Text),  # JSON object
    sa.Column("ext", sa.Text),  # JSON object, stored and echoed
    _instant("created_time"),
    _instant("modified_time"),
    sa.PrimaryKeyConstraint("tenant_id", "id"),
    sa.UniqueConstraint("tenant_id", "email_key"),
    sa.UniqueConstraint("tenant_id", "phone"),
)

customer_loyalty_memberships = sa.Table(
    "customer_loyalty_memberships",
    metadata,
    _tenant(),
    sa.Column("customer_id", sa.String(36), nullable=False),
    sa.Column("loyalty_program_id", sa.String(36), nullable=False),
    sa.Column("member_number", sa.String(64), nullable=False),
    sa.Column("member_since", sa.Date, nullable=False),
    sa.PrimaryKeyConstraint("tenant_id", "customer_id", "loyalty_program_id"),
)

# Change events for eCom stores, written in the transaction of the change (one row per eCom store that should
# hear of it) and delivered later by the events relay.
# Compared bytewise on PostgreSQL: an outbox row is written into three indexes keyed by these ids, and a collation's
# rules cost twice the work of a plain comparison (UUIDs, ASCII, sort the same either way).
_BYTEWISE_ID = sa.String(36).with_variant(sa.String(36, collation="C"), "postgresql")

event_outbox = sa.Table(
    "event_outbox",
    metadata,
    sa.Column("event_id", _BYTEWISE_ID, primary_key=True),  # UUIDv7: the message's eventId
    sa.Column("tenant_id", _BYTEWISE_ID, nullable=False),
    sa.Column("ecom_store_id", _BYTEWISE_ID, nullable=False),
    sa.Column("subject", sa.String(64), nullable=False),
    sa.Column("entity_id", sa.String(36)),  # null for schema events
    _instant("datetime"),
    sa.Column("metadata", sa.Text),  # JSON object of strings, or null
    _instant("published_time", nullable=True),  # sent to Kafka (the relay); unused without Kafka
    _instant("delivered_time", nullable=True),  # accepted by the eCom store's destination (the bridge)
    # Failed delivery attempts so far, the last failure, and when the bridge gave up (the dead letters).
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("last_error", sa.Text),
    # The last failure's answer in short ("410", "timeout", "entity not found"): what dead letters are counted by.
    sa.Column("last_answer", sa.String(64)),
    _instant("dead_letter_time", nullable=True),
)
# Every index costs each of trigger_events' 100,000 rows, so only what readers need, and on PostgreSQL partial
# indexes holding just the rows each reader looks for: the relay's unpublished rows, the bridge's undelivered rows
# per store (and the backlog count), the operators' dead letters per store. DuckDB's indexes serve point lookups
# only; it scans for the rest.
sa.Index("ix_event_outbox_unpublished", event_outbox.c.event_id,
         postgresql_where=event_outbox.c.published_time.is_(None)).ddl_if(dialect="postgresql")
sa.Index("ix_event_outbox_undelivered", event_outbox.c.ecom_store_id, event_outbox.c.event_id,
         postgresql_where=sa.and_(event_outbox.c.delivered_time.is_(None),
                                  event_outbox.c.dead_letter_time.is_(None))).ddl_if(dialect="postgresql")
sa.Index("ix_event_outbox_dead_letters", event_outbox.c.tenant_id, event_outbox.c.ecom_store_id,
         event_outbox.c.event_id,
         postgresql_where=event_outbox.c.dead_letter_time.is_not(None)).ddl_if(dialect="postgresql")

# How delivery to each eCom store's destination goes, for operators (admin API) and the backlog metric.
event_delivery_state = sa.Table(
    "event_delivery_state",
    metadata,
    _tenant(),
    sa.Column("ecom_store_id", sa.String(36), primary_key=True),
    sa.Column("last_delivered_event_id", sa.String(36)),
    _instant("last_delivered_time", nullable=True),
    sa.Column("consecutive_failures", sa.Integer, nullable=False, server_default="0"),
    sa.Column("last_error", sa.Text),
    _instant("last_failure_time", nullable=True),
    # The destination refused the credentials: retried only slowly until the back office fixes them.
    sa.Column("credentials_refused", sa.Boolean, nullable=False, server_default=sa.false()),
    # Entities (lanes) whose last attempt failed and that wait out a backoff, as of the bridge's last write.
    sa.Column("lanes_in_backoff", sa.Integer, nullable=False, server_default="0"),
    _instant("modified_time"),
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

# Signed-in sessions of the operator console (serving/console/). The cookie holds the session id; only its SHA-256
# is kept here, so a database dump cannot be turned back into a cookie. A table, so every API replica knows them.
console_sessions = sa.Table(
    "console_sessions",
    metadata,
    sa.Column("session_hash", sa.String(64), primary_key=True),
    _tenant(),
    _ref("client_id"),
    _instant("created_time"),
    _instant("expires_time"),
    sa.Index(None, "expires_time"),  # retention removes expired sessions by it
)

signing_keys = sa.Table(
    "signing_keys",
    metadata,
    sa.Column("kid", sa.String(64), primary_key=True),
    # The private JWK sealed by db/secrets.py; NULL only on a row from before revision 0004 not yet sealed.
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
    # One per day of the horizon, each in ten-thousandths as an 8-byte integer, one after another (db.held_quantities).
    sa.Column("quantities", sa.LargeBinary, nullable=False),
    _instant("generated_at"),
    _instant("modified_time"),
    sa.Column("batch_id", sa.String(36), nullable=False),
)
# Each batch purges the tenant's expired forecasts; PostgreSQL would otherwise scan every held row to find them.
# DuckDB finds them fast without it, and its indexes slow its bulk upserts down.
sa.Index("ix_sales_forecasts_tenant_id_horizon_end_date", sales_forecasts.c.tenant_id,
         sales_forecasts.c.horizon_end_date).ddl_if(dialect="postgresql")

# Sales orders of an eCom store. External ids are the web shop's, unique per eCom store (a retried creation
# meets them); `number` is the service's, unique per tenant. Amounts are the order's totals (ECOMMERCE.md
# "Amounts"); addresses are JSON text in the wire's camelCase shape. Not indexed on status: DuckDB rewrites
# indexed columns on update, and processing updates it.
orders = sa.Table(
    "orders",
    metadata,
    _id(),
    _tenant(),
    _ref("ecom_store_id"),
    sa.Column("number", sa.String(20), nullable=False),
    sa.Column("external_order_id", sa.String(100), nullable=False),
    sa.Column("external_order_number", sa.String(100), nullable=False),
    _ref("customer_id"),
    sa.Column("status", sa.String(24), nullable=False),  # RECEIVED, OPEN, PARTIALLY_DELIVERED, DELIVERED, CANCELLED
    _instant("order_date"),
    sa.Column("delivery_date", sa.Date, nullable=False),
    sa.Column("currency_iso_code", sa.String(3), nullable=False),
    sa.Column("delivery_address", sa.Text, nullable=False),
    sa.Column("invoice_address", sa.Text),
    sa.Column("freight", sa.Text),  # JSON object as sent, or null
    _decimal("freight_gross_amount"),
    _decimal("freight_vat_amount"),
    _decimal("gross_amount", nullable=False),
    _decimal("vat_amount", nullable=False),
    # Set when processing reserves the stock (null: RECEIVED, or the store has no serving warehouse).
    _ref("warehouse_id", nullable=True),
    _instant("modified_time"),
    sa.UniqueConstraint("tenant_id", "ecom_store_id", "external_order_id"),
    sa.UniqueConstraint("tenant_id", "ecom_store_id", "external_order_number"),
    sa.UniqueConstraint("tenant_id", "number"),
    sa.Index(None, "tenant_id", "customer_id"),
)
# The order processors' poll reads only RECEIVED orders: on PostgreSQL a partial index holds just those (see
# ix_batches_unfinished for why DuckDB goes without).
sa.Index("ix_orders_received", orders.c.order_date, orders.c.id,
         postgresql_where=orders.c.status == "RECEIVED").ddl_if(dialect="postgresql")

order_lines = sa.Table(
    "order_lines",
    metadata,
    _id(),
    _tenant(),
    _ref("order_id"),
    sa.Column("line_number", sa.Integer, nullable=False),
    _ref("sku_id"),
    sa.Column("sku_number", sa.String(64), nullable=False),
    sa.Column("product_name", sa.String(200), nullable=False),
    _decimal("quantity", nullable=False),
    _decimal("net_unit_price", nullable=False),
    _decimal("vat_rate", nullable=False),
    _decimal("net_unit_order_discount_amount"),
    sa.Column("campaign_code", sa.String(64)),
    _ref("campaign_id", nullable=True),
    sa.Column("price_type", sa.String(16), nullable=False),  # CAMPAIGN, REGULAR, LEGACY_DISCOUNT
    _decimal("gross_amount", nullable=False),
    _decimal("vat_amount", nullable=False),
    # What processing could reserve at the order's warehouse; the rest waits for stock (a backorder).
    _decimal("reserved_quantity", nullable=False),
    _decimal("delivered_quantity", nullable=False),
    _decimal("returned_quantity", nullable=False),
    # Units the back office cancelled before delivery (their reservation released).
    _decimal("cancelled_quantity", nullable=False, server_default="0"),
    sa.Index(None, "tenant_id", "order_id"),
)

# A RECEIVED order whose opening failed: how often, the last error, and when it is tried again (db/order_processing.py).
# retry_at is null once the order has failed PIA_ORDER_MAX_ATTEMPTS times: it is parked until an operator retries it.
# The row goes when the order opens.
order_processing_failures = sa.Table(
    "order_processing_failures",
    metadata,
    sa.Column("tenant_id", sa.String(36), primary_key=True),
    sa.Column("order_id", sa.String(36), primary_key=True),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("last_error", sa.Text, nullable=False),
    _instant("last_attempt_time"),
    _instant("retry_at", nullable=True),
)

# The last order number given out per tenant: the row lock (PostgreSQL) makes numbers unique and gapless.
order_numbers = sa.Table(
    "order_numbers",
    metadata,
    sa.Column("tenant_id", sa.String(36), primary_key=True),
    sa.Column("last_number", sa.BigInteger, nullable=False),
)

# Click and collect reservations (ECOMMERCE.md): the header is the parked cart, each line one SKU reserved at one
# location (the retail store itself, or a serving warehouse when the store lacked it).
click_and_collect_reservations = sa.Table(
    "click_and_collect_reservations",
    metadata,
    _id(),  # the parkedCartId
    _tenant(),
    _ref("ecom_store_id"),
    _ref("cart_id"),
    sa.Column("reservation_name", sa.String(200), nullable=False),
    _ref("retail_store_id"),
    _ref("customer_id", nullable=True),
    _instant("created_time"),
    # ACTIVE until collected (COLLECTED), cancelled by the store (CANCELLED) or not collected in time (EXPIRED).
    sa.Column("state", sa.String(16), nullable=False, server_default="ACTIVE"),
    _instant("ended_time", nullable=True),
)
# The expiry reads a tenant's ACTIVE carts, oldest first: on PostgreSQL a partial index holds just those (see
# ix_batches_unfinished for why DuckDB goes without).
sa.Index("ix_click_and_collect_reservations_active", click_and_collect_reservations.c.tenant_id,
         click_and_collect_reservations.c.created_time,
         postgresql_where=click_and_collect_reservations.c.state == "ACTIVE").ddl_if(dialect="postgresql")

click_and_collect_lines = sa.Table(
    "click_and_collect_lines",
    metadata,
    _id(),  # the cartLineId
    _tenant(),
    _ref("reservation_id"),
    sa.Column("line_number", sa.Integer, nullable=False),  # 0-based, the request's order
    _ref("sku_id"),
    _decimal("quantity", nullable=False),
    _ref("location_id"),  # where the stock is reserved
    sa.Column("reserved_from_warehouse", sa.Boolean, nullable=False),
    sa.Index(None, "tenant_id", "reservation_id"),
)

# The documents of an order's fulfilment and returns (ECOMMERCE.md "Documents"), one table for every kind: CAPTURE,
# RECEIPT, INVOICE, SHIPMENT, RETURN_INVOICE, REFUND. Each kind uses the columns its record shows; the links name
# the document it follows (a receipt's capture, an invoice's receipt, a return invoice's invoice and refund).
# Documents are written once; only a capture's or refund's status, reported amount and completion change.
order_documents = sa.Table(
    "order_documents",
    metadata,
    _id(),
    _tenant(),
    _ref("order_id"),
    sa.Column("kind", sa.String(16), nullable=False),
    sa.Column("number", sa.String(20)),  # receipts, invoices, return invoices
    sa.Column("status", sa.String(16)),  # captures (PENDING, CONFIRMED, FAILED), refunds (OPEN, CONFIRMED, FAILED)
    _instant("created_time"),
    _instant("completed_time", nullable=True),
    _decimal("gross_amount", nullable=False),
    _decimal("vat_amount", nullable=False),
    # The order's freight travels with its first fulfilment, and back with the return that completes a full return.
    _decimal("freight_gross_amount"),
    _decimal("freight_vat_amount"),
    _decimal("reported_amount"),  # capturedAmount or refundedAmount, as reported
    _ref("capture_id", nullable=True),
    _ref("receipt_id", nullable=True),
    _ref("invoice_id", nullable=True),
    _ref("refund_id", nullable=True),
    _ref("return_invoice_id", nullable=True),
    sa.Column("carrier", sa.String(100)),
    sa.Column("tracking_number", sa.String(100)),
    sa.Index(None, "tenant_id", "order_id"),
)

order_document_lines = sa.Table(
    "order_document_lines",
    metadata,
    _tenant(),
    _ref("order_id"),
    sa.Column("document_id", sa.String(36), primary_key=True),
    sa.Column("order_line_id", sa.String(36), primary_key=True),
    _decimal("quantity", nullable=False),
    _decimal("gross_amount", nullable=False),
    _decimal("vat_amount", nullable=False),
    sa.Index(None, "tenant_id", "order_id"),
)

# The last number given out per tenant and series (RECEIPT, INVOICE, RETURN_INVOICE): gapless, like order numbers.
document_numbers = sa.Table(
    "document_numbers",
    metadata,
    sa.Column("tenant_id", sa.String(36), primary_key=True),
    sa.Column("series", sa.String(16), primary_key=True),
    sa.Column("last_number", sa.BigInteger, nullable=False),
)
