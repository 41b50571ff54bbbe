"""Click and collect reservations as the e-commerce scope answers them, and parked carts as the back office reads
them (contracts/click_and_collect.py)."""

from datetime import timedelta
from typing import Any

from contracts.rendering import decimal, instant
from db.click_and_collect import ACTIVE, Cart, Reservation, ReservedLine


def reservation_json(reservation: Reservation) -> dict[str, Any]:
    return {
        "parkedCartId": reservation.parked_cart_id, "cartId": reservation.cart_id,
        "reservationName": reservation.reservation_name, "retailStoreId": reservation.retail_store_id,
        "retailStoreName": reservation.retail_store_name, "createdAt": instant(reservation.created_time),
        "lineItems": [_line_json(line) for line in reservation.lines],
    }


def _line_json(line: ReservedLine) -> dict[str, Any]:
    return {"cartLineId": line.cart_line_id, "skuId": line.sku_id, "skuNumber": line.sku_number,
            "productName": line.product_name, "quantity": decimal(line.quantity),
            "reservedFromWarehouse": line.reserved_from_warehouse}


def parked_cart_json(cart: Cart, hold: timedelta) -> dict[str, Any]:
    """The cart as the back office reads it (contracts.click_and_collect.ParkedCart); `hold` dates its expiry."""
    return {**reservation_json(cart), "ecomStoreId": cart.ecom_store_id, "customerId": cart.customer_id,
            "state": cart.state, "endedAt": instant(cart.ended_time),
            "expiresAt": instant(cart.created_time + hold) if cart.state == ACTIVE else None,
            "lineItems": [{**_line_json(line), "locationId": line.location_id, "locationNumber": line.location_number,
                           "locationName": line.location_name, "reservedQuantity": decimal(line.reserved),
                           "shortQuantity": decimal(line.short), "collectedQuantity": decimal(line.collected)}
                          for line in cart.lines]}
