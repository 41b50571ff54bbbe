"""The one place configuration is read from the environment (`PIA_*` variables).

`Settings` holds what concerns the whole service; each room with several settings of its own has them in a group,
a `BaseSettings` of its own reading its own prefix: `settings.bridge.max_attempts` is PIA_BRIDGE_MAX_ATTEMPTS,
`settings.worker.poll_seconds` PIA_WORKER_POLL_SECONDS. The variables' names are the ones they always were.

A group reads its variables when it is made: by default when `Settings()` is, or where it is written out
(`Settings(worker=WorkerSettings(poll_seconds=0.2))` reads the rest of PIA_WORKER_* too). A plain dict given for a
group is validated as it is, without the environment.
"""

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt, SecretStr, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from contracts.limits import RATE_LIMIT_PER_MINUTE


class WorkerSettings(BaseSettings):
    """The pipeline workers (PIA_WORKER_*); `pia worker` processes, or the one inside `pia serve`."""

    model_config = SettingsConfigDict(env_prefix="PIA_WORKER_", frozen=True)

    # How often an idle pipeline worker looks for new batches (uploads in the same process wake it at once).
    poll_seconds: float = 1.0
    # A batch whose processing fails for a transient reason (connection lost, lock timeout, serialization
    # failure) is tried again after an exponential backoff with jitter, at most this many times in all.
    max_attempts: int = 5
    retry_base_seconds: float = 5.0
    retry_max_seconds: float = 300.0
    # PostgreSQL: how long applying a batch waits for a row or table lock before it counts as a transient failure.
    lock_timeout_seconds: float = 30.0
    # `pia worker` serves its metrics (process, batch timings) for Prometheus on this port; 0: none.
    metrics_port: int = Field(default=0, ge=0, le=65535)


class OrderSettings(BaseSettings):
    """The order processor (PIA_ORDER_*): an order that fails to open is tried again after an exponential backoff
    with jitter; after max_attempts failures it stays RECEIVED, parked for an operator
    (`pia admin order list|retry`)."""

    model_config = SettingsConfigDict(env_prefix="PIA_ORDER_", frozen=True)

    max_attempts: PositiveInt = 5
    retry_base_seconds: NonNegativeFloat = 5.0
    retry_max_seconds: NonNegativeFloat = 300.0


class TokenSettings(BaseSettings):
    """Access tokens (PIA_TOKEN_*): how long they last, and how often they may be asked for."""

    model_config = SettingsConfigDict(env_prefix="PIA_TOKEN_", frozen=True)

    lifetime_seconds: int = 3600
    # Token requests whose client secret needs an argon2 check (any not answered from the secret check's cache),
    # per rolling minute: from one source address, and for one client id from one source address.
    attempts_per_minute_per_address: PositiveInt = 30
    attempts_per_minute_per_client: PositiveInt = 10


class RateLimitSettings(BaseSettings):
    """Request rate limits (PIA_RATE_LIMIT_*)."""

    model_config = SettingsConfigDict(env_prefix="PIA_RATE_LIMIT_", frozen=True)

    # Requests per minute of a client without a limit of its own.
    per_minute: int = RATE_LIMIT_PER_MINUTE
    # limits storage URI: memory:// in one process, redis://host:6379 across API replicas.
    storage_url: str = "memory://"
    # Bound on each connect and each command to a networked rate-limit store; past it the request is let
    # through uncounted (fail open) rather than delayed further.
    storage_timeout_seconds: float = 0.5


class SecretCheckSettings(BaseSettings):
    """Argon2 checks of client secrets (PIA_SECRET_CHECK_*): they run on threads of their own; beyond max_pending
    waiting or running, token requests are refused with 429 at once."""

    model_config = SettingsConfigDict(env_prefix="PIA_SECRET_CHECK_", frozen=True)

    workers: PositiveInt = 1
    max_pending: PositiveInt = 32
    # How long a process remembers a client secret it has checked, so repeat token requests skip argon2.
    cache_seconds: NonNegativeFloat = 300.0


class AdminSettings(BaseSettings):
    """`pia admin` (PIA_ADMIN_*): its commands go through this server's admin API when url is set (or given as
    --url), authenticating as this admin-scope client; without it they work on the database directly."""

    model_config = SettingsConfigDict(env_prefix="PIA_ADMIN_", frozen=True)

    url: str = ""
    client_id: str = ""
    client_secret: SecretStr = SecretStr("")


class KafkaSettings(BaseSettings):
    """Change events through Kafka (PIA_KAFKA_*)."""

    model_config = SettingsConfigDict(env_prefix="PIA_KAFKA_", frozen=True)

    # Kafka's bootstrap servers (host:port, comma-separated); empty is the embedded default, where the bridge
    # inside `pia serve` reads the outbox directly and no broker is needed.
    bootstrap_servers: str = ""
    topic: str = "pia.events"
    group_id: str = "pia-bridge"


class RelaySettings(BaseSettings):
    """The relay, outbox → Kafka (PIA_RELAY_*)."""

    model_config = SettingsConfigDict(env_prefix="PIA_RELAY_", frozen=True)

    # The relay wakes on PostgreSQL's NOTIFY; this slow poll is the safety net (and DuckDB's way).
    poll_seconds: float = 5.0
    # Rows a relay round claims, sends and commits at once: larger rounds spread each round's database work and
    # its wait for the acknowledgements over more rows.
    batch_size: PositiveInt = 2000


class BridgeSettings(BaseSettings):
    """The bridge, → each eCom store's destination (PIA_BRIDGE_*)."""

    model_config = SettingsConfigDict(env_prefix="PIA_BRIDGE_", frozen=True)

    # A failing delivery is tried again after an exponential backoff with jitter, at most max_attempts times, then
    # the event goes to the dead letters. A destination refusing its credentials is tried again only every
    # credentials_retry_seconds.
    max_attempts: PositiveInt = 8
    retry_base_seconds: float = 1.0
    retry_max_seconds: float = 300.0
    credentials_retry_seconds: float = 300.0
    # Events one attempt (of a Kafka lane, or a store's outbox) sends before marking them delivered in one write:
    # larger attempts cost the bridge less CPU per event; after a crash up to this many per lane may go twice.
    batch_size: PositiveInt = 500
    # Attempts in flight at once to one eCom store's webhook (both modes), each carrying one entity's events in
    # order, so an entity being retried or a POST hanging holds up only that entity. Other destinations take one
    # attempt at a time (each a batch of several entities' events).
    webhook_concurrency: PositiveInt = 16
    # One attempt's bound (each webhook POST, each Service Bus send): a receiver that stops answering fails it.
    attempt_timeout_seconds: PositiveFloat = 10.0
    # Events of one eCom store the bridge holds at once (read, not yet settled): beyond it a Kafka bridge pauses the
    # partitions feeding that store (resumed at half), the outbox bridge reads no further, so a backlog of any size
    # stays in Kafka or the database, not in the bridge's memory.
    max_held_events: PositiveInt = 10_000
    poll_seconds: float = 1.0


class _TopLevelEnvSource(EnvSettingsSource):
    """The environment as `Settings` reads it: without its groups, which read their own PIA_<GROUP>_* variables
    when they are made, so a variable named like a group (PIA_BRIDGE, say) is nobody's, not JSON for the group."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseSettings):
            return None, field_name, False
        return super().get_field_value(field, field_name)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PIA_", frozen=True)

    data_dir: Path = Path("pia-data")
    # Empty means the embedded DuckDB file under data_dir.
    database_url: str = ""
    # Where accepted batches are staged as Parquet; a volume every worker shares in production.
    staging_dir: Path | None = None
    # Run the pipeline worker inside `pia serve`; unset means yes for the embedded DuckDB file, no for
    # PostgreSQL, where `pia worker` processes do it.
    inprocess_worker: bool | None = None
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    order: OrderSettings = Field(default_factory=OrderSettings)
    # /healthcheck calls the pipeline stalled when work waits and no worker has beaten for this long.
    pipeline_stale_seconds: float = 60.0
    # Retention, enforced by the workers every retention_interval_seconds. Staged files of unfinished batches
    # are always kept; batch rows answer retried uploads with 200, so they outlive the files.
    staged_retention_days: int = 30
    batch_retention_days: int = 90
    audit_retention_days: int = 90
    # Change events are kept this long after delivery (to look into a delivery); dead letters until replayed.
    delivered_event_retention_days: int = 7
    retention_interval_seconds: float = 3600.0
    # A click and collect cart not collected within this many hours after it was made is released by the workers.
    click_and_collect_hold_hours: float = Field(default=72.0, gt=0)
    # Worker processes that decompress, parse, check and stage uploads, off the API's event loop. 0 runs that
    # work in threads of the API process instead, where a large batch stalls the loop (a benchmark baseline).
    upload_processes: int = Field(default=2, ge=0)
    # Uploads being checked (or waiting for a worker process) at once; one more waits for a place up to
    # upload_wait_seconds, then gets 503 with Retry-After.
    max_concurrent_uploads: int = Field(default=4, ge=1)
    upload_wait_seconds: float = Field(default=10.0, ge=0)
    # The public base address, used as token issuer; empty means http://HOST:PORT of `pia serve`.
    issuer: str = ""
    token: TokenSettings = Field(default_factory=TokenSettings)
    rate_limit: RateLimitSettings = Field(default_factory=RateLimitSettings)
    secret_check: SecretCheckSettings = Field(default_factory=SecretCheckSettings)
    # Fernet keys sealing secrets at rest, comma-separated: the first seals, all open (see db/secrets.py).
    # Empty means a key generated into data_dir for the embedded default; PostgreSQL requires it.
    secret_key: SecretStr = SecretStr("")
    # How long a process trusts its copy of an API client (enabled, rate limit) before reading it again:
    # disabling a client takes effect within this time. 0 reads it on every request.
    client_cache_seconds: float = 2.0
    # How long a sign-in to the operator console (/console/) lasts; the session ends sooner at sign-out.
    console_session_seconds: PositiveInt = 8 * 3600
    admin: AdminSettings = Field(default_factory=AdminSettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    relay: RelaySettings = Field(default_factory=RelaySettings)
    bridge: BridgeSettings = Field(default_factory=BridgeSettings)
    # Log lines: one JSON object each, or readable text. Unset: JSON, but text for `pia demo` on a terminal.
    log_format: Literal["json", "text"] | None = None
    # Reverse proxies in front of the API that append the caller's address to X-Forwarded-For: the address that
    # many hops from the right is the client's (token-attempt budgets, logs). 0 trusts no header: the socket peer.
    trusted_proxy_hops: NonNegativeInt = 0

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, _TopLevelEnvSource(settings_cls), dotenv_settings, file_secret_settings

    @model_validator(mode="after")
    def _batch_rows_outlive_staged_files(self) -> "Settings":
        if self.batch_retention_days < self.staged_retention_days:
            raise ValueError("PIA_BATCH_RETENTION_DAYS must be at least PIA_STAGED_RETENTION_DAYS: a batch row is "
                             "what tells a retried upload from a new one, and what a rerun reads its file by")
        return self

    def with_changes(self, **changes: Any) -> "Settings":
        """A copy with the given settings changed, a group's as a dict of its own:
        `settings.with_changes(data_dir=folder, bridge={"max_attempts": 2})` changes bridge.max_attempts and keeps
        the bridge's other settings. Like `model_copy(update=...)`, nothing is validated (tests, benchmarks)."""
        update = {name: getattr(self, name).model_copy(update=value)
                  if isinstance(value, dict) and isinstance(getattr(self, name), BaseSettings) else value
                  for name, value in changes.items()}
        return self.model_copy(update=update)

    @property  # not cached: a copy (with_changes, model_copy) would carry the first one's value over
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"duckdb:///{(self.data_dir / 'pia.duckdb').resolve()}"

    @property
    def resolved_staging_dir(self) -> Path:
        return self.staging_dir or self.data_dir / "staged"

    @property
    def is_embedded(self) -> bool:
        return self.resolved_database_url.startswith("duckdb")

    @property
    def runs_inprocess_worker(self) -> bool:
        return self.is_embedded if self.inprocess_worker is None else self.inprocess_worker
