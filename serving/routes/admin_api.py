"""The back office's admin API: /admin/v1/tenants/{tenantId}/… for admin-scope clients only.

Each route parses its body and runs the shared operation (serving/admin_operations.py) off the event loop.
"""

from datetime import timedelta
from typing import Any

from quart import Blueprint, Response, request
from quart_schema import document_querystring, document_request, document_response

from contracts.admin import (
    BackofficeDocument,
    DeadLetterQuery,
    DeadLetters,
    DestinationRemoved,
    EventDeliveryState,
    EventDestination,
    EventDestinationRequest,
    FailedOrders,
    FailedOrdersQuery,
    LoadReport,
    OrderNotOpenError,
    OrderProcessing,
    PickRefusedError,
    ReleasedRetailStore,
    ReplayReport,
    ReplayRequest,
    RerunRefusedError,
    ShipRefusedError,
    StockAdjustment,
    StockLevel,
)
from contracts.click_and_collect import CartNotActiveError, ParkedCart
from contracts.demand_planning_models import BatchStatus
from contracts.models import InvalidRequestError, NotFoundError
from contracts.orders import Order, OrderLinesRequest, ReturnRequest, ShipRequest
from db.secrets import secret_box
from rules.retry import RetryPolicy
from serving import admin_operations
from serving.jsonio import json_response
from serving.protection import protect
from serving.services import services
from serving.threads import blocking
from serving.validation import parse_json

blueprint = Blueprint("admin_api", __name__, url_prefix="/admin/v1/tenants/<tenantId>")
protect(blueprint, "admin")


async def _json() -> Any:
    # A back-office document can be megabytes: parsed off the event loop too.
    return await blocking(parse_json, await request.get_data())


async def _optional_json() -> Any:
    """A small body where sending none means `{}` (the whole order: every open or returnable unit)."""
    raw = await request.get_data()
    return parse_json(raw) if raw else {}


@blueprint.post("/backoffice")
@document_request(BackofficeDocument)
@document_response(LoadReport, 200)
@document_response(InvalidRequestError, 400)
async def load_backoffice(tenantId: str) -> Response:
    """Load a back-office document (partial upsert, all or nothing; contracts/backoffice.schema.json)."""
    return json_response(await blocking(admin_operations.load, services().engine, tenantId, await _json()))


@blueprint.post("/stock_adjustments")
@document_request(StockAdjustment)
@document_response(StockLevel, 200)
@document_response(InvalidRequestError, 400)
@document_response(NotFoundError, 404)
async def stock_adjustment(tenantId: str) -> Response:
    """Add to on hand at a location, or set the counted quantity; InventoryUpdated when it changed."""
    return json_response(await blocking(admin_operations.adjust, services().engine, tenantId, await _json()))


@blueprint.post("/retail_stores/<retailStoreNumber>/release")
@document_response(ReleasedRetailStore, 200)
@document_response(NotFoundError, 404)
async def release_retail_store(tenantId: str, retailStoreNumber: str) -> Response:
    """Release the store; RetailStoreUpdated when it was not released yet."""
    return json_response(await blocking(admin_operations.release, services().engine, tenantId, retailStoreNumber))


@blueprint.put("/ecom_stores/<eComStoreId>/event_destination")
@document_request(EventDestinationRequest)
@document_response(EventDestination, 200)
@document_response(InvalidRequestError, 400)
@document_response(NotFoundError, 404)
async def put_event_destination(tenantId: str, eComStoreId: str) -> Response:
    """Set where the eCom store's events go; the secret is sealed at rest and never returned."""
    body = await _json()
    box = await blocking(secret_box, services().settings)  # may read the embedded key file
    return json_response(await blocking(admin_operations.put_destination, services().engine, box, tenantId,
                                        eComStoreId, body))


@blueprint.get("/ecom_stores/<eComStoreId>/event_destination")
@document_response(EventDestination, 200)
@document_response(NotFoundError, 404)
async def get_event_destination(tenantId: str, eComStoreId: str) -> Response:
    return json_response(await blocking(admin_operations.show_destination, services().engine, tenantId,
                                        eComStoreId))


@blueprint.delete("/ecom_stores/<eComStoreId>/event_destination")
@document_response(DestinationRemoved, 204)
@document_response(NotFoundError, 404)
async def delete_event_destination(tenantId: str, eComStoreId: str) -> Response:
    """Remove the eCom store's destination: its events still to deliver, and those written until one is set again,
    are discarded (NO_DESTINATION); a destination set later gets only events written after it."""
    await blocking(admin_operations.delete_destination, services().engine, tenantId, eComStoreId)
    return Response(status=204)


@blueprint.get("/ecom_stores/<eComStoreId>/event_delivery")
@document_response(EventDeliveryState, 200)
@document_response(NotFoundError, 404)
async def get_event_delivery(tenantId: str, eComStoreId: str) -> Response:
    """How delivery of the eCom store's events goes: backlog, dead letters, last delivery, failures."""
    return json_response(await blocking(admin_operations.event_delivery, services().engine, tenantId, eComStoreId))


@blueprint.get("/ecom_stores/<eComStoreId>/dead_letters")
@document_querystring(DeadLetterQuery)
@document_response(DeadLetters, 200)
@document_response(InvalidRequestError, 400)
@document_response(NotFoundError, 404)
async def list_dead_letters(tenantId: str, eComStoreId: str) -> Response:
    """The events the bridge gave up on, newest first, with their attempts and last error."""
    return json_response(await blocking(admin_operations.list_dead_letters, services().engine, tenantId,
                                        eComStoreId, request.args.to_dict()))


@blueprint.post("/ecom_stores/<eComStoreId>/dead_letters/replay")
@document_request(ReplayRequest)
@document_response(ReplayReport, 200)
@document_response(InvalidRequestError, 400)
@document_response(NotFoundError, 404)
async def replay_dead_letters(tenantId: str, eComStoreId: str) -> Response:
    """Deliver dead letters again (the named ones, or `{}`: all of the store's), from their first attempt. The body is
    required: an empty request replays nothing (400)."""
    body = await _json()
    return json_response(await blocking(admin_operations.replay, services().engine, tenantId, eComStoreId, body))


@blueprint.post("/batches/<batchId>/rerun")
@document_response(BatchStatus, 202)
@document_response(NotFoundError, 404)
@document_response(RerunRefusedError, 409)
async def rerun_batch(tenantId: str, batchId: str) -> Response:
    """Process a FAILED demand planning batch again from its staged file (what `pia pipeline rerun` does): it goes
    back in line at its original place with its attempts counted afresh, and answers PENDING; follow its status."""
    status = await blocking(admin_operations.rerun_batch, services().engine, services().settings, tenantId, batchId)
    services().wake_pipeline()
    return json_response(status, 202)


@blueprint.get("/orders")
@document_querystring(FailedOrdersQuery)
@document_response(FailedOrders, 200)
@document_response(InvalidRequestError, 400)
async def list_failed_orders(tenantId: str) -> Response:
    """RECEIVED orders that failed to open: parked ones (processing=FAILED, the default), which wait for an
    operator's retry, or those still tried again after a backoff (processing=RETRYING); by order id, with attempts
    and the last error."""
    return json_response(await blocking(admin_operations.list_failed_orders, services().engine, tenantId,
                                        request.args.to_dict()))


@blueprint.post("/orders/<orderIdOrNumber>/retry")
@document_response(OrderProcessing, 200)
@document_response(NotFoundError, 404)
async def retry_order(tenantId: str, orderIdOrNumber: str) -> Response:
    """Try to open the order now, its failed attempts counted from zero: its processing state after (OPEN, or
    RECEIVED with this attempt's error, tried again after a backoff). An order already open is left as it is."""
    return json_response(await blocking(admin_operations.retry_failed_order, services().engine,
                                        RetryPolicy.of(services().settings.order), tenantId, orderIdOrNumber))


@blueprint.get("/orders/<orderIdOrNumber>")
@document_response(Order, 200)
@document_response(NotFoundError, 404)
async def get_order(tenantId: str, orderIdOrNumber: str) -> Response:
    """Any eCom store's order of the tenant, by id or number, with its documents."""
    return json_response(await blocking(admin_operations.show_order, services().engine, tenantId, orderIdOrNumber))


@blueprint.post("/orders/<orderIdOrNumber>/pick")
@document_request(OrderLinesRequest)
@document_response(Order, 200)
@document_response(PickRefusedError, 400)
@document_response(NotFoundError, 404)
@document_response(OrderNotOpenError, 409)
async def pick_order(tenantId: str, orderIdOrNumber: str) -> Response:
    """Pick units (no body or no lines: every open unit). With payment capture on the eCom store: a PENDING capture
    and OrderReadyForPaymentCapture; otherwise a receipt with its invoice, the units leave stock, OrderFulfilled."""
    body = await _optional_json()
    return json_response(await blocking(admin_operations.pick_order, services().engine, tenantId, orderIdOrNumber,
                                        body))


@blueprint.post("/orders/<orderIdOrNumber>/ship")
@document_request(ShipRequest)
@document_response(Order, 200)
@document_response(InvalidRequestError, 400)
@document_response(NotFoundError, 404)
@document_response(ShipRefusedError, 409)
async def ship_order(tenantId: str, orderIdOrNumber: str) -> Response:
    """Ship a receipt, named or by its CONFIRMED capture: a shipment and OrderShipped."""
    body = await _json()
    return json_response(await blocking(admin_operations.ship_order, services().engine, tenantId, orderIdOrNumber,
                                        body))


@blueprint.post("/orders/<orderIdOrNumber>/returns")
@document_request(ReturnRequest)
@document_response(Order, 200)
@document_response(InvalidRequestError, 400)
@document_response(NotFoundError, 404)
@document_response(OrderNotOpenError, 409)
async def return_order_units(tenantId: str, orderIdOrNumber: str) -> Response:
    """Take delivered units back (no body or no lines: every unit not yet returned): per invoice a return invoice
    and an OPEN refund with OrderReadyForRefund; the units go back on hand."""
    body = await _optional_json()
    return json_response(await blocking(admin_operations.return_order_units, services().engine, tenantId,
                                        orderIdOrNumber, body))


@blueprint.post("/orders/<orderIdOrNumber>/cancel")
@document_request(OrderLinesRequest)
@document_response(Order, 200)
@document_response(InvalidRequestError, 400)
@document_response(NotFoundError, 404)
@document_response(OrderNotOpenError, 409)
async def cancel_order(tenantId: str, orderIdOrNumber: str) -> Response:
    """Cancel open units (no body or no lines: every open unit, which cancels an order nothing was delivered of);
    their reservation is released with InventoryUpdated."""
    body = await _optional_json()
    return json_response(await blocking(admin_operations.cancel_order, services().engine, tenantId,
                                        orderIdOrNumber, body))


def _hold() -> timedelta:
    return timedelta(hours=services().settings.click_and_collect_hold_hours)


@blueprint.get("/click_and_collect/<parkedCartId>")
@document_response(ParkedCart, 200)
@document_response(NotFoundError, 404)
async def get_parked_cart(tenantId: str, parkedCartId: str) -> Response:
    """A click and collect reservation by its parkedCartId: its state, and each line with where it is reserved and
    how much of it is still reserved, short or collected."""
    return json_response(await blocking(admin_operations.show_cart, services().engine, tenantId, parkedCartId,
                                        _hold()))


@blueprint.post("/click_and_collect/<parkedCartId>/collect")
@document_response(ParkedCart, 200)
@document_response(NotFoundError, 404)
@document_response(CartNotActiveError, 409)
async def collect_parked_cart(tenantId: str, parkedCartId: str) -> Response:
    """The customer paid and took the goods: what is still reserved leaves each line's location (on hand and reserved
    both go down), InventoryUpdated per SKU. Collecting again answers the same and changes nothing; a cancelled or
    expired cart is 409 CART_NOT_ACTIVE."""
    return json_response(await blocking(admin_operations.collect_cart, services().engine, tenantId, parkedCartId,
                                        _hold()))


@blueprint.post("/click_and_collect/<parkedCartId>/cancel")
@document_response(ParkedCart, 200)
@document_response(NotFoundError, 404)
@document_response(CartNotActiveError, 409)
async def cancel_parked_cart(tenantId: str, parkedCartId: str) -> Response:
    """The store cancels the cart: its reservations are released, InventoryUpdated per SKU. Cancelling again answers
    the same and changes nothing; a collected or expired cart is 409 CART_NOT_ACTIVE."""
    return json_response(await blocking(admin_operations.cancel_cart, services().engine, tenantId, parkedCartId,
                                        _hold()))
