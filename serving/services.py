"""What the routes share: the store engine, the token authority, the rate limiter, the audit writer, the metrics,
the settings."""

from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from quart import current_app

from db.audit import AuditWriter
from serving.authentication import Authenticator
from serving.metrics import ServerMetrics
from serving.order_groups import OrderGroups
from serving.ratelimit import RateLimiter
from serving.secret_verifier import SecretVerifier
from serving.token_attempts import TokenAttemptLimits
from serving.tokens import TokenAuthority
from serving.uploads import UploadWork
from settings import Settings


@dataclass(frozen=True)
class Services:
    settings: Settings
    engine: sa.Engine
    tokens: TokenAuthority
    limiter: RateLimiter
    # The token endpoint's guards: argon2 checks on their own threads, and budgets for attempts needing one.
    secret_verifier: SecretVerifier
    token_attempts: TokenAttemptLimits
    authenticator: Authenticator
    audit: AuditWriter
    uploads: UploadWork
    metrics: ServerMetrics
    # Order creations, written in groups.
    orders: OrderGroups
    # Tells the in-process pipeline worker a batch is waiting; a no-op when separate workers poll.
    wake_pipeline: Callable[[], None]
    # Tells the order processor of this process a new order is waiting.
    wake_orders: Callable[[], None] = lambda: None


def services() -> Services:
    return current_app.extensions["pia"]
