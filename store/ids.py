"""Identifiers and instants as the contract wants them: UUIDv7 strings and aware UTC datetimes."""

from datetime import UTC, datetime

import uuid_utils


def new_id() -> str:
    return str(uuid_utils.uuid7())


def utc_now() -> datetime:
    return datetime.now(UTC)
