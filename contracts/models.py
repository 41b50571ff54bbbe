"""Building blocks of the typed models that document (and, for requests, check) the e-commerce, loyalty and admin
shapes. Each area keeps its models in its own module (`contracts/catalogue.py`, `contracts/customers.py`, ...);
field names are the wire names (camelCase), so a model reads like the JSON it describes.

Responses are rendered with orjson from plain dicts and only *documented* by these models (quart-schema's
`document_response`), so reads pay nothing for validation; the tests check real responses against the generated
OpenAPI document.
"""

from typing import Annotated, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

T = TypeVar("T")

# A decimal as returned: a canonical string ("12", "0.5", "-3.25").
DecimalString = Annotated[str, Field(pattern=r"^-?[0-9]+(\.[0-9]+)?$", examples=["12.5"])]
# An instant in UTC with offset, and a calendar day.
Instant = Annotated[str, Field(json_schema_extra={"format": "date-time"}, examples=["2026-11-21T02:00:00Z"])]
Day = Annotated[str, Field(json_schema_extra={"format": "date"}, examples=["2026-11-21"])]
Id = Annotated[str, Field(description="UUIDv7", examples=["01a20a4f-c35c-742a-a143-6c0de849e123"])]


class Shape(BaseModel):
    """A response or request shape: unknown request fields are ignored (SPEC.md's conventions)."""

    model_config = ConfigDict(extra="ignore")


class Items(Shape, Generic[T]):
    items: list[T]
