"""Building blocks of the typed models that document (and, for requests, check) the e-commerce, loyalty and admin
shapes. Each area keeps its models in its own module (`contracts/catalogue.py`, `contracts/customers.py`, ...);
field names are the wire names (camelCase), so a model reads like the JSON it describes.

Responses are rendered with orjson from plain dicts and only *documented* by these models (quart-schema's
`document_response`), so reads pay nothing for validation; the tests check real responses against the generated
OpenAPI document.
"""

import uuid
from collections.abc import Callable
from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic_core import PydanticCustomError, core_schema

from contracts.formats import TEXT, TextFormat, control_problem, free_json_problem
from contracts.limits import MAX_DECIMAL_PLACES, MAX_FREE_JSON_BYTES, MAX_FREE_JSON_DEPTH

T = TypeVar("T")


class refusing:  # noqa: N801 (used like the validators it stands beside: `Annotated[str, refusing(...)]`)
    """A check of a string a request sends: refused with `code` unless `allowed` matches it whole, the message
    `what` followed by `problem(text)` (what is wrong); the published schema states `allowed` as its pattern, so a
    generated client knows the rule too."""

    def __init__(self, code: str, what: str, problem: Callable[[str], str | None] = control_problem,
                 allowed: TextFormat = TEXT) -> None:
        self.code, self.what, self.problem, self.allowed = code, what, problem, allowed

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        def check(value: Any) -> Any:
            if isinstance(value, str) and not self.allowed.matches(value):
                found = self.problem(value) or "is not allowed."
                raise PydanticCustomError(self.code, "{problem}", {"problem": f"{self.what} {found}"})
            return value

        return core_schema.no_info_before_validator_function(check, handler(source))

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        return {**handler(schema), "pattern": self.allowed.json_schema}


# A decimal as returned: a canonical string ("12", "0.5", "-3.25").
DecimalString = Annotated[str, Field(pattern=r"^-?[0-9]+(\.[0-9]+)?$", examples=["12.5"])]
# An instant in UTC with offset, and a calendar day.
Instant = Annotated[str, Field(json_schema_extra={"format": "date-time"}, examples=["2026-11-21T02:00:00Z"])]
Day = Annotated[str, Field(json_schema_extra={"format": "date"}, examples=["2026-11-21"])]
# An id the service gave out; one sent may be anything a lookup can take (no control characters: INVALID_ID).
Id = Annotated[str, Field(description="UUIDv7", examples=["01a20a4f-c35c-742a-a143-6c0de849e123"]),
               refusing("INVALID_ID", "The id")]

# An id a request names that the server checks to be a UUID (in any letter case) before it looks it up.
UUID = TextFormat("[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _canonical_uuid(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    if not UUID.matches(value):
        raise PydanticCustomError("INVALID_ID", "Must be a UUID, such as 01a20a4f-c35c-742a-a143-6c0de849e123.")
    return str(uuid.UUID(value))


# An id that must be a UUID where it is sent (INVALID_ID), passed on in its canonical lower-case form.
Uuid = Annotated[str, Field(description="UUID", json_schema_extra={"format": "uuid", "pattern": UUID.json_schema},
                            examples=["01a20a4f-c35c-742a-a143-6c0de849e123"]), BeforeValidator(_canonical_uuid)]


def _bounded_json(value: dict[str, Any]) -> dict[str, Any]:
    if problem := free_json_problem(value):
        code, message = problem
        raise PydanticCustomError(code, "{problem}", {"problem": f"The object {message}"})
    return value


# A JSON object a client stores and gets back, never interpreted: bounded in depth and size (JSON_TOO_DEEP,
# JSON_TOO_LARGE) so every answer that carries it can be written.
FreeJson = Annotated[dict[str, Any], AfterValidator(_bounded_json), Field(
    description=f"Any JSON object, nested at most {MAX_FREE_JSON_DEPTH} levels deep and at most "
                f"{MAX_FREE_JSON_BYTES} bytes long as compact JSON.")]


def sent_decimal(string: str, examples: list[str], **number: Any) -> WithJsonSchema:
    """The schema of a decimal a client sends (SPEC.md: a JSON number or a string) with at most 4 places: the
    number with its bounds (`number`, JSON Schema keywords), the string as `string` (an unanchored pattern) says.
    The string form states the bounds as digits, which may be a little narrower than the numbers allowed."""
    return WithJsonSchema({"anyOf": [{"type": "number", "multipleOf": 10 ** -MAX_DECIMAL_PLACES, **number},
                                     {"type": "string", "pattern": TextFormat(string).json_schema}],
                           "examples": examples})


def absent_or_given(schema: dict[str, Any]) -> None:
    """`json_schema_extra` of a field that may be left out but not sent as null (the server refuses the null, or
    reads it as absent): the document shows the value's own schema only."""
    branches = [branch for branch in schema.pop("anyOf", ()) if branch != {"type": "null"}]
    if len(branches) == 1:
        schema.update(branches[0])
    elif branches:
        schema["anyOf"] = branches
    if schema.get("default", 0) is None:
        del schema["default"]


def exactly_one_of(*names: str) -> dict[str, Any]:
    """A model's `json_schema_extra` when exactly one of these fields must be given (each non-null)."""
    return {"oneOf": [{"required": [name]} for name in names]}


class Shape(BaseModel):
    """A response or request shape: unknown request fields are ignored (SPEC.md's conventions)."""

    model_config = ConfigDict(extra="ignore")


class Items(Shape, Generic[T]):
    items: list[T]


class Error(Shape):
    # No class docstring on purpose: a route's declared error is described by its HTTP status, or by the
    # docstring of a narrower error model (`class BatchIdReused(Error)`).
    error: str = Field(description="Stable machine-readable code, such as NOT_FOUND.", examples=["NOT_FOUND"])
    message: str = Field(description="What went wrong, for a person to read.")
    details: dict[str, Any] = Field(default_factory=dict, description="Structured details; their shape depends on "
                                    "the code. Absent when there are none.")


class Problem(Shape):
    path: str = Field(description="Where in the request, such as lineItems[0].skuId.", examples=["email"])
    code: str = Field(description="Stable code of the problem.", examples=["INVALID_EMAIL"])
    message: str


class Problems(Shape):
    errors: list[Problem]


class InvalidRequestError(Error):
    """INVALID_REQUEST listing every problem with its path (BAD_REQUEST when the body is not JSON); nothing was
    stored."""

    error: Literal["INVALID_REQUEST", "BAD_REQUEST"]
    details: Problems = Field(default_factory=lambda: Problems(errors=[]),
                              description="INVALID_REQUEST: every problem found. Absent with BAD_REQUEST.")


class NotFoundError(Error):
    """NOT_FOUND: no such resource, or not visible from the token's scope (such as a product outside the eCom
    store's assortment)."""

    error: Literal["NOT_FOUND"]


class SkuNotFoundError(Error):
    """SKU_NOT_FOUND: the SKU is not in the eCom store's assortment; the message names the id or number."""

    error: Literal["SKU_NOT_FOUND"]


class CustomerNotFoundError(Error):
    """CUSTOMER_NOT_FOUND: no customer of this tenant has this id (or e-mail)."""

    error: Literal["CUSTOMER_NOT_FOUND"]


class CustomerConflict(Shape):
    field: Literal["email", "phone"]
    existingCustomerId: str


class CustomerConflicts(Shape):
    conflicts: list[CustomerConflict]


class CustomerConflictError(Error):
    """CUSTOMER_CONFLICT: another customer of the tenant already has this e-mail address or phone; nothing was
    stored."""

    error: Literal["CUSTOMER_CONFLICT"]
    details: CustomerConflicts
