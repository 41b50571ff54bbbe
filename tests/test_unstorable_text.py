"""Text PostgreSQL cannot store (a NUL) or that a lookup cannot take is refused with its path, on both backends.

The schemathesis run of every scope (tests/test_schemathesis.py) found these as 500s on PostgreSQL: an order's keys
and free text, a back-office document's image URL, a dead letter id. Each is now a 400 naming the field, and nothing
is stored.
"""

from typing import Any

import httpx

from tests.conftest import bearer, client_of


def _problems(response: httpx.Response) -> set[tuple[str, str]]:
    assert response.status_code == 400, response.text
    return {(problem["path"], problem["code"]) for problem in response.json()["details"]["errors"]}


def test_an_order_s_keys_and_text_hold_no_control_character(http: httpx.Client, shared_world: dict[str, Any],
                                                             cached_token: Any) -> None:
    client = client_of(shared_world, "ecom")
    base = f"/v1/tenants/{shared_world['id']}/ecom_stores/{client['resource']}"
    headers = bearer(cached_token(shared_world, client))
    order = {"externalOrderId": "web\x00-1", "externalOrderNumber": "W\x071",
             "deliveryAddress": {"street": "Bryggen 1", "postCode": "5003", "city": "Bergen", "countryIsoCode": "NO"},
             "lineItems": [{"skuNumber": "100\x001", "quantity": 1, "netUnitPrice": "10", "vatRate": "25",
                            "campaignCode": "\x00"}],
             "customerId": "\x00", "freight": {"shippingMethodName": "Post\x00en", "providerData": "{\x00}"}}
    assert _problems(http.post(f"{base}/orders", json=order, headers=headers)) == {
        *((path, "INVALID_KEY") for path in ("externalOrderId", "externalOrderNumber", "lineItems[0].skuNumber",
                                             "lineItems[0].campaignCode")),
        ("customerId", "INVALID_ID"),
        *((path, "INVALID_TEXT") for path in ("freight.shippingMethodName", "freight.providerData"))}
    # Opaque provider data keeps its line breaks; only a NUL is refused there.
    order = {**order, "externalOrderId": "web-1", "externalOrderNumber": "W1", "customerId": None,
             "lineItems": [{**order["lineItems"][0], "skuNumber": "nope", "campaignCode": None}],
             "freight": {"providerData": "{\n}"}}
    assert http.post(f"{base}/orders", json=order, headers=headers).status_code == 404  # SKU_NOT_FOUND: checked


def test_admin_text_and_ids_the_store_cannot_take(http: httpx.Client, shared_world: dict[str, Any],
                                                  cached_token: Any) -> None:
    admin = client_of(shared_world, "admin")
    base, headers = f"/admin/v1/tenants/{shared_world['id']}", bearer(cached_token(shared_world, admin))
    document = {"products": [{"number": "NUL-1", "name": "Image with a NUL", "released": False,
                              "images": [{"url": "https://img.example/a\x00b.jpg", "sortOrder": 1}]}]}
    refused = http.post(f"{base}/backoffice", json=document, headers=headers)
    assert _problems(refused) == {("products[0].images[0].url", "INVALID_DOCUMENT")}
    store = shared_world["ecomStores"][0]["id"]
    replay = http.post(f"{base}/ecom_stores/{store}/dead_letters/replay", json={"eventIds": ["\x00", "x"]},
                       headers=headers)
    assert _problems(replay) == {("eventIds[0]", "INVALID_ID"), ("eventIds[1]", "INVALID_ID")}
    page = http.get(f"{base}/ecom_stores/{store}/dead_letters", params={"after": "\x00"}, headers=headers)
    assert _problems(page) == {("after", "INVALID_ID")}
