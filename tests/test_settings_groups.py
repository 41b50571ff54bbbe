"""Settings grouped per room: every PIA_* variable the flat Settings read keeps its name and meaning, read into
its group (`settings.bridge.max_attempts` is PIA_BRIDGE_MAX_ATTEMPTS)."""

import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, SecretStr, ValidationError

from settings import BridgeSettings, Settings, WorkerSettings

# Each variable the service has ever read (the flat Settings' fields, PIA_ and upper case), where Settings keeps it
# now, a valid value other than the default as the environment spells it, and that value as Settings holds it.
VARIABLES: list[tuple[str, str, str, Any]] = [
    ("PIA_DATA_DIR", "data_dir", "/srv/pia", Path("/srv/pia")),
    ("PIA_DATABASE_URL", "database_url", "postgresql+psycopg://pia@db/pia", "postgresql+psycopg://pia@db/pia"),
    ("PIA_STAGING_DIR", "staging_dir", "/srv/staged", Path("/srv/staged")),
    ("PIA_INPROCESS_WORKER", "inprocess_worker", "false", False),
    ("PIA_WORKER_POLL_SECONDS", "worker.poll_seconds", "2.5", 2.5),
    ("PIA_WORKER_MAX_ATTEMPTS", "worker.max_attempts", "7", 7),
    ("PIA_WORKER_RETRY_BASE_SECONDS", "worker.retry_base_seconds", "6.5", 6.5),
    ("PIA_WORKER_RETRY_MAX_SECONDS", "worker.retry_max_seconds", "301", 301.0),
    ("PIA_ORDER_MAX_ATTEMPTS", "order.max_attempts", "9", 9),
    ("PIA_ORDER_RETRY_BASE_SECONDS", "order.retry_base_seconds", "1.5", 1.5),
    ("PIA_ORDER_RETRY_MAX_SECONDS", "order.retry_max_seconds", "302", 302.0),
    ("PIA_WORKER_LOCK_TIMEOUT_SECONDS", "worker.lock_timeout_seconds", "31", 31.0),
    ("PIA_PIPELINE_STALE_SECONDS", "pipeline_stale_seconds", "61", 61.0),
    ("PIA_STAGED_RETENTION_DAYS", "staged_retention_days", "20", 20),
    ("PIA_BATCH_RETENTION_DAYS", "batch_retention_days", "91", 91),
    ("PIA_AUDIT_RETENTION_DAYS", "audit_retention_days", "92", 92),
    ("PIA_DELIVERED_EVENT_RETENTION_DAYS", "delivered_event_retention_days", "8", 8),
    ("PIA_RETENTION_INTERVAL_SECONDS", "retention_interval_seconds", "60", 60.0),
    ("PIA_CLICK_AND_COLLECT_HOLD_HOURS", "click_and_collect_hold_hours", "24", 24.0),
    ("PIA_UPLOAD_PROCESSES", "upload_processes", "3", 3),
    ("PIA_MAX_CONCURRENT_UPLOADS", "max_concurrent_uploads", "5", 5),
    ("PIA_UPLOAD_WAIT_SECONDS", "upload_wait_seconds", "11", 11.0),
    ("PIA_ISSUER", "issuer", "https://pia.example", "https://pia.example"),
    ("PIA_TOKEN_LIFETIME_SECONDS", "token.lifetime_seconds", "600", 600),
    ("PIA_RATE_LIMIT_PER_MINUTE", "rate_limit.per_minute", "99", 99),
    ("PIA_RATE_LIMIT_STORAGE_URL", "rate_limit.storage_url", "redis://redis:6379", "redis://redis:6379"),
    ("PIA_TOKEN_ATTEMPTS_PER_MINUTE_PER_ADDRESS", "token.attempts_per_minute_per_address", "31", 31),
    ("PIA_TOKEN_ATTEMPTS_PER_MINUTE_PER_CLIENT", "token.attempts_per_minute_per_client", "11", 11),
    ("PIA_SECRET_CHECK_WORKERS", "secret_check.workers", "2", 2),
    ("PIA_SECRET_CHECK_MAX_PENDING", "secret_check.max_pending", "33", 33),
    ("PIA_SECRET_CHECK_CACHE_SECONDS", "secret_check.cache_seconds", "0", 0.0),
    ("PIA_SECRET_KEY", "secret_key", "key-one,key-two", SecretStr("key-one,key-two")),
    ("PIA_RATE_LIMIT_STORAGE_TIMEOUT_SECONDS", "rate_limit.storage_timeout_seconds", "0.25", 0.25),
    ("PIA_CLIENT_CACHE_SECONDS", "client_cache_seconds", "0", 0.0),
    ("PIA_CONSOLE_SESSION_SECONDS", "console_session_seconds", "3600", 3600),
    ("PIA_ADMIN_URL", "admin.url", "https://pia.example", "https://pia.example"),
    ("PIA_ADMIN_CLIENT_ID", "admin.client_id", "operator", "operator"),
    ("PIA_ADMIN_CLIENT_SECRET", "admin.client_secret", "hush", SecretStr("hush")),
    ("PIA_KAFKA_BOOTSTRAP_SERVERS", "kafka.bootstrap_servers", "kafka:9092", "kafka:9092"),
    ("PIA_KAFKA_TOPIC", "kafka.topic", "pia.other", "pia.other"),
    ("PIA_KAFKA_GROUP_ID", "kafka.group_id", "pia-other", "pia-other"),
    ("PIA_RELAY_POLL_SECONDS", "relay.poll_seconds", "0.5", 0.5),
    ("PIA_RELAY_BATCH_SIZE", "relay.batch_size", "100", 100),
    ("PIA_BRIDGE_MAX_ATTEMPTS", "bridge.max_attempts", "3", 3),
    ("PIA_BRIDGE_RETRY_BASE_SECONDS", "bridge.retry_base_seconds", "0.5", 0.5),
    ("PIA_BRIDGE_RETRY_MAX_SECONDS", "bridge.retry_max_seconds", "30", 30.0),
    ("PIA_BRIDGE_CREDENTIALS_RETRY_SECONDS", "bridge.credentials_retry_seconds", "60", 60.0),
    ("PIA_BRIDGE_BATCH_SIZE", "bridge.batch_size", "50", 50),
    ("PIA_BRIDGE_WEBHOOK_CONCURRENCY", "bridge.webhook_concurrency", "4", 4),
    ("PIA_BRIDGE_ATTEMPT_TIMEOUT_SECONDS", "bridge.attempt_timeout_seconds", "2.5", 2.5),
    ("PIA_BRIDGE_MAX_HELD_EVENTS", "bridge.max_held_events", "100", 100),
    ("PIA_BRIDGE_POLL_SECONDS", "bridge.poll_seconds", "0.2", 0.2),
    ("PIA_WORKER_METRICS_PORT", "worker.metrics_port", "9100", 9100),
    ("PIA_LOG_FORMAT", "log_format", "text", "text"),
    ("PIA_TRUSTED_PROXY_HOPS", "trusted_proxy_hops", "1", 1),
]
GROUPS = ["worker", "order", "token", "rate_limit", "secret_check", "admin", "kafka", "relay", "bridge"]


def at(settings: Settings, path: str) -> Any:
    value: Any = settings
    for name in path.split("."):
        value = getattr(value, name)
    return value


@pytest.fixture(autouse=True)
def no_pia_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the variables a test sets: none the machine running the tests has."""
    for name in os.environ:
        if name.upper().startswith("PIA_"):
            monkeypatch.delenv(name)


def test_every_variable_is_listed_once_and_every_setting_has_one() -> None:
    names = [name for name, *_ in VARIABLES]
    assert len(names) == len(set(names)) == 55
    groups = {name: field for name, field in Settings.model_fields.items() if name in GROUPS}
    assert set(groups) == set(GROUPS)
    paths = {f"{group}.{name}" for group, field in groups.items() for name in field.annotation.model_fields}
    paths |= set(Settings.model_fields) - set(GROUPS)
    assert paths == {path for _, path, *_ in VARIABLES}


@pytest.mark.parametrize(("variable", "path", "spelled", "value"), VARIABLES, ids=[name for name, *_ in VARIABLES])
def test_each_variable_reaches_its_setting(monkeypatch: pytest.MonkeyPatch, variable: str, path: str, spelled: str,
                                           value: Any) -> None:
    assert at(Settings(), path) != value  # not the default, so the variable is what set it
    monkeypatch.setenv(variable, spelled)
    assert at(Settings(), path) == value


def test_all_variables_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable, _, spelled, _ in VARIABLES:
        monkeypatch.setenv(variable, spelled)
    settings = Settings()
    assert [at(settings, path) for _, path, *_ in VARIABLES] == [value for *_, value in VARIABLES]


@pytest.mark.parametrize("group", GROUPS)
def test_groups_are_frozen(group: str) -> None:
    settings = Settings()
    part = getattr(settings, group)
    assert isinstance(part, BaseModel)
    name = next(iter(type(part).model_fields))
    with pytest.raises(ValidationError, match="frozen"):
        setattr(part, name, getattr(part, name))
    with pytest.raises(ValidationError, match="frozen"):
        setattr(settings, group, part)


def test_a_bad_value_in_a_group_names_the_group_and_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIA_BRIDGE_MAX_ATTEMPTS", "0")
    with pytest.raises(ValidationError) as raised:
        Settings()
    assert raised.value.title == "BridgeSettings"
    assert [error["loc"] for error in raised.value.errors()] == [("max_attempts",)]


def test_a_bad_value_at_the_top_level_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIA_UPLOAD_PROCESSES", "-1")
    with pytest.raises(ValidationError) as raised:
        Settings()
    assert raised.value.title == "Settings"
    assert [error["loc"] for error in raised.value.errors()] == [("upload_processes",)]


@pytest.mark.parametrize("group", GROUPS)
def test_a_variable_named_like_a_group_is_nobodys(monkeypatch: pytest.MonkeyPatch, group: str) -> None:
    """Settings reads no PIA_<GROUP> (JSON or not) for a group: the group reads its own PIA_<GROUP>_* variables."""
    monkeypatch.setenv(f"PIA_{group.upper()}", "not json")
    assert getattr(Settings(), group) == getattr(Settings.model_construct(), group)
    monkeypatch.setenv(f"PIA_{group.upper()}", "{}")
    assert getattr(Settings(), group) == getattr(Settings.model_construct(), group)
    monkeypatch.setenv("PIA_BRIDGE", '{"max_attempts": 2}')
    monkeypatch.setenv("PIA_BRIDGE_MAX_ATTEMPTS", "3")
    assert Settings().bridge.max_attempts == 3


def test_a_group_written_out_reads_the_rest_of_its_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIA_WORKER_MAX_ATTEMPTS", "7")
    settings = Settings(worker=WorkerSettings(poll_seconds=0.2))
    assert (settings.worker.poll_seconds, settings.worker.max_attempts) == (0.2, 7)


def test_with_changes_changes_only_what_it_names() -> None:
    settings = Settings()
    changed = settings.with_changes(data_dir=Path("/elsewhere"), bridge={"max_attempts": 2},
                                    worker=WorkerSettings(poll_seconds=0.5))
    assert changed.data_dir == Path("/elsewhere")
    assert changed.bridge == BridgeSettings(max_attempts=2) and changed.worker.poll_seconds == 0.5
    assert settings.bridge.max_attempts == 8 and settings.data_dir == Path("pia-data")
    assert changed.order is settings.order


def test_a_copy_resolves_its_own_database() -> None:
    embedded = Settings(data_dir=Path("/first"))
    assert embedded.resolved_database_url == "duckdb:////first/pia.duckdb"  # read before copying
    assert embedded.with_changes(data_dir=Path("/second")).resolved_database_url == "duckdb:////second/pia.duckdb"
    moved = embedded.with_changes(database_url="postgresql+psycopg://db/pia")
    assert moved.resolved_database_url == "postgresql+psycopg://db/pia" and not moved.is_embedded


def test_batch_rows_must_outlive_staged_files(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings(staged_retention_days=30, batch_retention_days=30).batch_retention_days == 30
    with pytest.raises(ValidationError, match="PIA_BATCH_RETENTION_DAYS must be at least PIA_STAGED_RETENTION_DAYS"):
        Settings(staged_retention_days=30, batch_retention_days=7)
    monkeypatch.setenv("PIA_STAGED_RETENTION_DAYS", "100")
    with pytest.raises(ValidationError, match="PIA_BATCH_RETENTION_DAYS must be at least PIA_STAGED_RETENTION_DAYS"):
        Settings()
