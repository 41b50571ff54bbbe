"""Order shapes (ECOMMERCE.md "Orders"): the create-order request, checked here, and the order record, documented.

Decimals arrive as strings or numbers; amounts go out as canonical decimal strings.
"""

from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from contracts.customers import DeliveryAddress, InvoiceAddress
from contracts.formats import TextFormat
from contracts.models import (
    Day,
    DecimalString,
    Error,
    Id,
    Instant,
    Shape,
    absent_or_given,
    exactly_one_of,
    refusing,
    sent_decimal,
)

# Up to 4 decimal places: what the store holds (NUMERIC(18,4)). A string quantity above 0 has a non-zero digit.
Quantity = Annotated[Decimal, Field(gt=0, le=Decimal(10) ** 9, decimal_places=4),
                     sent_decimal(r"(?=[0-9.]*[1-9])[0-9]{1,9}(?:\.[0-9]{1,4})?|1000000000(?:\.0{1,4})?", ["2"],
                                  exclusiveMinimum=0, maximum=10**9)]
Price = Annotated[Decimal, Field(ge=0, lt=Decimal(10) ** 12, decimal_places=4),
                  sent_decimal(r"[0-9]{1,12}(?:\.[0-9]{1,4})?", ["199.90"], minimum=0, exclusiveMaximum=10**12)]
VatRate = Annotated[Decimal, Field(ge=0, le=100, decimal_places=4),
                    sent_decimal(r"100(?:\.0{1,4})?|[0-9]{1,2}(?:\.[0-9]{1,4})?", ["25"], minimum=0, maximum=100)]
# The web shop's own keys, SKU ids and numbers, campaign codes: looked up or kept as sent, so no control characters
# (PostgreSQL cannot hold a NUL: it would be a 500).
Key = Annotated[str, Field(min_length=1, max_length=100), refusing("INVALID_KEY", "The key")]
Code = Annotated[str, Field(min_length=1, max_length=64), refusing("INVALID_KEY", "The code")]
Text = Annotated[str, Field(max_length=200), refusing("INVALID_TEXT", "The text")]
# Opaque text stored as sent: anything but a NUL.
WITHOUT_NUL = TextFormat("[^\\u0000]*")


def _nul_problem(text: str) -> str | None:
    return "must not contain NUL (U+0000)." if "\x00" in text else None


PriceType = Literal["CAMPAIGN", "REGULAR", "LEGACY_DISCOUNT"]
OrderStatus = Literal["RECEIVED", "OPEN", "PARTIALLY_DELIVERED", "DELIVERED", "CANCELLED"]
MAX_LINES = 500


class LineItemRequest(Shape):
    """One line; give skuId or skuNumber (or both, naming the same SKU)."""

    model_config = ConfigDict(json_schema_extra={"anyOf": [{"required": ["skuId"]}, {"required": ["skuNumber"]}]})

    skuId: Code | None = Field(None, json_schema_extra=absent_or_given)
    skuNumber: Code | None = Field(None, json_schema_extra=absent_or_given)
    quantity: Quantity
    netUnitPrice: Price
    vatRate: VatRate
    netUnitOrderDiscountAmount: Price | None = None
    campaignCode: Code | None = None


class Freight(Shape):
    freightAmount: Price | None = None
    shippingMethodName: Text | None = None
    providerData: Annotated[str, Field(max_length=10_000, description="Opaque, stored as sent (without NUL)."),
                            refusing("INVALID_TEXT", "The text", _nul_problem, WITHOUT_NUL)] | None = None


class CreateOrder(Shape):
    """The body of POST /orders."""

    customerId: Id | None = None
    externalOrderId: Key
    externalOrderNumber: Key
    deliveryAddress: DeliveryAddress
    invoiceAddress: InvoiceAddress | None = None
    lineItems: Annotated[list[LineItemRequest], Field(min_length=1, max_length=MAX_LINES)]
    freight: Freight | None = None


class FreightRecord(Shape):
    freightAmount: DecimalString | None
    shippingMethodName: str | None
    providerData: str | None
    grossAmount: DecimalString
    vatAmount: DecimalString


class LineItem(Shape):
    id: Id
    lineNumber: int
    skuId: Id
    skuNumber: str
    productName: str
    quantity: DecimalString
    netUnitPrice: DecimalString
    vatRate: DecimalString
    netUnitOrderDiscountAmount: DecimalString | None
    campaignCode: str | None
    campaignId: Id | None
    priceType: PriceType
    grossAmount: DecimalString
    vatAmount: DecimalString
    netAmount: DecimalString
    reservedQuantity: DecimalString
    deliveredQuantity: DecimalString
    returnedQuantity: DecimalString
    cancelledQuantity: DecimalString


class DocumentLine(Shape):
    lineItemId: Id
    quantity: DecimalString
    grossAmount: DecimalString
    vatAmount: DecimalString


class DocumentFreight(Shape):
    grossAmount: DecimalString
    vatAmount: DecimalString


class _Document(Shape):
    id: Id
    createdTime: Instant
    lines: list[DocumentLine]
    grossAmount: DecimalString
    netAmount: DecimalString
    vatAmount: DecimalString
    freight: DocumentFreight | None = Field(description="The order's freight: with its first capture or receipt, "
                                                        "and back with the return that completes a full return.")


class Capture(_Document):
    status: Literal["PENDING", "CONFIRMED", "FAILED"]
    capturedAmount: DecimalString | None
    completedTime: Instant | None


class Receipt(_Document):
    number: str
    captureId: Id | None


class Invoice(_Document):
    number: str
    receiptId: Id


class Shipment(_Document):
    receiptId: Id
    carrier: str | None
    trackingNumber: str | None


class ReturnInvoice(_Document):
    number: str
    invoiceId: Id
    refundId: Id


class Refund(_Document):
    status: Literal["OPEN", "CONFIRMED", "FAILED"]
    returnInvoiceId: Id
    refundedAmount: DecimalString | None
    completedTime: Instant | None


class Voucher(Shape):
    """Vouchers are not issued yet: the list is always empty."""

    id: Id


class Order(Shape):
    id: Id
    number: str
    externalOrderId: str
    externalOrderNumber: str
    ecomStoreId: Id
    customerId: Id
    status: OrderStatus
    orderDate: Instant
    deliveryDate: Day
    currencyIsoCode: str
    deliveryAddress: DeliveryAddress
    invoiceAddress: InvoiceAddress | None
    freight: FreightRecord | None = None
    lineItems: list[LineItem]
    grossAmount: DecimalString
    netAmount: DecimalString
    vatAmount: DecimalString
    captures: list[Capture]
    receipts: list[Receipt]
    shipments: list[Shipment]
    invoices: list[Invoice]
    returnInvoices: list[ReturnInvoice]
    refunds: list[Refund]
    vouchers: list[Voucher]


class OrderSummary(Shape):
    id: Id
    number: str
    externalOrderId: str
    externalOrderNumber: str
    orderDate: Instant
    status: OrderStatus
    grossAmount: DecimalString
    currencyIsoCode: str


class OrderHistory(Shape):
    items: list[OrderSummary]


class ExistingOrder(Shape):
    existingOrderId: Id


class OrderSkuOrCustomerNotFoundError(Error):
    """SKU_NOT_FOUND (a line's SKU is not in the eCom store's assortment; the message names it) or
    CUSTOMER_NOT_FOUND (no customer of this tenant has the customerId)."""

    error: Literal["SKU_NOT_FOUND", "CUSTOMER_NOT_FOUND"]


class DuplicateOrderError(Error):
    """DUPLICATE_ORDER: this eCom store already has an order with this externalOrderId or externalOrderNumber;
    nothing was stored."""

    error: Literal["DUPLICATE_ORDER"]
    details: ExistingOrder





class CaptureAlreadyCompletedError(Error):
    """CAPTURE_ALREADY_COMPLETED: the capture was already reported with another result; nothing changed."""

    error: Literal["CAPTURE_ALREADY_COMPLETED"]


class RefundAlreadyCompletedError(Error):
    """REFUND_ALREADY_COMPLETED: the refund was already reported with another result; nothing changed."""

    error: Literal["REFUND_ALREADY_COMPLETED"]


def _amount_with_confirmed_only(amount: str) -> dict[str, Any]:
    """A report's schema: CONFIRMED with the amount, FAILED without it (null is taken as absent)."""
    return {"oneOf": [{"properties": {"status": {"const": "CONFIRMED"}, amount: {"not": {"type": "null"}}},
                       "required": ["status", amount]},
                      {"properties": {"status": {"const": "FAILED"}, amount: {"type": "null"}}}]}


class PaymentReport(Shape):
    status: Literal["CONFIRMED", "FAILED"]

    @staticmethod
    def _amount_with_confirmed(amount: Decimal | None, info: ValidationInfo) -> Decimal | None:
        status = info.data.get("status")
        if status == "CONFIRMED" and amount is None:
            raise PydanticCustomError("REQUIRED", "Give the amount with CONFIRMED.")
        if status == "FAILED" and amount is not None:
            raise PydanticCustomError("INVALID_VALUE", "Send the amount only with CONFIRMED.")
        return amount


class PaymentCaptureReport(PaymentReport):
    """The result of the external payment capture: CONFIRMED with the capture's grossAmount, or FAILED."""

    model_config = ConfigDict(json_schema_extra=_amount_with_confirmed_only("capturedAmount"))

    capturedAmount: Price | None = Field(default=None, validate_default=True)
    _check = field_validator("capturedAmount")(PaymentReport._amount_with_confirmed)


class RefundReport(PaymentReport):
    """The result of the external refund: CONFIRMED with the refund's grossAmount, or FAILED."""

    model_config = ConfigDict(json_schema_extra=_amount_with_confirmed_only("refundedAmount"))

    refundedAmount: Price | None = Field(default=None, validate_default=True)
    _check = field_validator("refundedAmount")(PaymentReport._amount_with_confirmed)


class LineUnits(Shape):
    lineItemId: Id
    quantity: Quantity


class OrderLinesRequest(Shape):
    """Units per line item; without `lines` (or without a body), every unit the operation can take."""

    # serving/openapi.py documents the body of such a model as optional.
    optional_body: ClassVar[bool] = True

    lines: Annotated[list[LineUnits], Field(min_length=1, max_length=MAX_LINES)] | None = None


class ReturnRequest(OrderLinesRequest):
    invoiceId: Id | None = Field(default=None, description="Return against this invoice only; by default against "
                                                           "the order's invoices, oldest first.")


class ShipRequest(Shape):
    """Exactly one of receiptId and captureId (a CONFIRMED capture's receipt)."""

    model_config = ConfigDict(json_schema_extra=exactly_one_of("receiptId", "captureId"))

    receiptId: Id | None = Field(None, json_schema_extra=absent_or_given)
    captureId: Id | None = Field(default=None, validate_default=True, json_schema_extra=absent_or_given)
    carrier: Annotated[Text, Field(max_length=100)] | None = None
    trackingNumber: Annotated[Text, Field(max_length=100)] | None = None

    @field_validator("captureId")
    @classmethod
    def _exactly_one(cls, capture_id: str | None, info: ValidationInfo) -> str | None:
        if (capture_id is None) == (info.data.get("receiptId") is None):
            raise PydanticCustomError("ONE_OF_REQUIRED", "Give exactly one of receiptId and captureId.")
        return capture_id
