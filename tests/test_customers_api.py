"""Customers over real HTTP on both backends: create and change, lookups, uniqueness under concurrency,
validation that lists every problem, and the tenant as the customers' boundary."""

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import jsonschema
import pytest
import sqlalchemy as sa

from contracts.customers import Customer
from db.ids import new_id
from db.schema import customers, event_outbox
from tests.conftest import bearer, client_of


def tomorrow() -> str:
    """The first day in the future, taken when the request is made: a constant taken at import went stale when a
    run crossed midnight (UTC) between collecting the tests and running them."""
    return (datetime.now(UTC).date() + timedelta(days=1)).isoformat()


CUSTOMER_SCHEMA = Customer.model_json_schema()


class Shop:
    """An eCom store's client of a world: requests under its prefix with its token."""

    def __init__(self, http: httpx.Client, world: dict[str, Any], token: str, index: int = 0) -> None:
        self.http, self.world = http, world
        self.prefix = f"/v1/tenants/{world['id']}/ecom_stores/{client_of(world, 'ecom', index=index)['resource']}"
        self.headers = bearer(token)

    def put(self, path: str, body: Any) -> httpx.Response:
        return self.http.put(self.prefix + path, json=body, headers=self.headers)

    def get(self, path: str) -> httpx.Response:
        return self.http.get(self.prefix + path, headers=self.headers)


def _shop(http: httpx.Client, cached_token, world: dict[str, Any], index: int = 0) -> Shop:
    return Shop(http, world, cached_token(world, client_of(world, "ecom", index=index)), index)


@pytest.fixture
def shop(http, cached_token, shared_world) -> Shop:
    return _shop(http, cached_token, shared_world)


def _email() -> str:
    return f"kari.{new_id()[-12:]}@example.no"


def _phone() -> str:
    """A valid Norwegian mobile number nobody else in the session has (a mobile range and 6 random digits)."""
    draw = int(new_id().replace("-", "")[-12:], 16)
    return f"+47{('41', '46', '47', '48', '90', '92', '95', '97')[draw % 8]}{draw // 8 % 10**6:06d}"


def _address(**more: Any) -> dict[str, Any]:
    return {"street": "Bryggen 1", "postCode": "5003", "city": "Bergen", "countryIsoCode": "NO", **more}


def _new_customer(shop: Shop, **fields: Any) -> dict[str, Any]:
    response = shop.put(f"/customers/{new_id()}", {"firstName": "Kari", "lastName": "Nordmann", **fields})
    assert response.status_code == 201, response.text
    jsonschema.validate(response.json(), CUSTOMER_SCHEMA)  # the shape the OpenAPI document declares
    return response.json()


def _errors(response: httpx.Response) -> set[tuple[str, str]]:
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"] == "INVALID_REQUEST"
    return {(error["path"], error["code"]) for error in body["details"]["errors"]}


def test_put_creates_then_changes_only_the_fields_sent(shop: Shop, shared_world) -> None:
    customer_id, email, phone = new_id(), _email(), _phone()
    program = shared_world["loyaltyPrograms"][0]["id"]
    created = shop.put(f"/customers/{customer_id}", {
        "firstName": "Kari", "lastName": "Nordmann", "email": email, "phone": phone, "birthDate": "1990-05-17",
        "deliveryAddress": _address(name="Kari Nordmann", phone=phone), "invoiceAddress": _address(),
        "loyaltyMemberships": [{"loyaltyProgramId": program, "memberNumber": "FV-1", "memberSince": "2024-01-02"}],
        "ext": {"crm": {"segment": "gold"}, "score": 7}})
    assert created.status_code == 201, created.text
    record = created.json()
    assert record == {
        "id": customer_id, "firstName": "Kari", "lastName": "Nordmann", "email": email, "phone": phone,
        "birthDate": "1990-05-17",
        "deliveryAddress": {**_address(), "name": "Kari Nordmann", "email": None, "phone": phone},
        "invoiceAddress": {**_address(), "email": None},
        "loyaltyMemberships": [{"loyaltyProgramId": program, "memberNumber": "FV-1", "memberSince": "2024-01-02"}],
        "ext": {"crm": {"segment": "gold"}, "score": 7},
        "createdTime": record["createdTime"], "modifiedTime": record["createdTime"]}
    jsonschema.validate(record, CUSTOMER_SCHEMA)

    # Absent keeps, null clears.
    changed = shop.put(f"/customers/{customer_id}", {"lastName": "Berg", "birthDate": None, "invoiceAddress": None,
                                                     "loyaltyMemberships": None, "ext": None})
    assert changed.status_code == 200, changed.text
    after = changed.json()
    assert after == {**record, "lastName": "Berg", "birthDate": None, "invoiceAddress": None,
                     "loyaltyMemberships": [], "ext": {}, "modifiedTime": after["modifiedTime"]}
    assert after["modifiedTime"] > record["modifiedTime"]
    assert shop.get(f"/customers/{customer_id}").json() == after


def test_the_same_body_again_changes_nothing(shop: Shop) -> None:
    customer_id = new_id()
    body = {"firstName": "Ola", "lastName": "Nordmann", "email": _email(), "phone": _phone(),
            "deliveryAddress": _address(), "ext": {"a": [1, 2]}}
    first = shop.put(f"/customers/{customer_id}", body)
    assert first.status_code == 201, first.text
    for again in (body, {"firstName": "Ola"}, {}):
        repeated = shop.put(f"/customers/{customer_id}", again)
        assert repeated.status_code == 200, repeated.text
        assert repeated.json() == first.json()  # modifiedTime included
    # The phone written another way is the same phone.
    formatted = body["phone"][:3] + " " + body["phone"][3:6] + " " + body["phone"][6:]
    assert shop.put(f"/customers/{customer_id}", {"phone": formatted}).json() == first.json()


def test_get_unknown_or_malformed_id_is_404(shop: Shop) -> None:
    for customer_id in (new_id(), "not-a-uuid", "by_email"):
        response = shop.get(f"/customers/{customer_id}")
        assert response.status_code == 404, response.text
        assert response.json()["error"] == "CUSTOMER_NOT_FOUND"


def test_customer_id_must_be_a_uuid(shop: Shop) -> None:
    response = shop.put("/customers/12345", {"firstName": "Kari", "lastName": "Nordmann", "email": "nope"})
    assert _errors(response) == {("customerId", "INVALID_ID"), ("email", "INVALID_EMAIL")}
    # An upper-case UUID names the same customer as its lower-case form.
    customer_id = new_id()
    assert shop.put(f"/customers/{customer_id.upper()}", {"firstName": "A", "lastName": "B"}).status_code == 201
    assert shop.get(f"/customers/{customer_id}").json()["id"] == customer_id


def test_every_store_of_the_tenant_sees_the_customer_and_no_other_tenant(http, cached_token, shop: Shop,
                                                                        shared_other_world) -> None:
    customer = _new_customer(shop, email=_email())
    second_store = _shop(http, cached_token, shop.world, index=1)
    assert second_store.prefix != shop.prefix
    assert second_store.get(f"/customers/{customer['id']}").json() == customer
    assert second_store.get(f"/customers/by_email/{customer['email']}").json() == customer

    stranger = _shop(http, cached_token, shared_other_world)
    for path in (f"/customers/{customer['id']}", f"/customers/by_email/{customer['email']}"):
        response = stranger.get(path)
        assert response.status_code == 404, response.text
        assert response.json()["error"] == "CUSTOMER_NOT_FOUND"
    assert stranger.put(f"/customers/{customer['id']}/addresses", {}).status_code == 404
    # Caller-chosen ids are the tenant's own: the other tenant may use the same id and e-mail for its customer.
    same = stranger.put(f"/customers/{customer['id']}", {"firstName": "Other", "lastName": "Tenant",
                                                         "email": customer["email"]})
    assert same.status_code == 201, same.text
    assert shop.get(f"/customers/{customer['id']}").json() == customer


def test_addresses_are_set_kept_and_cleared(shop: Shop) -> None:
    customer = _new_customer(shop, invoiceAddress=_address())
    path = f"/customers/{customer['id']}/addresses"
    delivery = _address(name="Kari", email="Kari@Example.NO", phone="+47 412 34 567", city="Oslo")
    response = shop.put(path, {"deliveryAddress": delivery})
    assert response.status_code == 200, response.text
    record = response.json()
    assert record["deliveryAddress"] == {**delivery, "email": "Kari@example.no", "phone": "+4741234567"}
    assert record["invoiceAddress"] == {**_address(), "email": None}  # absent: kept
    assert record["modifiedTime"] > customer["modifiedTime"]

    cleared = shop.put(path, {"invoiceAddress": None}).json()
    assert cleared["invoiceAddress"] is None and cleared["deliveryAddress"] == record["deliveryAddress"]

    errors = _errors(shop.put(path, {"deliveryAddress": {"street": 7, "city": "Oslo", "countryIsoCode": "nor",
                                                         "phone": "12345"},
                                     "invoiceAddress": "Bryggen 1"}))
    assert errors == {("deliveryAddress.street", "INVALID_TYPE"), ("deliveryAddress.postCode", "REQUIRED"),
                      ("deliveryAddress.countryIsoCode", "INVALID_COUNTRY_CODE"),
                      ("deliveryAddress.phone", "INVALID_PHONE"), ("invoiceAddress", "INVALID_TYPE")}

    unknown = shop.put(f"/customers/{new_id()}/addresses", {"deliveryAddress": _address()})
    assert unknown.status_code == 404 and unknown.json()["error"] == "CUSTOMER_NOT_FOUND"


def test_push_customer_finds_the_customer_by_phone(shop: Shop) -> None:
    phone = _phone()
    created = shop.put("/push-customer", {"phone": phone, "firstName": "Per", "lastName": "Hansen"})
    assert created.status_code == 201, created.text
    customer = created.json()
    assert created.headers["Location"] == f"{shop.prefix}/customers/{customer['id']}"
    assert customer["phone"] == phone and customer["id"] != ""

    email = _email()
    spaced = f"{phone[:3]} {phone[3:]}"
    updated = shop.put("/push-customer", {"phone": spaced, "email": email})
    assert updated.status_code == 200, updated.text
    assert updated.json() == {**customer, "email": email, "modifiedTime": updated.json()["modifiedTime"]}
    assert shop.get(f"/customers/{customer['id']}").json() == updated.json()
    again = shop.put("/push-customer", {"phone": phone, "email": email})
    assert again.status_code == 200 and again.json() == updated.json()  # modifiedTime unchanged

    assert _errors(shop.put("/push-customer", {"firstName": "Per"})) == {("phone", "REQUIRED")}
    assert _errors(shop.put("/push-customer", {"phone": None})) == {("phone", "INVALID_TYPE")}
    assert _errors(shop.put("/push-customer", {"phone": _phone()})) == {("firstName", "REQUIRED"),
                                                                        ("lastName", "REQUIRED")}


def test_lookup_by_email_is_url_decoded_and_case_insensitive(shop: Shop) -> None:
    tag = new_id()[-8:]
    customer = _new_customer(shop, email=f"Anna.Berg+shop{tag}@Example.NO")
    assert customer["email"] == f"Anna.Berg+shop{tag}@example.no"  # the domain normalized, the local part kept
    for sent in (f"Anna.Berg%2Bshop{tag}%40Example.NO", f"anna.berg%2bshop{tag}%40EXAMPLE.no",
                 f"Anna.Berg+shop{tag}@Example.NO"):  # a + in a path is a plus, never a space
        response = shop.get(f"/customers/by_email/{sent}")
        assert response.status_code == 200, (sent, response.text)
        assert response.json() == customer
    for missing in (f"Anna.Berg%20shop{tag}%40Example.NO", f"Anna.Bergshop{tag}@Example.NO", "not-an-address"):
        response = shop.get(f"/customers/by_email/{missing}")
        assert response.status_code == 404, (missing, response.text)
        assert response.json()["error"] == "CUSTOMER_NOT_FOUND"


def test_email_and_phone_belong_to_one_customer(shop: Shop) -> None:
    first = _new_customer(shop, email=_email(), phone=_phone())
    second = _new_customer(shop)
    for body, fields in (({"email": first["email"].upper()}, ["email"]), ({"phone": first["phone"]}, ["phone"]),
                         ({"email": first["email"], "phone": first["phone"]}, ["email", "phone"])):
        response = shop.put(f"/customers/{second['id']}", body)
        assert response.status_code == 409, response.text
        assert response.json()["error"] == "CUSTOMER_CONFLICT"
        assert response.json()["details"]["conflicts"] == [{"field": field, "existingCustomerId": first["id"]}
                                                            for field in fields]
    assert shop.get(f"/customers/{second['id']}").json() == second  # nothing of the refused writes stored
    # push-customer finds the phone's owner, whose e-mail it then may not take from another.
    taken = shop.put("/push-customer", {"phone": first["phone"], "email": _new_customer(shop, email=_email())["email"]})
    assert taken.status_code == 409 and taken.json()["details"]["conflicts"][0]["field"] == "email"
    # Clearing frees the address for another customer.
    assert shop.put(f"/customers/{first['id']}", {"email": None}).status_code == 200
    assert shop.put(f"/customers/{second['id']}", {"email": first["email"]}).status_code == 200


def _race(server_url: str, requests: list[tuple[str, dict[str, Any]]], headers: dict[str, str]) -> list[httpx.Response]:
    """Send every (path, body) PUT at once, each from its own thread and connection."""
    start = threading.Barrier(len(requests))
    answers: list[httpx.Response | None] = [None] * len(requests)

    def send(index: int, path: str, body: dict[str, Any]) -> None:
        with httpx.Client(base_url=server_url, timeout=60) as client:
            start.wait()
            answers[index] = client.put(path, json=body, headers=headers)

    threads = [threading.Thread(target=send, args=(i, path, body)) for i, (path, body) in enumerate(requests)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [answer for answer in answers if answer is not None]


@pytest.mark.parametrize("field", ["email", "phone"])
def test_twenty_concurrent_creates_with_one_email_or_phone_leave_one_customer(server, shop: Shop, engine,
                                                                               field: str) -> None:
    value = _email() if field == "email" else _phone()
    body = {"firstName": "Samtidig", "lastName": "Kunde", field: value}
    answers = _race(server.url, [(f"{shop.prefix}/customers/{new_id()}", body) for _ in range(20)], shop.headers)
    assert Counter(answer.status_code for answer in answers) == {201: 1, 409: 19}, [a.text for a in answers]
    winner = next(answer.json() for answer in answers if answer.status_code == 201)
    for answer in answers:
        if answer.status_code == 409:
            assert answer.json()["error"] == "CUSTOMER_CONFLICT"
            assert answer.json()["details"]["conflicts"] == [{"field": field, "existingCustomerId": winner["id"]}]
    column = customers.c.email if field == "email" else customers.c.phone
    with engine.connect() as conn:
        held = conn.execute(sa.select(customers.c.id).where(customers.c.tenant_id == shop.world["id"],
                                                            column == value)).scalars().all()
    assert held == [winner["id"]]


def test_concurrent_pushes_of_one_phone_make_one_customer(server, shop: Shop, engine) -> None:
    phone = _phone()
    bodies = [{"phone": phone, "firstName": "Push", "lastName": f"Nr {i}"} for i in range(10)]
    answers = _race(server.url, [(f"{shop.prefix}/push-customer", body) for body in bodies], shop.headers)
    assert Counter(answer.status_code for answer in answers) == {201: 1, 200: 9}, [a.text for a in answers]
    assert len({answer.json()["id"] for answer in answers}) == 1
    with engine.connect() as conn:
        assert conn.scalar(sa.select(sa.func.count()).where(customers.c.tenant_id == shop.world["id"],
                                                            customers.c.phone == phone)) == 1


def test_concurrent_creates_of_one_id_make_one_customer(server, shop: Shop) -> None:
    path = f"{shop.prefix}/customers/{new_id()}"
    answers = _race(server.url, [(path, {"firstName": "Same", "lastName": "Id"})] * 10, shop.headers)
    assert Counter(answer.status_code for answer in answers) == {201: 1, 200: 9}, [a.text for a in answers]
    assert len({answer.json()["modifiedTime"] for answer in answers}) == 1


def test_validation_lists_every_problem_and_stores_nothing(shop: Shop, shared_world) -> None:
    customer_id = new_id()
    response = shop.put(f"/customers/{customer_id}", {
        "firstName": None, "lastName": "", "email": "anna@", "phone": "+47 12", "birthDate": "1990-02-30",
        "deliveryAddress": {"street": "Bryggen 1", "postCode": "5003", "city": ["Bergen"], "countryIsoCode": "no",
                            "email": "x"},
        "invoiceAddress": {"postCode": 5003},
        "loyaltyMemberships": [{"loyaltyProgramId": shared_world["loyaltyPrograms"][0]["id"], "memberNumber": "1",
                                "memberSince": tomorrow()}, {"memberNumber": " x"}],
        "ext": ["not", "an", "object"]})
    assert _errors(response) == {
        ("firstName", "REQUIRED"), ("lastName", "REQUIRED"), ("email", "INVALID_EMAIL"), ("phone", "INVALID_PHONE"),
        ("birthDate", "INVALID_DATE"), ("deliveryAddress.city", "INVALID_TYPE"),
        ("deliveryAddress.countryIsoCode", "INVALID_COUNTRY_CODE"), ("deliveryAddress.email", "INVALID_EMAIL"),
        ("invoiceAddress.street", "REQUIRED"), ("invoiceAddress.postCode", "INVALID_TYPE"),
        ("invoiceAddress.city", "REQUIRED"), ("invoiceAddress.countryIsoCode", "REQUIRED"),
        ("loyaltyMemberships[0].memberSince", "INVALID_DATE"), ("loyaltyMemberships[1].loyaltyProgramId", "REQUIRED"),
        ("loyaltyMemberships[1].memberNumber", "INVALID_VALUE"), ("loyaltyMemberships[1].memberSince", "REQUIRED"),
        ("ext", "INVALID_TYPE")}
    assert all(error["message"] for error in response.json()["details"]["errors"])
    assert _errors(shop.put(f"/customers/{customer_id}", {"firstName": "A", "lastName": "B",
                                                          "birthDate": tomorrow()})) == {("birthDate", "INVALID_DATE")}
    assert _errors(shop.put(f"/customers/{customer_id}", {"lastName": "B"})) == {("firstName", "REQUIRED")}
    assert shop.get(f"/customers/{customer_id}").status_code == 404


def test_unparseable_json_is_bad_request_and_unknown_fields_are_ignored(shop: Shop) -> None:
    customer_id = new_id()
    broken = shop.http.put(f"{shop.prefix}/customers/{customer_id}", content=b'{"firstName": "Kari",',
                           headers={**shop.headers, "Content-Type": "application/json"})
    assert broken.status_code == 400 and broken.json()["error"] == "BAD_REQUEST"
    assert _errors(shop.put(f"/customers/{customer_id}", ["Kari"])) == {("$", "INVALID_TYPE")}
    created = shop.put(f"/customers/{customer_id}", {"firstName": "Kari", "lastName": "N", "shoeSize": 38,
                                                     "deliveryAddress": _address(floor=3)})
    assert created.status_code == 201, created.text
    assert "shoeSize" not in created.json() and "floor" not in created.json()["deliveryAddress"]


def test_loyalty_memberships_must_name_the_tenants_programs(shop: Shop, shared_world, shared_other_world) -> None:
    program = shared_world["loyaltyPrograms"][0]["id"]
    foreign = shared_other_world["loyaltyPrograms"][0]["id"]
    customer = _new_customer(shop)
    path = f"/customers/{customer['id']}"
    member = {"loyaltyProgramId": program, "memberNumber": "FV-9", "memberSince": "2025-03-01"}
    errors = _errors(shop.put(path, {"loyaltyMemberships": [member, {**member, "loyaltyProgramId": foreign},
                                                            member]}))
    assert errors == {("loyaltyMemberships[1].loyaltyProgramId", "UNKNOWN_LOYALTY_PROGRAM"),
                      ("loyaltyMemberships[2].loyaltyProgramId", "DUPLICATE_LOYALTY_PROGRAM")}
    joined = shop.put(path, {"loyaltyMemberships": [member]})
    assert joined.status_code == 200 and joined.json()["loyaltyMemberships"] == [member]
    renumbered = shop.put(path, {"loyaltyMemberships": [{**member, "memberNumber": "FV-10"}]}).json()
    assert renumbered["loyaltyMemberships"] == [{**member, "memberNumber": "FV-10"}]
    assert shop.put(path, {"loyaltyMemberships": []}).json()["loyaltyMemberships"] == []


def test_customer_writes_emit_no_events(shop: Shop, engine) -> None:
    def outbox_rows() -> int:
        with engine.connect() as conn:
            return conn.scalar(sa.select(sa.func.count()).where(event_outbox.c.tenant_id == shop.world["id"]))

    before = outbox_rows()
    customer = _new_customer(shop, phone=_phone())
    shop.put(f"/customers/{customer['id']}/addresses", {"deliveryAddress": _address()})
    shop.put("/push-customer", {"phone": customer["phone"], "lastName": "Endret"})
    assert outbox_rows() == before
