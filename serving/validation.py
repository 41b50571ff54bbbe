"""E-commerce and admin requests: the checks every route of those scopes gets, and bodies parsed with orjson and
checked against the pydantic model the OpenAPI document shows.

Every problem comes back at once as 400 INVALID_REQUEST, each with its path in the body (`lineItems[0].skuId`), a
stable code and a message; a body that is not JSON at all is 400 BAD_REQUEST. Unknown fields are ignored, as
SPEC.md's conventions say. A model's own checks name their code by raising `PydanticCustomError("CODE", msg)`.
Before any route runs (`check_request`), a path parameter holding a control character is 400 and a JSON body not
sent as `application/json` is 415, so no route can forget either.
"""

from collections.abc import Sequence
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from quart import current_app, request
from quart_schema.validation import QUART_SCHEMA_REQUEST_ATTRIBUTE

from contracts.errors import BadRequest, InvalidRequest, UnsupportedMediaType
from contracts.formats import control_problem, json_media_type_problem

M = TypeVar("M", bound=BaseModel)

# pydantic's error types → our stable codes; custom errors carry their own upper-case code.
_CODES = {"missing": "REQUIRED", "extra_forbidden": "UNKNOWN_FIELD"}
# A request model with this class attribute set takes no body at all as well as a JSON one (the OpenAPI document
# shows its body as optional).
OPTIONAL_BODY = "optional_body"
_WRITES = frozenset({"POST", "PUT", "PATCH"})


def json_path(location: Sequence[str | int]) -> str:
    text = ""
    for part in location:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text or "$"


def _is_type_error(kind: str) -> bool:
    """pydantic's "wrong kind of value" errors (`int_parsing`, `string_type`, `model_type`, ...); the others say the
    value has the right type but breaks a constraint (`greater_than`, `too_long`, `string_pattern_mismatch`, ...)."""
    return kind.endswith(("_type", "_parsing")) or kind in ("is_instance_of", "json_invalid")


def problems(error: ValidationError) -> list[dict[str, str]]:
    found = []
    for item in error.errors(include_url=False, include_context=False, include_input=False):
        kind = item["type"]
        code = _CODES.get(kind) or (kind if kind.isupper() else "INVALID_TYPE" if _is_type_error(kind)
                                    else "INVALID_VALUE")
        found.append({"path": json_path(item["loc"]), "code": code, "message": item["msg"]})
    return found


def validated(model: type[M], data: Any, more: Sequence[dict[str, str]] = ()) -> M:
    """The model of the data; its problems and `more` (a caller's own structural checks) in one 400."""
    try:
        body = model.model_validate(data)
    except ValidationError as error:
        raise InvalidRequest(problems(error) + list(more)) from None
    if more:
        raise InvalidRequest(list(more))
    return body


def parse_json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise BadRequest(f"The body is not valid JSON: {error}.") from None


async def json_body(model: type[M]) -> M:
    return validated(model, parse_json(await request.get_data()))


def declared_body(view: Any) -> type[BaseModel] | None:
    """The request body model a route declares with quart-schema's `document_request`, if any."""
    declared = getattr(view, QUART_SCHEMA_REQUEST_ATTRIBUTE, None)
    return declared[0] if declared else None


async def check_request() -> None:
    """What every route of a scope checks before it runs: 400 INVALID_REQUEST for a path parameter with a control
    character (PostgreSQL cannot even compare a NUL), naming the parameter; 415 UNSUPPORTED_MEDIA_TYPE for a body
    of a route that takes JSON sent as anything but `application/json` (a route whose body is optional may also
    get none at all)."""
    problems = [{"path": name, "code": "INVALID_PATH_PARAMETER", "message": f"The path parameter {problem}"}
                for name, value in (request.view_args or {}).items()
                if isinstance(value, str) and (problem := control_problem(value))]
    if problems:
        raise InvalidRequest(problems)
    if request.method not in _WRITES:  # first: most requests are reads, and finding the view's model costs more
        return
    model = declared_body(current_app.view_functions.get(request.endpoint or ""))
    if model is None:
        return
    if getattr(model, OPTIONAL_BODY, False) and not await request.get_data():
        return
    if problem := json_media_type_problem(request.headers.get("Content-Type")):
        raise UnsupportedMediaType(problem)
