"""Customers, from the e-commerce scope: /v1/tenants/{tenantId}/ecom_stores/{eComStoreId}/customers…

Customers belong to the tenant, so every eCom store of the tenant sees the same ones. The bodies and their
decisions (absent keeps, null clears, ...) are in `contracts/customers.py`; uniqueness and concurrency in
`db/customers.py`. Customers are not in SPEC.md's event list: no outbox rows.
"""

import uuid
from datetime import date
from typing import Any

from quart import Blueprint, Response, url_for
from quart_schema import document_request, document_response

from contracts.customers import Customer, CustomerAddresses, CustomerFields, PushedCustomer, normalized_email
from contracts.errors import CustomerNotFound, InvalidRequest
from contracts.models import CustomerConflictError, CustomerNotFoundError, InvalidRequestError
from contracts.rendering import instant
from db import customers as store
from serving.jsonio import json_response
from serving.protection import protect
from serving.request_checks import json_body
from serving.services import services
from serving.threads import blocking

blueprint = Blueprint("customers", __name__, url_prefix="/v1/tenants/<tenantId>/ecom_stores/<eComStoreId>")
protect(blueprint, "ecom", resource_arg="eComStoreId")

# Wire field → the store's name for it.
_HELD_AS = {"firstName": "first_name", "lastName": "last_name", "email": "email", "phone": "phone",
            "birthDate": "birth_date", "deliveryAddress": "delivery_address", "invoiceAddress": "invoice_address",
            "loyaltyMemberships": "memberships", "ext": "ext"}


@blueprint.put("/customers/<customerId>")
@document_request(CustomerFields)
@document_response(Customer, 200)
@document_response(Customer, 201)
@document_response(InvalidRequestError, 400)
@document_response(CustomerConflictError, 409)
async def put_customer(tenantId: str, eComStoreId: str, customerId: str) -> Response:
    """Create the customer under the caller's id (201) or change the fields sent (200); 400, 409."""
    customer_id = _uuid(customerId)
    id_problems = [] if customer_id else [{"path": "customerId", "code": "INVALID_ID",
                                           "message": "The customer id must be a UUID."}]
    try:
        body = await json_body(CustomerFields)
    except InvalidRequest as invalid:
        raise InvalidRequest(id_problems + invalid.details["errors"]) from None
    if customer_id is None:
        raise InvalidRequest(id_problems)
    customer, created = await blocking(store.put_customer, services().engine, tenantId, customer_id, _changes(body))
    return json_response(customer_json(customer), 201 if created else 200)


@blueprint.get("/customers/<customerId>")
@document_response(Customer, 200)
@document_response(CustomerNotFoundError, 404)
async def get_customer(tenantId: str, eComStoreId: str, customerId: str) -> Response:
    """The customer; 404 CUSTOMER_NOT_FOUND, also for an id that is not a UUID."""
    customer_id = _uuid(customerId)
    return _found(customer_id and await blocking(store.get_customer, services().engine, tenantId, customer_id),
                  f"No customer {customerId}.")


@blueprint.put("/customers/<customerId>/addresses")
@document_request(CustomerAddresses)
@document_response(Customer, 200)
@document_response(InvalidRequestError, 400)
@document_response(CustomerNotFoundError, 404)
async def put_addresses(tenantId: str, eComStoreId: str, customerId: str) -> Response:
    """Set or clear the delivery and invoice addresses of a known customer; 400, 404 CUSTOMER_NOT_FOUND."""
    body = await json_body(CustomerAddresses)
    customer_id = _uuid(customerId)
    return _found(customer_id and await blocking(store.change_customer, services().engine, tenantId, customer_id,
                                                 _changes(body)), f"No customer {customerId}.")


@blueprint.put("/push-customer")
@document_request(PushedCustomer)
@document_response(Customer, 200)
@document_response(Customer, 201)
@document_response(InvalidRequestError, 400)
@document_response(CustomerConflictError, 409)
async def push_customer(tenantId: str, eComStoreId: str) -> Response:
    """Find the customer by phone and change the fields sent (200), or create one with a new id (201)."""
    body = await json_body(PushedCustomer)
    customer, created = await blocking(store.push_customer, services().engine, tenantId, _changes(body))
    if not created:
        return json_response(customer_json(customer))
    location = url_for("customers.get_customer", tenantId=tenantId, eComStoreId=eComStoreId, customerId=customer.id)
    return json_response(customer_json(customer), 201, {"Location": location})


# The default converter, not `path`: quart-schema 0.25 misreads `<path:…>` after other variables when it writes
# the OpenAPI path. So an address whose local part holds a slash (legal, rare) cannot be looked up here.
@blueprint.get("/customers/by_email/<email>")
@document_response(Customer, 200)
@document_response(CustomerNotFoundError, 404)
async def customer_by_email(tenantId: str, eComStoreId: str, email: str) -> Response:
    """The customer with this e-mail address (URL-decoded, compared case-insensitively); 404 CUSTOMER_NOT_FOUND."""
    normalized = normalized_email(email)
    return _found(normalized and await blocking(store.customer_by_email, services().engine, tenantId, normalized),
                  "No customer with this e-mail address.")


def _found(customer: store.Customer | None, missing: str) -> Response:
    if not customer:
        raise CustomerNotFound(missing)
    return json_response(customer_json(customer))


def _uuid(text: str) -> str | None:
    """The id in its canonical lower-case form; None unless the text is a UUID written the usual way."""
    try:
        value = str(uuid.UUID(text))
    except ValueError:
        return None
    return value if value == text.lower() else None


def _changes(body: CustomerFields | CustomerAddresses) -> dict[str, Any]:
    """The fields the body sent (absent keeps, null clears), by the store's names and in its types."""
    changes: dict[str, Any] = {}
    for wire in body.model_fields_set & _HELD_AS.keys():
        value = getattr(body, wire)
        if wire == "birthDate" and value is not None:
            value = date.fromisoformat(value)
        elif wire in ("deliveryAddress", "invoiceAddress") and value is not None:
            value = value.model_dump()
        elif wire == "loyaltyMemberships":
            value = [store.Membership(m.loyaltyProgramId, m.memberNumber, date.fromisoformat(m.memberSince))
                     for m in value or ()]
        elif wire == "ext" and value is None:
            value = {}
        changes[_HELD_AS[wire]] = value
    return changes


def customer_json(customer: store.Customer) -> dict[str, Any]:
    return {
        "id": customer.id, "firstName": customer.first_name, "lastName": customer.last_name,
        "email": customer.email, "phone": customer.phone,
        "birthDate": customer.birth_date.isoformat() if customer.birth_date else None,
        "deliveryAddress": customer.delivery_address, "invoiceAddress": customer.invoice_address,
        "loyaltyMemberships": [{"loyaltyProgramId": m.loyalty_program_id, "memberNumber": m.member_number,
                                "memberSince": m.member_since.isoformat()} for m in customer.memberships],
        "ext": customer.ext, "createdTime": instant(customer.created_time),
        "modifiedTime": instant(customer.modified_time),
    }
