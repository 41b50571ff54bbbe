"""Orders and their documents as the contract shows them (contracts/orders.py Order, Capture, Receipt, …)."""

from typing import Any

import orjson

from contracts.rendering import decimal, instant
from db.order_documents import CAPTURE, INVOICE, RECEIPT, REFUND, RETURN_INVOICE, SHIPMENT, Document
from db.orders import HeldOrder

_DOCUMENT_LISTS = ("captures", "receipts", "shipments", "invoices", "returnInvoices", "refunds", "vouchers")
_LIST_OF_KIND = {CAPTURE: "captures", RECEIPT: "receipts", SHIPMENT: "shipments", INVOICE: "invoices",
                 RETURN_INVOICE: "returnInvoices", REFUND: "refunds"}


def order_json(held: HeldOrder) -> dict[str, Any]:
    order = held.order
    record: dict[str, Any] = {
        "id": order.id, "number": order.number, "externalOrderId": order.external_order_id,
        "externalOrderNumber": order.external_order_number, "ecomStoreId": order.ecom_store_id,
        "customerId": order.customer_id, "status": order.status, "orderDate": instant(order.order_date),
        "deliveryDate": order.delivery_date.isoformat(), "currencyIsoCode": order.currency_iso_code,
        "deliveryAddress": orjson.loads(order.delivery_address),
        "invoiceAddress": orjson.loads(order.invoice_address) if order.invoice_address else None,
        "lineItems": [_line_json(line) for line in held.lines],
        "grossAmount": decimal(order.gross_amount), "netAmount": decimal(order.gross_amount - order.vat_amount),
        "vatAmount": decimal(order.vat_amount)}
    if order.freight is not None:
        record["freight"] = {**orjson.loads(order.freight), "grossAmount": decimal(order.freight_gross_amount),
                             "vatAmount": decimal(order.freight_vat_amount)}
    record.update({name: [] for name in _DOCUMENT_LISTS})
    for document in held.documents:
        record[_LIST_OF_KIND[document.kind]].append(document_json(document))
    return record


def document_json(document: Document) -> dict[str, Any]:
    """A document as its list in the order record shows it (contracts/orders.py Capture, Receipt, ...)."""
    record: dict[str, Any] = {
        "id": document.id, "createdTime": instant(document.created_time),
        "lines": [{"lineItemId": line.order_line_id, "quantity": decimal(line.quantity),
                   "grossAmount": decimal(line.gross_amount), "vatAmount": decimal(line.vat_amount)}
                  for line in document.lines],
        "grossAmount": decimal(document.gross_amount),
        "netAmount": decimal(document.gross_amount - document.vat_amount),
        "vatAmount": decimal(document.vat_amount),
        "freight": {"grossAmount": decimal(document.freight.gross), "vatAmount": decimal(document.freight.vat)}
        if document.freight else None}
    if document.kind in (RECEIPT, INVOICE, RETURN_INVOICE):
        record["number"] = document.number
    if document.kind in (CAPTURE, REFUND):
        amount = "capturedAmount" if document.kind == CAPTURE else "refundedAmount"
        record.update({"status": document.status, amount: decimal(document.reported_amount),
                       "completedTime": instant(document.completed_time)})
    links = {RECEIPT: {"captureId": document.capture_id}, INVOICE: {"receiptId": document.receipt_id},
             SHIPMENT: {"receiptId": document.receipt_id, "carrier": document.carrier,
                        "trackingNumber": document.tracking_number},
             RETURN_INVOICE: {"invoiceId": document.invoice_id, "refundId": document.refund_id},
             REFUND: {"returnInvoiceId": document.return_invoice_id}}
    record.update(links.get(document.kind, {}))
    return record


def _line_json(line: Any) -> dict[str, Any]:
    discount = line.net_unit_order_discount_amount
    return {
        "id": line.id, "lineNumber": line.line_number, "skuId": line.sku_id, "skuNumber": line.sku_number,
        "productName": line.product_name, "quantity": decimal(line.quantity),
        "netUnitPrice": decimal(line.net_unit_price), "vatRate": decimal(line.vat_rate),
        "netUnitOrderDiscountAmount": decimal(discount) if discount is not None else None,
        "campaignCode": line.campaign_code, "campaignId": line.campaign_id, "priceType": line.price_type,
        "grossAmount": decimal(line.gross_amount), "vatAmount": decimal(line.vat_amount),
        "netAmount": decimal(line.gross_amount - line.vat_amount),
        "reservedQuantity": decimal(line.reserved_quantity), "deliveredQuantity": decimal(line.delivered_quantity),
        "returnedQuantity": decimal(line.returned_quantity), "cancelledQuantity": decimal(line.cancelled_quantity)}
