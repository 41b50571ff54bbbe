"""Order shapes (ECOMMERCE.md "Orders"): the create-order request, checked here, and the order record, documented.

Decimals arrive as strings or numbers; amounts go out as canonical decimal strings.
"""

from decimal import Decimal
from typing import Annotated, Literal

from pydantic import Field

from contracts.customers import DeliveryAddress, InvoiceAddress
from contracts.models import Day, DecimalString, Error, Id, Instant, Shape

# Up to 4 decimal places: what the store holds (NUMERIC(18,4)).
Quantity = Annotated[Decimal, Field(gt=0, le=Decimal(10) ** 9, decimal_places=4, examples=["2"])]
Price = Annotated[Decimal, Field(ge=0, lt=Decimal(10) ** 12, decimal_places=4, examples=["199.90"])]
VatRate = Annotated[Decimal, Field(ge=0, le=100, decimal_places=4, examples=["25"])]
Key = Annotated[str, Field(min_length=1, max_length=100)]
Code = Annotated[str, Field(min_length=1, max_length=64)]

PriceType = Literal["CAMPAIGN", "REGULAR", "LEGACY_DISCOUNT"]
OrderStatus = Literal["RECEIVED", "OPEN", "PARTIALLY_DELIVERED", "DELIVERED", "CANCELLED"]
MAX_LINES = 500


class LineItemRequest(Shape):
    """One line; give skuId or skuNumber (or both, naming the same SKU)."""

    skuId: Code | None = None
    skuNumber: Code | None = None
    quantity: Quantity
    netUnitPrice: Price
    vatRate: VatRate
    netUnitOrderDiscountAmount: Price | None = None
    campaignCode: Code | None = None


class Freight(Shape):
    freightAmount: Price | None = None
    shippingMethodName: Annotated[str, Field(max_length=200)] | None = None
    providerData: Annotated[str, Field(max_length=10_000)] | None = None


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


class DocumentLine(Shape):
    lineItemId: Id
    quantity: DecimalString
    grossAmount: DecimalString
    vatAmount: DecimalString


class Document(Shape):
    """A capture, receipt, invoice, shipment, return invoice, refund or voucher (ECOMMERCE.md "Documents")."""

    id: Id
    createdTime: Instant
    lines: list[DocumentLine]


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
    captures: list[Document]
    receipts: list[Document]
    shipments: list[Document]
    invoices: list[Document]
    returnInvoices: list[Document]
    refunds: list[Document]
    vouchers: list[Document]


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



