"""Orders, from the e-commerce scope: /v1/tenants/{tenantId}/ecom_stores/{eComStoreId}/orders…

POST /orders checks the body (every problem with its path, in one 400), stores the order RECEIVED (in a group with
the orders arriving meanwhile: serving/order_groups.py) and answers 202 with the record; the order processor
(db/order_processing.py, woken here) then opens it. The rules are in db/orders.py, the shapes in
contracts/orders.py. The web shop reports captured payments and refunds here (db/fulfilment.py, db/returns.py);
the back office picks, ships, returns and cancels through the admin API.
"""


from quart import Blueprint, Response, request, url_for
from quart_schema import document_request, document_response

from contracts.errors import CustomerNotFound, NotFound
from contracts.models import CustomerNotFoundError, InvalidRequestError, NotFoundError
from contracts.orders import (
    Capture,
    CaptureAlreadyCompletedError,
    CreateOrder,
    DuplicateOrderError,
    Order,
    OrderHistory,
    OrderSkuOrCustomerNotFoundError,
    PaymentCaptureReport,
    Refund,
    RefundAlreadyCompletedError,
    RefundReport,
)
from contracts.rendering import decimal, instant
from db import fulfilment, returns
from db import orders as store
from serving.jsonio import json_response
from serving.protection import protect
from serving.rendering.orders import document_json, order_json
from serving.services import services
from serving.threads import blocking
from serving.validation import parse_json, validated

blueprint = Blueprint("orders", __name__, url_prefix="/v1/tenants/<tenantId>/ecom_stores/<eComStoreId>")
protect(blueprint, "ecom", resource_arg="eComStoreId")



@blueprint.post("/orders")
@document_request(CreateOrder)
@document_response(Order, 202)
@document_response(InvalidRequestError, 400)
@document_response(OrderSkuOrCustomerNotFoundError, 404)
@document_response(DuplicateOrderError, 409)
async def create_order(tenantId: str, eComStoreId: str) -> Response:
    """Accept an order: 202 with the RECEIVED record and its Location; 400, 404, 409 DUPLICATE_ORDER."""
    body = await _create_order_body()
    held = await services().orders.create(tenantId, eComStoreId, body)
    services().wake_orders()
    location = url_for("orders.get_order", tenantId=tenantId, eComStoreId=eComStoreId, orderIdOrNumber=held.order.id)
    return json_response(order_json(held), 202, {"Location": location})


async def _create_order_body() -> CreateOrder:
    """The validated body; every structural problem at once, including lines naming no SKU."""
    data = parse_json(await request.get_data())
    lines = data.get("lineItems") if isinstance(data, dict) else None
    without_sku = [{"path": f"lineItems[{index}].skuId", "code": "REQUIRED", "message": "Give skuId or skuNumber."}
                   for index, line in enumerate(lines if isinstance(lines, list) else [])
                   if isinstance(line, dict) and line.get("skuId") is None and line.get("skuNumber") is None]
    return validated(CreateOrder, data, without_sku)


@blueprint.get("/orders/<orderIdOrNumber>")
@document_response(Order, 200)
@document_response(NotFoundError, 404)
async def get_order(tenantId: str, eComStoreId: str, orderIdOrNumber: str) -> Response:
    """The order by id or service order number; 404 NOT_FOUND, also for another eCom store's order."""
    held = await blocking(store.read_order, services().engine, tenantId, eComStoreId, orderIdOrNumber)
    if held is None:
        raise NotFound(f"No order {orderIdOrNumber}.")
    return json_response(order_json(held))


@blueprint.get("/customers/<customerId>/orders")
@document_response(OrderHistory, 200)
@document_response(CustomerNotFoundError, 404)
async def customer_orders(tenantId: str, eComStoreId: str, customerId: str) -> Response:
    """The customer's orders at this eCom store, newest first; 404 CUSTOMER_NOT_FOUND."""
    rows = await blocking(store.customer_orders, services().engine, tenantId, eComStoreId, customerId)
    if rows is None:
        raise CustomerNotFound(f"No customer {customerId}.")
    return json_response({"items": [
        {"id": row.id, "number": row.number, "externalOrderId": row.external_order_id,
         "externalOrderNumber": row.external_order_number, "orderDate": instant(row.order_date),
         "status": row.status, "grossAmount": decimal(row.gross_amount), "currencyIsoCode": row.currency_iso_code}
        for row in rows]})


@blueprint.post("/orders/<orderId>/captures/<captureId>/payment_capture")
@document_request(PaymentCaptureReport)
@document_response(Capture, 200)
@document_response(InvalidRequestError, 400)
@document_response(NotFoundError, 404)
@document_response(CaptureAlreadyCompletedError, 409)
async def payment_capture(tenantId: str, eComStoreId: str, orderId: str, captureId: str) -> Response:
    """Report the external payment capture: CONFIRMED with the capture's grossAmount (the receipt and invoice are
    made) or FAILED (its units are not shipped). The same report again is 200 and changes nothing; another one on
    a completed capture is 409 CAPTURE_ALREADY_COMPLETED."""
    report = validated(PaymentCaptureReport, parse_json(await request.get_data()))
    capture = await blocking(fulfilment.report_capture, services().engine, tenantId, eComStoreId, orderId, captureId,
                             report.status, report.capturedAmount)
    return json_response(document_json(capture))


@blueprint.post("/orders/<orderId>/refunds/<refundId>/confirm")
@document_request(RefundReport)
@document_response(Refund, 200)
@document_response(InvalidRequestError, 400)
@document_response(NotFoundError, 404)
@document_response(RefundAlreadyCompletedError, 409)
async def confirm_refund(tenantId: str, eComStoreId: str, orderId: str, refundId: str) -> Response:
    """Report the external refund: CONFIRMED with the refund's grossAmount closes it, FAILED records it. The same
    report again is 200 and changes nothing; another one on a completed refund is 409 REFUND_ALREADY_COMPLETED."""
    return await _refund_report(tenantId, eComStoreId, orderId, refund_id=refundId)


@blueprint.post("/orders/<orderId>/invoices/<invoiceId>/refund")
@document_request(RefundReport)
@document_response(Refund, 200)
@document_response(InvalidRequestError, 400)
@document_response(NotFoundError, 404)
@document_response(RefundAlreadyCompletedError, 409)
async def refund_invoice(tenantId: str, eComStoreId: str, orderId: str, invoiceId: str) -> Response:
    """The refund report of /refunds/{refundId}/confirm, naming the refund by its return invoice."""
    return await _refund_report(tenantId, eComStoreId, orderId, return_invoice_id=invoiceId)


async def _refund_report(tenant_id: str, ecom_store_id: str, order_id: str, **refund: str) -> Response:
    report = validated(RefundReport, parse_json(await request.get_data()))
    document = await blocking(returns.report_refund, services().engine, tenant_id, ecom_store_id, order_id,
                              **refund, status=report.status, refunded_amount=report.refundedAmount)
    return json_response(document_json(document))
