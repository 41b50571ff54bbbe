"""JSON responses with orjson, and store calls off the event loop."""

import asyncio
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import orjson
from quart import Response

P = ParamSpec("P")
T = TypeVar("T")


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status=status, headers=headers, content_type="application/json")


async def blocking(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run a store call (synchronous SQLAlchemy, argon2) in a worker thread."""
    return await asyncio.to_thread(function, *args, **kwargs)
