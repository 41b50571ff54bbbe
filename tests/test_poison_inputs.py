"""The inputs of issue 16 that broke the service, over real HTTP on both backends: each is a 400 (or 415) with the
shared error body and the path of the problem, never a 500, and nothing of it is stored.

- a NUL or another control character in an id, key or code of a body, and in any path parameter (a NUL was a 500 on
  PostgreSQL and was stored on DuckDB);
- `after` cursors and replayed event ids that are not UUIDs;
- a customer's `ext` nested 254 deep (stored, then every read of the customer was a 500) or too large;
- a destination secret with characters that cannot be typed;
- a JSON body sent as text/plain, as a form or without a Content-Type, on every JSON write route of the e-commerce
  and admin scopes (415 UNSUPPORTED_MEDIA_TYPE).
"""

import json
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from contracts.limits import MAX_FREE_JSON_BYTES, MAX_FREE_JSON_DEPTH
from db.ids import new_id
from db.schema import ecom_store_event_destinations, orders
from tests.conftest import bearer, client_of
from tests.openapi_check import assert_response_matches
from tests.web_shop import Shop, new_order, order_line

ONE_EXAMPLE_EACH = settings(max_examples=40, deadline=None, derandomize=True,
                            suppress_health_check=[HealthCheck.function_scoped_fixture])
# Unicode category Cc: what no id, key, code or path parameter may hold.
CONTROL = st.sampled_from([chr(code) for code in (*range(0x00, 0x20), *range(0x7F, 0xA0))])
# Text within one path segment (a "/", even encoded, would make another path).
SEGMENT_TEXT = st.text(st.characters(blacklist_characters="/"), max_size=5)


@pytest.fixture
def admin(cached_token, shared_world) -> dict[str, str]:
    return bearer(cached_token(shared_world, client_of(shared_world, "admin")))


def _problems(response: httpx.Response) -> set[tuple[str, str]]:
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "INVALID_REQUEST", response.text
    return {(problem["path"], problem["code"]) for problem in response.json()["details"]["errors"]}


def _stored_orders(engine: sa.Engine, shop: Shop) -> int:
    """How many orders the shop's tenant holds (no other test writes while one of these runs)."""
    with engine.connect() as conn:
        return conn.scalar(sa.select(sa.func.count()).select_from(orders).where(orders.c.tenant_id == shop.tenant_id))


# --- the token endpoint ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["basic client id", "body tenant", "path tenant"])
def test_a_control_character_in_a_token_requests_ids_is_invalid_request(http, shared_world, document,
                                                                         where: str) -> None:
    client = client_of(shared_world, "ecom")
    client_id, tenant_id, path = client["clientId"], shared_world["id"], "/oauth2/token"
    if where == "basic client id":
        client_id = client_id[:8] + "\x00" + client_id[8:]
    elif where == "body tenant":
        tenant_id = "\x00" + tenant_id
    else:
        path = f"/v1/tenants/{quote(chr(0x85) + tenant_id)}/oauth2/v2.0/token"
        tenant_id = chr(0x85) + tenant_id
    response = http.post(path, data={"grant_type": "client_credentials", "tenant_id": tenant_id},
                         auth=(client_id, client["clientSecret"]))
    assert_response_matches(document, response)
    assert (response.status_code, response.json()["error"]) == (400, "invalid_request"), response.text


# --- ids, keys and codes in bodies ------------------------------------------------------------------------------

# Where a control character goes in an order body, and the path and code of the answer's problem.
ORDER_FIELDS = {
    "externalOrderId": ("externalOrderId", "INVALID_KEY"),
    "externalOrderNumber": ("externalOrderNumber", "INVALID_KEY"),
    "skuNumber": ("lineItems[0].skuNumber", "INVALID_KEY"),
    "skuId": ("lineItems[0].skuId", "INVALID_KEY"),
    "campaignCode": ("lineItems[0].campaignCode", "INVALID_KEY"),
    "customerId": ("customerId", "INVALID_ID"),
    "shippingMethodName": ("freight.shippingMethodName", "INVALID_TEXT"),
}


def _poisoned_order(shop: Shop, field: str, value: str) -> dict[str, Any]:
    body = new_order(order_line(shop.regular_sku()), freight={"freightAmount": "10"})
    if field in ("externalOrderId", "externalOrderNumber", "customerId"):
        body[field] = value
    elif field == "shippingMethodName":
        body["freight"][field] = value
    else:
        body["lineItems"][0][field] = value
    return body


@ONE_EXAMPLE_EACH
@given(field=st.sampled_from(sorted(ORDER_FIELDS)), before=st.text(max_size=5), control=CONTROL,
       after=st.text(max_size=5))
@example(field="externalOrderId", before="web-", control="\x00", after="1")  # the NUL
@example(field="skuNumber", before="", control="\x00", after="")
def test_a_control_character_in_an_order_key_is_400_at_its_path_and_nothing_is_stored(
        shop: Shop, engine, document, field: str, before: str, control: str, after: str) -> None:
    held = _stored_orders(engine, shop)
    response = shop.post(_poisoned_order(shop, field, before + control + after))
    assert_response_matches(document, response)
    assert ORDER_FIELDS[field] in _problems(response)
    assert _stored_orders(engine, shop) == held


def test_provider_data_stays_opaque_but_takes_no_nul(shop: Shop, engine, document) -> None:
    opaque = new_order(order_line(shop.regular_sku()), freight={"providerData": "{\n\t\"psp\": \"x\"\x01}"})
    accepted = shop.post(opaque)
    assert accepted.status_code == 202, accepted.text
    assert accepted.json()["freight"]["providerData"] == opaque["freight"]["providerData"]
    held = _stored_orders(engine, shop)
    refused = shop.post(new_order(order_line(shop.regular_sku()), freight={"providerData": "a\x00b"}))
    assert_response_matches(document, refused)
    assert _problems(refused) == {("freight.providerData", "INVALID_TEXT")}
    assert _stored_orders(engine, shop) == held


# --- path parameters --------------------------------------------------------------------------------------------

# (scope, method, path with {} where the poisoned parameter goes, the parameter, a JSON body or None)
PATH_ROUTES = [
    ("ecom", "GET", "/orders/{}", "orderIdOrNumber", None),
    ("ecom", "GET", "/skus/{}/inventory", "skuIdOrNumber", None),
    ("ecom", "GET", "/products/{}", "productId", None),
    ("ecom", "GET", "/product_schema/{}", "listName", None),
    ("ecom", "GET", "/customers/{}", "customerId", None),
    ("ecom", "GET", "/customers/{}/orders", "customerId", None),
    ("ecom", "GET", "/customers/by_email/{}", "email", None),
    ("ecom", "PUT", "/customers/{}", "customerId", {"firstName": "Kari", "lastName": "N"}),
    ("ecom", "POST", f"/orders/{new_id()}/captures/{{}}/payment_capture", "captureId", {"status": "FAILED"}),
    ("ecom", "POST", f"/orders/{{}}/refunds/{new_id()}/confirm", "orderId", {"status": "FAILED"}),
    ("admin", "GET", "/orders/{}", "orderIdOrNumber", None),
    ("admin", "POST", "/orders/{}/pick", "orderIdOrNumber", None),
    ("admin", "POST", "/orders/{}/retry", "orderIdOrNumber", None),
    ("admin", "POST", "/retail_stores/{}/release", "retailStoreNumber", None),
    ("admin", "GET", "/ecom_stores/{}/event_delivery", "eComStoreId", None),
    ("admin", "GET", "/ecom_stores/{}/dead_letters", "eComStoreId", None),
    ("admin", "POST", "/ecom_stores/{}/dead_letters/replay", "eComStoreId", {}),
]


@ONE_EXAMPLE_EACH
@given(route=st.sampled_from(PATH_ROUTES), before=SEGMENT_TEXT, control=CONTROL, after=SEGMENT_TEXT)
@example(route=PATH_ROUTES[0], before="", control="\x00", after="")  # GET …/orders/%00
@example(route=PATH_ROUTES[1], before="", control="\x00", after="")  # GET …/skus/%00/inventory
def test_a_control_character_in_a_path_parameter_is_400_naming_it(
        http, shop: Shop, admin, shared_world, document, route, before: str, control: str, after: str) -> None:
    scope, method, template, parameter, body = route
    base, headers = ((shop.prefix, shop.headers) if scope == "ecom"
                     else (f"/admin/v1/tenants/{shared_world['id']}", admin))
    path = base + template.format(quote(before + control + after, safe=""))
    response = http.request(method, path, headers=headers, **({} if body is None else {"json": body}))
    assert_response_matches(document, response)
    assert _problems(response) == {(parameter, "INVALID_PATH_PARAMETER")}


def test_cursors_and_replayed_ids_must_be_uuids(http, admin, shared_world, document) -> None:
    store = client_of(shared_world, "ecom")["resource"]
    letters = f"/admin/v1/tenants/{shared_world['id']}/ecom_stores/{store}/dead_letters"
    for after in ("\x00", "not-a-uuid", "1" * 100):
        response = http.get(letters, params={"after": after}, headers=admin)
        assert_response_matches(document, response)
        assert _problems(response) == {("after", "INVALID_ID")}
    upper = http.get(letters, params={"after": new_id().upper()}, headers=admin)
    assert upper.status_code == 200, upper.text  # a UUID in any case is one
    replay = http.post(f"{letters}/replay", json={"eventIds": [new_id(), "x\x00", "7"]}, headers=admin)
    assert_response_matches(document, replay)
    assert _problems(replay) == {("eventIds[1]", "INVALID_ID"), ("eventIds[2]", "INVALID_ID")}
    failed = http.get(f"/admin/v1/tenants/{shared_world['id']}/orders",
                      params={"processing": "FAILED", "after": "\x00"}, headers=admin)
    assert_response_matches(document, failed)
    assert _problems(failed) == {("after", "INVALID_ID")}


# --- free JSON ----------------------------------------------------------------------------------------------------


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for level in range(depth - 1):
        value = {f"level{level}": value}
    return value


def test_an_ext_nested_254_deep_is_refused_and_every_read_of_the_customer_still_works(shop: Shop, document) -> None:
    customer_id = new_id()
    path = f"{shop.prefix}/customers/{customer_id}"
    deep = shop.http.put(path, json={"firstName": "Kari", "lastName": "N", "ext": _nested(254)}, headers=shop.headers)
    assert_response_matches(document, deep)
    assert _problems(deep) == {("ext", "JSON_TOO_DEEP")}
    assert shop.http.get(path, headers=shop.headers).status_code == 404  # nothing stored
    deepest = shop.http.put(path, json={"firstName": "Kari", "lastName": "N", "ext": _nested(MAX_FREE_JSON_DEPTH)},
                            headers=shop.headers)
    assert deepest.status_code == 201, deepest.text
    read = shop.http.get(path, headers=shop.headers)
    assert_response_matches(document, read)
    assert read.json()["ext"] == _nested(MAX_FREE_JSON_DEPTH)
    one_more = shop.http.put(path, json={"ext": _nested(MAX_FREE_JSON_DEPTH + 1)}, headers=shop.headers)
    assert _problems(one_more) == {("ext", "JSON_TOO_DEEP")}
    large = {"notes": "x" * MAX_FREE_JSON_BYTES}
    too_large = shop.http.put(path, json={"ext": large}, headers=shop.headers)
    assert_response_matches(document, too_large)
    assert _problems(too_large) == {("ext", "JSON_TOO_LARGE")}
    assert shop.http.get(path, headers=shop.headers).json()["ext"] == _nested(MAX_FREE_JSON_DEPTH)  # unchanged


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=30)


def _depth(value: Any) -> int:
    if isinstance(value, dict | list):
        children = value.values() if isinstance(value, dict) else value
        return 1 + max(map(_depth, children), default=0)
    return 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ext=st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=4), wrap=st.integers(0, 3))
def test_any_ext_within_the_bounds_comes_back_as_sent_and_any_beyond_is_refused(shop: Shop, ext, wrap: int) -> None:
    """Any JSON object (NUL and control characters in its text included: JSON escapes them) is stored and read back
    equal while it is at most MAX_FREE_JSON_DEPTH deep; deeper, it is refused and nothing changes."""
    for _ in range(wrap * 10):  # deepen some examples past the bound
        ext = {"wrapped": ext}
    customer_id = new_id()
    path = f"{shop.prefix}/customers/{customer_id}"
    response = shop.http.put(path, json={"firstName": "Kari", "lastName": "N", "ext": ext}, headers=shop.headers)
    if _depth(ext) <= MAX_FREE_JSON_DEPTH:
        assert response.status_code == 201, response.text
        assert shop.http.get(path, headers=shop.headers).json()["ext"] == ext
    else:
        assert _problems(response) == {("ext", "JSON_TOO_DEEP")}
        assert shop.http.get(path, headers=shop.headers).status_code == 404


# --- destination secrets ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("secret", ["s3cret-but-with-a-\x00-nul", "tab\tin-the-middle-of-it", "zero\u200bwidth-space-x",
                                    "line-separator\u2028here-x"])
def test_a_destination_secret_must_be_printable(http, admin, shared_world, engine, document, secret: str) -> None:
    store = client_of(shared_world, "ecom", index=1)["resource"]
    response = http.put(f"/admin/v1/tenants/{shared_world['id']}/ecom_stores/{store}/event_destination",
                        json={"kind": "WEBHOOK", "url": "https://hooks.example.com/pia", "secret": secret},
                        headers=admin)
    assert_response_matches(document, response)
    assert _problems(response) == {("secret", "INVALID_SECRET")}
    assert secret not in response.text
    with engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).select_from(ecom_store_event_destinations).where(
            ecom_store_event_destinations.c.tenant_id == shared_world["id"],
            ecom_store_event_destinations.c.ecom_store_id == store)) == 0


# --- media types --------------------------------------------------------------------------------------------------

# (scope, method, path under the scope's base, a valid-looking JSON body)
# Unknown ids, fixed so that every test process collects the same tests (pytest-xdist compares them).
ONE, TWO, THREE = (f"01a00000-0000-7000-8000-00000000000{n}" for n in (1, 2, 3))
JSON_WRITES = [
    ("ecom", "POST", "/orders", None),  # the body comes from new_order() per request
    ("ecom", "PUT", f"/customers/{ONE}", {"firstName": "Kari", "lastName": "N"}),
    ("ecom", "PUT", f"/customers/{TWO}/addresses", {"deliveryAddress": None}),
    ("ecom", "PUT", "/push-customer", {"phone": "+4741234567"}),
    ("ecom", "POST", "/click_and_collect", {"retailStoreId": ONE, "reservationName": "x", "lineItems": []}),
    ("ecom", "POST", f"/orders/{ONE}/captures/{TWO}/payment_capture", {"status": "FAILED"}),
    ("ecom", "POST", f"/orders/{ONE}/refunds/{THREE}/confirm", {"status": "FAILED"}),
    ("admin", "POST", "/backoffice", {}),
    ("admin", "POST", "/stock_adjustments", {"locationNumber": "9001", "skuNumber": "x", "onHandDelta": "1"}),
    ("admin", "POST", "/orders/100001/pick", {"lines": []}),
    ("admin", "POST", "/orders/100001/ship", {"receiptId": THREE}),
    ("admin", "POST", "/orders/100001/returns", {}),
    ("admin", "POST", "/orders/100001/cancel", {}),
]
NOT_JSON = [None, "text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin-1",
            "application/jsonx"]


@pytest.mark.parametrize("content_type", NOT_JSON)
@pytest.mark.parametrize("route", JSON_WRITES, ids=lambda route: f"{route[1]} {route[2]}")
def test_a_json_write_route_takes_only_application_json(http, shop: Shop, admin, shared_world, engine, document,
                                                        route, content_type: str | None) -> None:
    scope, method, path, body = route
    base, headers = ((shop.prefix, shop.headers) if scope == "ecom"
                     else (f"/admin/v1/tenants/{shared_world['id']}", admin))
    held = _stored_orders(engine, shop)
    content = json.dumps(new_order(order_line(shop.regular_sku())) if body is None else body).encode()
    sent = {**headers, **({"Content-Type": content_type} if content_type else {})}
    response = http.request(method, base + path, content=content, headers=sent)
    assert_response_matches(document, response)
    assert (response.status_code, response.json()["error"]) == (415, "UNSUPPORTED_MEDIA_TYPE"), response.text
    assert _stored_orders(engine, shop) == held


def test_json_with_a_utf8_charset_is_taken_and_an_optional_body_may_be_left_out(http, shop: Shop, admin,
                                                                                  shared_world) -> None:
    order = new_order(order_line(shop.regular_sku()))
    taken = http.post(shop.prefix + "/orders", content=json.dumps(order).encode(),
                      headers={**shop.headers, "Content-Type": "Application/JSON; charset=\"UTF-8\""})
    assert taken.status_code == 202, taken.text
    # An order operation without a body means "every unit": no Content-Type is needed.
    orders_path = f"/admin/v1/tenants/{shared_world['id']}/orders/{taken.json()['id']}"
    bare = http.post(f"{orders_path}/cancel", headers=admin)
    assert (bare.status_code, bare.json()["status"]) == (200, "CANCELLED"), bare.text
    # A route without a body takes none, and the token endpoint keeps taking a form.
    retried = http.post(f"{orders_path}/retry", headers=admin)
    assert (retried.status_code, retried.json()["status"]) == (200, "CANCELLED"), retried.text
    ecom = client_of(shared_world, "ecom")
    token = http.post("/oauth2/token", data={"grant_type": "client_credentials", "tenant_id": shared_world["id"]},
                      auth=(ecom["clientId"], ecom["clientSecret"]))
    assert token.status_code == 200, token.text

