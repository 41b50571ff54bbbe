"""Click and collect shapes (SPEC.md "Click and collect reservation"): the request with its checks, the reservation.

Decisions where the contract is silent:
- `quantity` is a whole number of units from 1 to 10,000, sent as a JSON number (2, or 2.0) or a string ("2"):
  a reservation is picked up at a counter, in units. Anything else is `INVALID_QUANTITY`.
- `lineItems` holds 1 to 100 lines; a SKU may appear on several lines (each is reserved on its own).
- `reservationName` is 1 to 200 characters without control characters, not only white space.
- Ids are not checked to be UUIDs: an id nothing has is simply unknown (404). They must still be 1 to 64
  characters without control characters or surrounding white space (`INVALID_ID`), so they can be looked up.
- `customerId` may be absent or null (no customer); when given it must be a customer of the tenant.
- A line is reserved whole at one location, never split between the store and a warehouse; the response's
  `quantity` is a decimal string like every quantity of the contract.
"""

from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, WithJsonSchema
from pydantic_core import PydanticCustomError

from contracts.customers import MAX_TEXT_LENGTH
from contracts.formats import KEY, NAME, TEXT, TextFormat, key_problem
from contracts.models import DecimalString, Error, Id, Instant, Problems, Shape, refusing

MAX_QUANTITY = 10_000
MAX_LINES = 100


def _quantity(value: Any) -> Decimal:
    whole = (isinstance(value, int) and not isinstance(value, bool)
             or isinstance(value, float) and value.is_integer()
             or isinstance(value, str) and value.isascii() and value.isdigit())
    if not whole or not 1 <= int(value) <= MAX_QUANTITY:
        raise PydanticCustomError("INVALID_QUANTITY", f"Must be a whole number of units from 1 to {MAX_QUANTITY}.")
    return Decimal(int(value))


def _name(value: Any) -> Any:
    if isinstance(value, str) and (not value.strip() or not TEXT.matches(value)):
        raise PydanticCustomError("INVALID_TEXT", "Must not be empty or hold control characters.")
    return value


# The Id of contracts.models, checked to be a string a lookup can take.
ReferenceId = Annotated[Id, refusing("INVALID_ID", "The id", key_problem, KEY)]
Quantity = Annotated[Decimal, BeforeValidator(_quantity),
                     WithJsonSchema({"oneOf": [{"type": "integer", "minimum": 1, "maximum": MAX_QUANTITY},
                                               {"type": "string", "pattern": TextFormat(
                                                   f"0*(?:[1-9][0-9]{{0,3}}|{MAX_QUANTITY})").json_schema}],
                                     "examples": [2]})]


class ReservationLineRequest(Shape):
    skuId: ReferenceId
    quantity: Quantity


class ReservationRequest(Shape):
    retailStoreId: ReferenceId = Field(description="A released retail store of the eCom store's company.")
    reservationName: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_LENGTH,
                                          json_schema_extra={"pattern": NAME.json_schema}), BeforeValidator(_name)]
    customerId: ReferenceId | None = None
    lineItems: list[ReservationLineRequest] = Field(min_length=1, max_length=MAX_LINES)


class ReservationLine(Shape):
    cartLineId: Id
    skuId: Id
    skuNumber: str
    productName: str
    quantity: DecimalString
    reservedFromWarehouse: bool = Field(description="false: reserved from the retail store's own stock; true: from a "
                                        "warehouse serving the eCom store, as the store lacked it.")


class Reservation(Shape):
    parkedCartId: Id
    cartId: Id
    reservationName: str
    retailStoreId: Id
    retailStoreName: str
    createdAt: Instant
    lineItems: list[ReservationLine]


CART_STATES = ("ACTIVE", "COLLECTED", "CANCELLED", "EXPIRED")


class ParkedCartLine(ReservationLine):
    locationId: Id
    locationNumber: str
    locationName: str
    reservedQuantity: DecimalString = Field(description="Units still reserved for the cart.")
    shortQuantity: DecimalString = Field(description="Units a stock count found missing at the location, taken "
                                         "back from the cart (the line is short).")
    collectedQuantity: DecimalString = Field(description="Units the customer took (a COLLECTED cart).")


class ParkedCart(Reservation):
    """A click and collect reservation as the back office reads it. ACTIVE until the customer collects it
    (COLLECTED: the reserved units leave each line's location), the store cancels it (CANCELLED) or it is not
    collected within the hold time (EXPIRED); the last two release what it held."""

    ecomStoreId: Id
    customerId: Id | None
    state: Literal["ACTIVE", "COLLECTED", "CANCELLED", "EXPIRED"]
    endedAt: Instant | None
    expiresAt: Instant | None = Field(description="When an ACTIVE cart expires (PIA_CLICK_AND_COLLECT_HOLD_HOURS "
                                      "after it was made); null once it has ended.")
    lineItems: list[ParkedCartLine]  # type: ignore[assignment]


class CartState(Shape):
    state: Literal["COLLECTED", "CANCELLED", "EXPIRED"]


class CartNotActiveError(Error):
    """CART_NOT_ACTIVE: the cart already ended another way (details.state); nothing changed. Collecting or cancelling
    it again the way it ended answers 200 with the cart."""

    error: Literal["CART_NOT_ACTIVE"]
    details: CartState


class Shortage(Shape):
    skuId: Id
    skuNumber: str
    quantity: DecimalString = Field(description="The quantity the line asked for.")


class Shortages(Shape):
    skus: list[Shortage]


class ReservationRefusedError(Error):
    """Nothing was reserved. INSUFFICIENT_INVENTORY: neither the retail store nor a serving warehouse has the
    quantity of these SKUs available (details.skus). RETAIL_STORE_NOT_IN_NETWORK: the retail store is not a released
    store of the eCom store's company. INVALID_REQUEST: every problem of the request with its path (details.errors);
    BAD_REQUEST: the body is not JSON."""

    error: Literal["INSUFFICIENT_INVENTORY", "RETAIL_STORE_NOT_IN_NETWORK", "INVALID_REQUEST", "BAD_REQUEST"]
    details: Shortages | Problems | None = Field(None, description="Absent with RETAIL_STORE_NOT_IN_NETWORK and "
                                                 "BAD_REQUEST.")


class ReservationNotFoundError(Error):
    """SKU_NOT_FOUND: a SKU is not in the eCom store's assortment (details.skuIds names them); CUSTOMER_NOT_FOUND:
    no customer of this tenant has the customerId. Nothing was reserved."""

    error: Literal["SKU_NOT_FOUND", "CUSTOMER_NOT_FOUND"]
