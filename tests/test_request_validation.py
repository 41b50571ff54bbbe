"""serving/validation.py: pydantic's problems become paths with stable codes."""

from decimal import Decimal

import pytest
from pydantic import BaseModel, Field, field_validator
from pydantic_core import PydanticCustomError

from contracts.errors import InvalidRequest
from serving.validation import validated


class Line(BaseModel):
    skuId: str
    quantity: Decimal = Field(gt=0)

    @field_validator("skuId")
    @classmethod
    def known_shape(cls, value: str) -> str:
        if value == "bad":
            raise PydanticCustomError("INVALID_ID", "not an id")
        return value


class Order(BaseModel):
    lineItems: list[Line] = Field(min_length=1)
    note: str = Field(default="", max_length=3)


def _codes(data: object) -> set[tuple[str, str]]:
    with pytest.raises(InvalidRequest) as raised:
        validated(Order, data)
    return {(problem["path"], problem["code"]) for problem in raised.value.details["errors"]}


def test_missing_fields_wrong_types_and_broken_constraints_have_their_own_codes() -> None:
    assert _codes({"lineItems": [{"skuId": "bad", "quantity": "-1"}, {"quantity": "x"}, 7], "note": "long"}) == {
        ("lineItems[0].skuId", "INVALID_ID"),  # a model's own code
        ("lineItems[0].quantity", "INVALID_VALUE"),  # the right type, below the minimum
        ("lineItems[1].skuId", "REQUIRED"),
        ("lineItems[1].quantity", "INVALID_TYPE"),  # not a number at all
        ("lineItems[2]", "INVALID_TYPE"),
        ("note", "INVALID_VALUE"),  # too long
    }


def test_an_empty_list_and_a_body_of_the_wrong_kind() -> None:
    assert _codes({"lineItems": []}) == {("lineItems", "INVALID_VALUE")}
    assert _codes(["not", "an", "object"]) == {("$", "INVALID_TYPE")}
