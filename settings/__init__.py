"""The one place configuration is read from the environment (`PIA_*` variables)."""

from functools import cached_property
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from contracts.limits import RATE_LIMIT_PER_MINUTE


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
    # How often an idle pipeline worker looks for new batches (uploads in the same process wake it at once).
    worker_poll_seconds: float = 1.0
    # Worker processes that decompress, parse, check and stage uploads, off the API's event loop. 0 runs that
    # work in threads of the API process instead, where a large batch stalls the loop (a benchmark baseline).
    upload_processes: int = Field(default=2, ge=0)
    # Uploads being checked (or waiting for a worker process) at once; one more waits for a place up to
    # upload_wait_seconds, then gets 503 with Retry-After.
    max_concurrent_uploads: int = Field(default=4, ge=1)
    upload_wait_seconds: float = Field(default=10.0, ge=0)
    # The public base address, used as token issuer; empty means http://HOST:PORT of `pia serve`.
    issuer: str = ""
    token_lifetime_seconds: int = 3600
    rate_limit_per_minute: int = RATE_LIMIT_PER_MINUTE
    # limits storage URI: memory:// in one process, redis://host:6379 across API replicas.
    rate_limit_storage_url: str = "memory://"
    # When set, tests that need an external service fail instead of skipping.
    require_services: bool = False
    # Tests create (and drop) a fresh database per session through this server.
    test_postgres_url: str = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
    # The shared rate-limit store the tests try across two limiter instances.
    test_redis_url: str = "redis://127.0.0.1:6379"

    @cached_property
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
