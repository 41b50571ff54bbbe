"""The checks every e-commerce and admin route gets before it runs (`check_request`), and a route's JSON body.

A path parameter holding a control character is 400 and a JSON body not sent as `application/json` is 415, so no
route can forget either; the body itself is checked by serving/validation.py.
"""

from typing import Any, TypeVar

from pydantic import BaseModel
from quart import Request, current_app, request
from quart_schema.validation import QUART_SCHEMA_REQUEST_ATTRIBUTE

from contracts.errors import InvalidRequest, UnsupportedMediaType
from contracts.formats import control_problem, json_media_type_problem
from serving.validation import parse_json, validated

M = TypeVar("M", bound=BaseModel)

# A request model with this class attribute set takes no body at all as well as a JSON one (the OpenAPI document
# shows its body as optional).
OPTIONAL_BODY = "optional_body"
_WRITES = frozenset({"POST", "PUT", "PATCH"})


async def json_body(model: type[M]) -> M:
    return validated(model, parse_json(await request.get_data()))


def declared_body(view: Any) -> type[BaseModel] | None:
    """The request body model a route declares with quart-schema's `document_request`, if any."""
    declared = getattr(view, QUART_SCHEMA_REQUEST_ATTRIBUTE, None)
    return declared[0] if declared else None


async def check_request(current: Request) -> None:
    """What every route of a scope checks before it runs: 400 INVALID_REQUEST for a path parameter with a control
    character (PostgreSQL cannot even compare a NUL), naming the parameter; 415 UNSUPPORTED_MEDIA_TYPE for a body
    of a route that takes JSON sent as anything but `application/json` (a route whose body is optional may also
    get none at all). `current` is the request itself, which the caller has looked up (a proxy lookup is 1–2 µs)."""
    problems = [{"path": name, "code": "INVALID_PATH_PARAMETER", "message": f"The path parameter {problem}"}
                for name, value in (current.view_args or {}).items()
                if isinstance(value, str) and (problem := control_problem(value))]
    if problems:
        raise InvalidRequest(problems)
    if current.method not in _WRITES:  # first: most requests are reads, and finding the view's model costs more
        return
    model = declared_body(current_app.view_functions.get(current.endpoint or ""))
    if model is None:
        return
    if getattr(model, OPTIONAL_BODY, False) and not await current.get_data():
        return
    if problem := json_media_type_problem(current.headers.get("Content-Type")):
        raise UnsupportedMediaType(problem)
