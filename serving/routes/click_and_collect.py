"""Click and collect, from the e-commerce scope: POST /v1/tenants/{tenantId}/ecom_stores/{eComStoreId}/click_and_collect

The request's rules are in `contracts/click_and_collect.py`; where the stock is taken from, and the locking that
keeps concurrent reservations from overselling, in `db/click_and_collect.py`.
"""

from quart import Blueprint, Response
from quart_schema import document_request, document_response

from contracts.click_and_collect import (
    Reservation,
    ReservationNotFoundError,
    ReservationRefusedError,
    ReservationRequest,
)
from contracts.errors import CustomerNotFound, InsufficientInventory, RetailStoreNotInNetwork, SkuNotFound
from contracts.rendering import decimal
from db import click_and_collect as store
from serving.jsonio import json_response
from serving.protection import protect
from serving.rendering.click_and_collect import reservation_json
from serving.request_checks import json_body
from serving.services import services
from serving.threads import blocking

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
    return json_response(reservation_json(reservation), 201)
