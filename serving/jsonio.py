"""JSON responses with orjson."""

from typing import Any

import orjson
from quart import Response


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(body), status=status, headers=headers, content_type="application/json")
