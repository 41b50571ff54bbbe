"""The back office's operations, as the admin API answers them: store calls in, contract JSON or ApiError out.

The admin API routes run these off the event loop, and `pia admin` runs the same ones directly on the database
when no server is named, so both print the same JSON and refuse with the same error bodies.
"""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from contracts.admin import (
    DESTINATION_MODELS,
    DeadLetterQuery,
    DestinationKind,
    FailedOrdersQuery,
    ReplayRequest,
    StockAdjustment,
)
from contracts.errors import CartNotActive, InvalidRequest, NotFound
from contracts.orders import OrderLinesRequest, ReturnRequest, ShipRequest
from contracts.rendering import decimal, instant
from db import click_and_collect
from db.backoffice import DocumentInvalid, load_document
from db.batches import get_batch
from db.destinations import (
    DestinationSettings,
    EventDestination,
    get_destination,
    remove_destination,
    set_destination,
)
from db.event_operations import DeadLetter, DeliveryState, dead_letters, delivery_state, replay_dead_letters
from db.fulfilment import cancel, pick, ship
from db.ids import utc_now
from db.order_failures import ProcessingState, failed_orders
from db.order_processing import retry_order
from db.orders import read_order
from db.reference import release_retail_store
from db.reservations import ORDER_LINE, Released
from db.returns import return_units
from db.secrets import SecretBox
from db.stock import StockLevel, StockNotFound, StockRefused, adjust_stock
from pipeline.rerun import requeue_for_rerun
from rules.retry import RetryPolicy
from serving.rendering.batches import batch_status
from serving.rendering.click_and_collect import parked_cart_json
from serving.rendering.orders import order_json
from serving.rendering.stores import retail_store_json
from serving.validation import validated
from settings import Settings

# DocumentError carries a path and a message; every problem of a document is reported under this code.
INVALID_DOCUMENT = "INVALID_DOCUMENT"


def load(engine: sa.Engine, tenant_id: str, document: Any) -> dict[str, Any]:
    try:
        report = load_document(engine, tenant_id, document)
    except DocumentInvalid as invalid:
        problems = [{"path": problem.path, "code": INVALID_DOCUMENT, "message": problem.message}
                    for problem in invalid.errors]
        raise InvalidRequest(problems, f"The back-office document has {len(problems)} problem(s); nothing was "
                                       "loaded.") from None
    return {"changed": report.changed, "counts": report.counts, "deleted": report.deleted,
            "released": [released_json(item) for item in report.released]}


def adjust(engine: sa.Engine, tenant_id: str, body: Any) -> dict[str, Any]:
    request = validated(StockAdjustment, body)
    try:
        level = adjust_stock(engine, tenant_id, request.locationNumber, request.skuNumber,
                             delta=request.onHandDelta, on_hand=request.onHand,
                             location_type=request.locationType, reason=request.reason)
    except StockNotFound as missing:
        raise NotFound(str(missing)) from None
    except StockRefused as refused:
        raise InvalidRequest([{"path": refused.field, "code": refused.code, "message": str(refused)}]) from None
    return stock_level_json(level)


def stock_level_json(level: StockLevel) -> dict[str, Any]:
    return {"locationId": level.location.id, "locationNumber": level.location.number,
            "locationName": level.location.name, "locationType": level.location.type,
            "skuId": level.sku_id, "skuNumber": level.sku_number, "onHand": decimal(level.on_hand),
            "reserved": decimal(level.reserved), "available": decimal(level.available),
            "modifiedTime": instant(level.modified_time), "changed": level.changed,
            "released": [released_json(item) for item in level.released]}


def released_json(item: Released) -> dict[str, Any]:
    """Units a count took back: an order line's (a backorder again) or a cart line's (short)."""
    owner = ({"orderId": item.order_id, "orderNumber": item.order_number, "lineItemId": item.owner_id}
             if item.owner_type == ORDER_LINE else {"parkedCartId": item.parked_cart_id, "cartLineId": item.owner_id})
    return {"ownerType": item.owner_type, **owner, "locationId": item.location_id, "skuId": item.sku_id,
            "quantity": decimal(item.quantity)}


def release(engine: sa.Engine, tenant_id: str, retail_store_number: str) -> dict[str, Any]:
    released = release_retail_store(engine, tenant_id, retail_store_number)
    if released is None:
        raise NotFound(f"No retail store {retail_store_number} in this tenant.")
    row, changed = released
    return {**retail_store_json(row), "changed": changed}


def _no_ecom_store(ecom_store_id: str) -> NotFound:
    return NotFound(f"No eCom store {ecom_store_id} in this tenant.")


def put_destination(engine: sa.Engine, box: SecretBox, tenant_id: str, ecom_store_id: str,
                    body: Any) -> dict[str, Any]:
    # The kind first, so the kind's own problems are reported at their fields (a union would prefix its tag).
    kind = validated(DestinationKind, body).kind
    request = validated(DESTINATION_MODELS[kind], body)
    if kind == "SERVICE_BUS":
        settings = DestinationSettings(kind, request.endpoint, request.entityPath, request.sharedAccessKeyName,
                                       request.sharedAccessKey.get_secret_value())
    else:
        settings = DestinationSettings(kind, request.url, None, None, request.secret.get_secret_value())
    stored = set_destination(engine, box, tenant_id, ecom_store_id, settings)
    if stored is None:
        raise _no_ecom_store(ecom_store_id)
    return destination_json(stored)


def show_destination(engine: sa.Engine, tenant_id: str, ecom_store_id: str) -> dict[str, Any]:
    stored = get_destination(engine, tenant_id, ecom_store_id)
    if stored is None:
        raise _no_destination(ecom_store_id)
    return destination_json(stored)


def delete_destination(engine: sa.Engine, tenant_id: str, ecom_store_id: str) -> None:
    """Remove it; the store's events still to deliver are discarded (NO_DESTINATION)."""
    if not remove_destination(engine, tenant_id, ecom_store_id):
        raise _no_destination(ecom_store_id)


def _no_destination(ecom_store_id: str) -> NotFound:
    return NotFound(f"No event destination is set for eCom store {ecom_store_id}.")


def destination_json(stored: EventDestination) -> dict[str, Any]:
    """Everything but the secret; `secretSet` says one is stored."""
    if stored.kind == "SERVICE_BUS":
        target = {"endpoint": stored.endpoint, "entityPath": stored.entity_path,
                  "sharedAccessKeyName": stored.shared_access_key_name}
    else:
        target = {"url": stored.endpoint}
    return {"ecomStoreId": stored.ecom_store_id, "kind": stored.kind, **target, "secretSet": True,
            "modifiedTime": instant(stored.modified_time)}


# Event delivery: what is left to deliver to an eCom store, what failed, and replaying what the bridge gave up on.


def event_delivery(engine: sa.Engine, tenant_id: str, ecom_store_id: str) -> dict[str, Any]:
    state = delivery_state(engine, tenant_id, ecom_store_id)
    if state is None:
        raise _no_ecom_store(ecom_store_id)
    return delivery_state_json(state)


def delivery_state_json(state: DeliveryState) -> dict[str, Any]:
    oldest = state.oldest_undelivered
    return {"ecomStoreId": state.ecom_store_id, "backlog": state.backlog, "deadLetters": state.dead_letters,
            "deadLettersByAnswer": state.dead_letters_by_answer,
            "oldestUndeliveredTime": instant(oldest),
            "oldestUndeliveredAgeSeconds": None if oldest is None else round(
                max(0.0, (utc_now() - oldest).total_seconds()), 3),
            "lanesInBackoff": state.lanes_in_backoff,
            "lastDeliveredEventId": state.last_delivered_event_id,
            "lastDeliveredTime": instant(state.last_delivered_time),
            "consecutiveFailures": state.consecutive_failures, "lastError": state.last_error,
            "lastFailureTime": instant(state.last_failure_time), "credentialsRefused": state.credentials_refused}


def list_dead_letters(engine: sa.Engine, tenant_id: str, ecom_store_id: str,
                      query: dict[str, str]) -> dict[str, Any]:
    """`query`: the request's query parameters (limit, after, answer) as given, checked here for both ways in."""
    request = validated(DeadLetterQuery, query)
    page = dead_letters(engine, tenant_id, ecom_store_id, after=request.after, limit=request.limit,
                        answer=request.answer)
    if page is None:
        raise _no_ecom_store(ecom_store_id)
    letters, next_after = page
    return {"items": [dead_letter_json(letter) for letter in letters], "nextAfter": next_after}


def dead_letter_json(letter: DeadLetter) -> dict[str, Any]:
    return {"eventId": letter.event_id, "subject": letter.subject, "entityId": letter.entity_id,
            "datetime": instant(letter.datetime), "attempts": letter.attempts, "lastError": letter.last_error,
            "deadLetterTime": instant(letter.dead_letter_time)}


def replay(engine: sa.Engine, tenant_id: str, ecom_store_id: str, body: Any) -> dict[str, Any]:
    request = validated(ReplayRequest, body)
    replayed = replay_dead_letters(engine, tenant_id, ecom_store_id, request.eventIds)
    if replayed is None:
        raise _no_ecom_store(ecom_store_id)
    return {"replayed": replayed}


# Demand planning: a FAILED batch processed again, as `pia pipeline rerun` does it.


def rerun_batch(engine: sa.Engine, settings: Settings, tenant_id: str, batch_id: str) -> dict[str, Any]:
    """Put the FAILED batch back in line (a worker processes it) and answer its status, PENDING again."""
    batch = get_batch(engine, tenant_id, batch_id)
    if batch is None:
        raise NotFound(f"No demand planning batch {batch_id} in this tenant.")
    requeue_for_rerun(engine, settings.resolved_staging_dir, settings.staged_retention_days, batch)
    return batch_status(get_batch(engine, tenant_id, batch_id))


# Orders: each change runs in its own transaction on the locked order (db/fulfilment.py, db/returns.py) and
# answers with the order record as it then stands, documents included. Any eCom store's order of the tenant.


def show_order(engine: sa.Engine, tenant_id: str, order_key: str) -> dict[str, Any]:
    held = read_order(engine, tenant_id, None, order_key)
    if held is None:
        raise NotFound(f"No order {order_key}.")
    return order_json(held)


def pick_order(engine: sa.Engine, tenant_id: str, order_key: str, body: Any) -> dict[str, Any]:
    request = validated(OrderLinesRequest, body)
    return show_order(engine, tenant_id, pick(engine, tenant_id, order_key, request.lines))


def ship_order(engine: sa.Engine, tenant_id: str, order_key: str, body: Any) -> dict[str, Any]:
    request = validated(ShipRequest, body)
    return show_order(engine, tenant_id, ship(engine, tenant_id, order_key, receipt_id=request.receiptId,
                                              capture_id=request.captureId, carrier=request.carrier,
                                              tracking_number=request.trackingNumber))


def return_order_units(engine: sa.Engine, tenant_id: str, order_key: str, body: Any) -> dict[str, Any]:
    request = validated(ReturnRequest, body)
    return show_order(engine, tenant_id, return_units(engine, tenant_id, order_key, request.lines, request.invoiceId))


def cancel_order(engine: sa.Engine, tenant_id: str, order_key: str, body: Any) -> dict[str, Any]:
    request = validated(OrderLinesRequest, body)
    return show_order(engine, tenant_id, cancel(engine, tenant_id, order_key, request.lines))


# Orders whose processing failed: the list operators watch, and their retry (db/order_processing.py).


def list_failed_orders(engine: sa.Engine, tenant_id: str, query: dict[str, str]) -> dict[str, Any]:
    """`query`: the request's query parameters (processing, limit, after) as given, checked here for both ways in."""
    request = validated(FailedOrdersQuery, query)
    states, next_after = failed_orders(engine, tenant_id, request.processing, after=request.after,
                                       limit=request.limit)
    return {"items": [order_processing_json(state) for state in states], "nextAfter": next_after}


def retry_failed_order(engine: sa.Engine, retry: RetryPolicy, tenant_id: str, order_key: str) -> dict[str, Any]:
    state = retry_order(engine, tenant_id, order_key, retry)
    if state is None:
        raise NotFound(f"No order {order_key}.")
    return order_processing_json(state)


def order_processing_json(state: ProcessingState) -> dict[str, Any]:
    return {"orderId": state.order_id, "number": state.number, "ecomStoreId": state.ecom_store_id,
            "externalOrderId": state.external_order_id, "orderDate": instant(state.order_date),
            "status": state.status, "attempts": state.attempts, "lastError": state.last_error,
            "lastAttemptTime": instant(state.last_attempt_time), "nextAttemptTime": instant(state.retry_at),
            "parked": state.parked}


# Click and collect: the back office reads a parked cart, and ends it when the customer collects it or the store
# cancels it (db/click_and_collect.py); `hold` is the hold time that dates an ACTIVE cart's expiry.


def show_cart(engine: sa.Engine, tenant_id: str, parked_cart_id: str, hold: timedelta) -> dict[str, Any]:
    cart = click_and_collect.read_cart(engine, tenant_id, parked_cart_id)
    if cart is None:
        raise _no_cart(parked_cart_id)
    return parked_cart_json(cart, hold)


def collect_cart(engine: sa.Engine, tenant_id: str, parked_cart_id: str, hold: timedelta) -> dict[str, Any]:
    return _end_cart(click_and_collect.collect, engine, tenant_id, parked_cart_id, hold)


def cancel_cart(engine: sa.Engine, tenant_id: str, parked_cart_id: str, hold: timedelta) -> dict[str, Any]:
    return _end_cart(click_and_collect.cancel, engine, tenant_id, parked_cart_id, hold)


def _end_cart(end: Callable[[sa.Engine, str, str], click_and_collect.Cart], engine: sa.Engine, tenant_id: str,
              parked_cart_id: str, hold: timedelta) -> dict[str, Any]:
    try:
        return parked_cart_json(end(engine, tenant_id, parked_cart_id), hold)
    except click_and_collect.CartNotFound:
        raise _no_cart(parked_cart_id) from None
    except click_and_collect.CartNotActive as ended:
        raise CartNotActive(f"Cart {parked_cart_id} is {ended.cart.state}; nothing changed.",
                            ended.cart.state) from None


def _no_cart(parked_cart_id: str) -> NotFound:
    return NotFound(f"No click and collect cart {parked_cart_id} in this tenant.")
