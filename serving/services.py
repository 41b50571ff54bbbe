"""What the routes share: the store engine, the token authority, the rate limiter, the settings."""

from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from quart import current_app

from serving.ratelimit import RateLimiter
from serving.tokens import TokenAuthority
from serving.uploads import UploadWork
from settings import Settings


@dataclass(frozen=True)
class Services:
    settings: Settings
    engine: sa.Engine
    tokens: TokenAuthority
    limiter: RateLimiter
    uploads: UploadWork
    # Tells the in-process pipeline worker a batch is waiting; a no-op when separate workers poll.
    wake_pipeline: Callable[[], None]


def services() -> Services:
    return current_app.extensions["pia"]
