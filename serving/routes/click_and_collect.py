"""Click and collect, from the e-commerce scope: POST /v1/tenants/{tenantId}/ecom_stores/{eComStoreId}/click_and_collect

The request's rules are in `contracts/click_and_collect.py`; where the stock is taken from, and the locking that
keeps concurrent reservations from overselling, in `db/click_and_collect.py`.
"""

from datetime import timedelta
from typing import Any

from quart import Blueprint, Response
from quart_schema import document_request, document_response

from contracts.click_and_collect import (
    Reservation,
    ReservationNotFoundError,
    ReservationRefusedError,
    ReservationRequest,
)
from contracts.errors import CustomerNotFound, InsufficientInventory, RetailStoreNotInNetwork, SkuNotFound
from contracts.rendering import decimal, instant
from db import click_and_collect as store
from serving.jsonio import blocking, json_response
from serving.protection import protect
from serving.services import services
from serving.validation import json_body

blueprint = Blueprint("click_and_collect", __name__,
                      url_prefix="/v1/tenants/<tenantId>/ecom_stores/<eComStoreId>")
protect(blueprint, "ecom", resource_arg="eComStoreId")


@blueprint.post("/click_and_collect")
@document_request(ReservationRequest)
@document_response(Reservation, 201)
@document_response(ReservationRefusedError, 400)
@document_response(ReservationNotFoundError, 404)
async def reserve(tenantId: str, eComStoreId: str) -> Response:
    """Reserve the lines for pickup at a retail store of the network (201); 400 when a line cannot be filled or the
    store is outside the network, nothing reserved; 404 SKU_NOT_FOUND, CUSTOMER_NOT_FOUND."""
    body = await json_body(ReservationRequest)
    wanted = [store.WantedLine(line.skuId, line.quantity) for line in body.lineItems]
    try:
        reservation = await blocking(store.reserve, services().engine, tenantId, eComStoreId, body.retailStoreId,
                                     body.reservationName, body.customerId, wanted)
    except store.NotInNetwork:
        raise RetailStoreNotInNetwork(f"Retail store {body.retailStoreId} is not a released store of this eCom "
                                      "store's click and collect network.") from None
    except store.UnknownCustomer:
        raise CustomerNotFound(f"No customer {body.customerId}.") from None
    except store.UnknownSkus as unknown:
        raise SkuNotFound(f"No SKU {', '.join(unknown.sku_ids)} in this eCom store's assortment.",
                          {"skuIds": unknown.sku_ids}) from None
    except store.Insufficient as insufficient:
        raise InsufficientInventory([{"skuId": sku_id, "skuNumber": number, "quantity": decimal(quantity)}
                                     for sku_id, number, quantity in insufficient.shortages]) from None
    return json_response(_reservation_json(reservation), 201)


def _reservation_json(reservation: store.Reservation) -> dict[str, Any]:
    return {
        "parkedCartId": reservation.parked_cart_id, "cartId": reservation.cart_id,
        "reservationName": reservation.reservation_name, "retailStoreId": reservation.retail_store_id,
        "retailStoreName": reservation.retail_store_name, "createdAt": instant(reservation.created_time),
        "lineItems": [_line_json(line) for line in reservation.lines],
    }


def _line_json(line: store.ReservedLine) -> dict[str, Any]:
    return {"cartLineId": line.cart_line_id, "skuId": line.sku_id, "skuNumber": line.sku_number,
            "productName": line.product_name, "quantity": decimal(line.quantity),
            "reservedFromWarehouse": line.reserved_from_warehouse}


def parked_cart_json(cart: store.Cart, hold: timedelta) -> dict[str, Any]:
    """The cart as the back office reads it (contracts.click_and_collect.ParkedCart); `hold` dates its expiry."""
    return {**_reservation_json(cart), "ecomStoreId": cart.ecom_store_id, "customerId": cart.customer_id,
            "state": cart.state, "endedAt": instant(cart.ended_time),
            "expiresAt": instant(cart.created_time + hold) if cart.state == store.ACTIVE else None,
            "lineItems": [{**_line_json(line), "locationId": line.location_id, "locationNumber": line.location_number,
                           "locationName": line.location_name, "reservedQuantity": decimal(line.reserved),
                           "shortQuantity": decimal(line.short), "collectedQuantity": decimal(line.collected)}
                          for line in cart.lines]}
