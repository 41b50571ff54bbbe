"""JSON in and out with orjson, and store calls off the event loop."""

import asyncio
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import orjson
from quart import Response, request

from contracts.errors import BadRequest

P = ParamSpec("P")
T = TypeVar("T")


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status=status, headers=headers, content_type="application/json")


def parse_json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise BadRequest(f"The body is not valid JSON: {error}.") from None


async def read_json_object() -> dict[str, Any]:
    body = parse_json(await request.get_data(cache=False))
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object.")
    return body


async def blocking(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run a store call (synchronous SQLAlchemy, argon2) in a worker thread."""
    return await asyncio.to_thread(function, *args, **kwargs)
