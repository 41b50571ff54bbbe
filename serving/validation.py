"""Bodies checked against the pydantic model the OpenAPI document shows, parsed with orjson.

Every problem comes back at once as 400 INVALID_REQUEST, each with its path in the body (`lineItems[0].skuId`), a
stable code and a message; a body that is not JSON at all is 400 BAD_REQUEST. Unknown fields are ignored, as
SPEC.md's conventions say. A model's own checks name their code by raising `PydanticCustomError("CODE", msg)`.
Nothing here needs a request: `pia admin` commands check their input with it without loading Quart (the hooks
every route gets are in serving/request_checks.py).
"""

from collections.abc import Sequence
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError

from contracts.errors import BadRequest, InvalidRequest

M = TypeVar("M", bound=BaseModel)

# pydantic's error types → our stable codes; custom errors carry their own upper-case code.
_CODES = {"missing": "REQUIRED", "extra_forbidden": "UNKNOWN_FIELD"}


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
