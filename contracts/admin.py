"""The admin API's bodies (/admin/v1/tenants/{tenantId}/…): what the back office sends and gets back.

Requests are checked with these models (serving/validation.py turns every problem into a path and a code);
responses are rendered from store results and only documented here.
"""

import re
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    RootModel,
    SecretStr,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)
from pydantic_core import PydanticCustomError

from contracts import backoffice_schema
from contracts.click_and_collect import Shortages
from contracts.formats import DECIMAL, KEY, TEXT, TextFormat, key_problem
from contracts.limits import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE
from contracts.models import (
    DecimalString,
    Error,
    Id,
    Instant,
    Problems,
    Shape,
    Uuid,
    absent_or_given,
    exactly_one_of,
    refusing,
)

LOCATION_TYPES = ("WAREHOUSE", "RETAIL_STORE")
DESTINATION_KINDS = ("SERVICE_BUS", "WEBHOOK")
# http is allowed only where nothing crosses a network: a receiver on the same machine.
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
MAX_URL_LENGTH = 1000  # ecom_store_event_destinations.endpoint
MAX_REASON_LENGTH = 200


PRINTABLE_ASCII = TextFormat("[ -~]*")


def _unprintable(text: str) -> str | None:
    odd = next(character for character in text if not PRINTABLE_ASCII.matches(character))
    return f"must hold printable ASCII characters only, not U+{ord(odd):04X}."


def _signed_decimal(value: Any) -> Decimal:
    # Strings only, as everywhere in the contract: a JSON number would be read through a binary float.
    text = value[1:] if isinstance(value, str) and value.startswith("-") else value
    if not isinstance(text, str) or not DECIMAL.matches(text):
        raise PydanticCustomError("INVALID_DECIMAL", "Must be a decimal string such as \"5\", \"-2\" or \"12.5\" "
                                  "(at most 14 digits before the point and 4 after it).")
    return Decimal(value)


def _host_name(value: Any) -> Any:
    """A Service Bus namespace host name, also accepted as the connection string's `sb://host/`."""
    if not isinstance(value, str):
        return value
    host = value.removeprefix("sb://").removesuffix("/").lower()
    labels = host.split(".")
    if (len(host) > 253 or len(labels) < 2
            or not all(re.fullmatch(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?", label) for label in labels)):
        raise PydanticCustomError("INVALID_HOST_NAME", "Must be the namespace's host name, such as "
                                  "\"contoso.servicebus.windows.net\" (or \"sb://contoso.servicebus.windows.net/\").")
    return host


def _webhook_url(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    invalid = PydanticCustomError("INVALID_URL", "Must be an absolute https URL without credentials or fragment.")
    if not TEXT.matches(value) or " " in value:
        raise invalid
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        raise invalid from None
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.username or parts.password \
            or parts.fragment:
        raise invalid
    if parts.scheme == "http" and parts.hostname not in LOCAL_HOSTS:
        raise PydanticCustomError("INSECURE_URL", "Must use https; http is allowed only for localhost.")
    return value


Key = Annotated[str, Field(min_length=1, max_length=64), refusing("INVALID_KEY", "The key", key_problem, KEY)]
SignedDecimal = Annotated[Decimal, BeforeValidator(_signed_decimal),
                          WithJsonSchema({"type": "string", "pattern": TextFormat(f"-?(?:{DECIMAL.core})").json_schema,
                                          "examples": ["5", "-2", "12.5"]})]
# A Service Bus namespace's host name (labels of letters, digits and inner hyphens), also as `sb://host/`.
_LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOST_NAME = TextFormat(f"(?:sb://)?{_LABEL}(?:\\.{_LABEL})+/?")
# A webhook URL as the checks above take it: https, or http to this machine; a port; no credentials or fragment.
_URL_REST = "(?::[0-9]{1,4})?(?:[/?][^\\u0000-\\u0020\\u007F-\\u009F#]*)?"
WEBHOOK_URL = TextFormat(f"https://[A-Za-z0-9](?:[A-Za-z0-9.-]{{0,251}}[A-Za-z0-9])?{_URL_REST}"
                         f"|http://(?:localhost|127\\.0\\.0\\.1|\\[::1\\]){_URL_REST}")
# Sealed at rest and never returned or logged; SecretStr keeps it out of reprs. Printable ASCII only: a secret is
# typed or pasted (keys are base64 or hex), and anything else in one is a mistake that would fail delivery much later.
Secret = Annotated[SecretStr, Field(min_length=16, max_length=1024, json_schema_extra={"writeOnly": True}),
                   refusing("INVALID_SECRET", "The secret", _unprintable, PRINTABLE_ASCII)]


def _inlined_backoffice_schema() -> dict[str, Any]:
    """The back-office document's JSON Schema with its `$defs` written in place, for the OpenAPI document."""
    schema = backoffice_schema.schema()
    definitions = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:  # the definition, with any sibling keywords (a description) on top
                siblings = {name: value for name, value in node.items() if name != "$ref"}
                return resolve({**definitions[node["$ref"].removeprefix("#/$defs/")], **siblings})
            return {name: resolve(value) for name, value in node.items() if name not in ("$schema", "$id")}
        if isinstance(node, list):
            return [resolve(item) for item in node]
        return node

    return resolve(schema)


class BackofficeDocument(RootModel[dict[str, Any]]):
    """The back-office document (contracts/backoffice.schema.json)."""

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        # db.backoffice checks documents against that JSON Schema; this model only documents it.
        return _inlined_backoffice_schema()


class ReleasedOrderUnits(Shape):
    ownerType: Literal["ORDER_LINE"]
    orderId: Id
    orderNumber: str
    lineItemId: Id
    locationId: Id
    skuId: Id
    quantity: DecimalString = Field(description="Units of the line that wait for stock again (a backorder).")


class ShortCartUnits(Shape):
    ownerType: Literal["CART_LINE"]
    parkedCartId: Id
    cartLineId: Id
    locationId: Id
    skuId: Id
    quantity: DecimalString = Field(description="Units of the cart line marked short.")


class ReleasedReservation(RootModel[Annotated[ReleasedOrderUnits | ShortCartUnits, Field(discriminator="ownerType")]]):
    """Reserved units that on hand set below what was reserved took back, newest reservations first; units in a
    capture waiting for its payment report are never taken back."""


class EntityCounts(Shape):
    created: int
    updated: int
    unchanged: int


class LoadReport(Shape):
    changed: bool = Field(description="False when the document held nothing new (loading is idempotent).")
    counts: dict[str, EntityCounts]
    deleted: dict[str, int] = Field(description="Rows removed from the lists a document names whole "
                                                "(assortment lines, loyalty program stores).")
    released: list[ReleasedReservation] = Field(description="What stock set below what was reserved took back.")


class StockAdjustment(Shape):
    """Exactly one of onHandDelta (added to on hand, may be negative) and onHand (the counted quantity). On hand below
    what is reserved is accepted: the shortfall is taken back from the newest reservations at the location."""

    model_config = ConfigDict(json_schema_extra=exactly_one_of("onHandDelta", "onHand"))

    locationNumber: Key
    locationType: Literal["WAREHOUSE", "RETAIL_STORE"] | None = Field(
        default=None, description="Needed only when a warehouse and a retail store share the number.")
    skuNumber: Key
    onHandDelta: SignedDecimal | None = Field(None, json_schema_extra=absent_or_given)
    onHand: SignedDecimal | None = Field(default=None, validate_default=True, json_schema_extra=absent_or_given)
    reason: Annotated[str, Field(max_length=MAX_REASON_LENGTH, pattern=r"^[^\x00-\x1f\x7f-\x9f]*$",
                                 json_schema_extra={"pattern": TEXT.json_schema})] | None = None

    @field_validator("onHand")
    @classmethod
    def _exactly_one(cls, on_hand: Decimal | None, info: ValidationInfo) -> Decimal | None:
        # Runs even when onHand is absent (validate_default), so "neither" is reported too.
        if (on_hand is None) == (info.data.get("onHandDelta") is None):
            raise PydanticCustomError("ONE_OF_REQUIRED", "Give exactly one of onHandDelta and onHand.")
        return on_hand


class StockLevel(Shape):
    locationId: Id
    locationNumber: str
    locationName: str
    locationType: Literal["WAREHOUSE", "RETAIL_STORE"]
    skuId: Id
    skuNumber: str
    onHand: DecimalString
    reserved: DecimalString
    available: DecimalString = Field(description="max(onHand − reserved, 0)")
    modifiedTime: Instant | None
    changed: bool = Field(description="False when the adjustment left on hand as it was (no event written).")
    released: list[ReleasedReservation] = Field(description="What a count below what was reserved took back (empty "
                                                "otherwise).")


class VisitAddress(Shape):
    street: str | None
    postCode: str | None
    city: str | None
    countryIsoCode: str | None


class ReleasedRetailStore(Shape):
    id: Id
    number: str
    name: str
    status: Literal["RELEASED", "NOT_RELEASED"]
    visitAddress: VisitAddress
    changed: bool = Field(description="False when the store was already released (no event written).")


class DestinationKind(Shape):
    kind: Literal["SERVICE_BUS", "WEBHOOK"]


class ServiceBusDestination(Shape):
    kind: Literal["SERVICE_BUS"]
    endpoint: Annotated[str, Field(max_length=253, examples=["contoso.servicebus.windows.net"],
                                   json_schema_extra={"pattern": HOST_NAME.json_schema}), BeforeValidator(_host_name)]
    entityPath: Annotated[str, Field(pattern=r"^[A-Za-z0-9](?:[A-Za-z0-9._/-]{0,258}[A-Za-z0-9])?$",
                                     description="Queue or topic name.", json_schema_extra={"pattern": TextFormat(
                                         "[A-Za-z0-9](?:[A-Za-z0-9._/-]{0,258}[A-Za-z0-9])?").json_schema})]
    sharedAccessKeyName: Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{1,256}$", json_schema_extra={
        "pattern": TextFormat("[A-Za-z0-9._-]{1,256}").json_schema})]
    sharedAccessKey: Secret


class WebhookDestination(Shape):
    kind: Literal["WEBHOOK"]
    url: Annotated[str, Field(max_length=MAX_URL_LENGTH, examples=["https://hooks.example.com/pia"],
                              json_schema_extra={"pattern": WEBHOOK_URL.json_schema}), BeforeValidator(_webhook_url)]
    secret: Secret = Field(description="Signs each delivery; 16 to 1,024 characters.")


DESTINATION_MODELS: dict[str, type[ServiceBusDestination | WebhookDestination]] = {
    "SERVICE_BUS": ServiceBusDestination, "WEBHOOK": WebhookDestination}


# The route checks `kind` first, then the kind's own model, so problems are reported at their fields (a checked
# union would prefix the tag to each path); this union only documents the body.
class EventDestinationRequest(RootModel[Annotated[ServiceBusDestination | WebhookDestination,
                                                  Field(discriminator="kind")]]):
    """An Azure Service Bus queue or topic, or a webhook; `kind` says which."""


class _DestinationAnswer(BaseModel):
    ecomStoreId: Id
    secretSet: Literal[True] = Field(description="A secret is stored (sealed); it is never returned.")
    modifiedTime: Instant


class ServiceBusDestinationAnswer(_DestinationAnswer):
    kind: Literal["SERVICE_BUS"]
    endpoint: str
    entityPath: str
    sharedAccessKeyName: str


class WebhookDestinationAnswer(_DestinationAnswer):
    kind: Literal["WEBHOOK"]
    url: str


class EventDestination(RootModel[Annotated[ServiceBusDestinationAnswer | WebhookDestinationAnswer,
                                           Field(discriminator="kind")]]):
    """The stored destination; its secret is never returned."""


class DestinationRemoved(BaseModel):
    """Removed; nothing more is delivered to it."""

    no_body: ClassVar[bool] = True


# Event delivery as operators see it (db/event_operations.py): per eCom store, and its dead letters.


class EventDeliveryState(Shape):
    """How delivery to the eCom store's destination goes. A store the bridge has not served yet shows nulls, 0 and
    false."""

    ecomStoreId: Id
    backlog: int = Field(description="Events still to deliver: neither delivered nor dead-lettered.")
    deadLetters: int = Field(description="Events the bridge gave up on; list and replay them under dead_letters.")
    deadLettersByAnswer: dict[str, int] = Field(
        examples=[{"410": 3, "timeout": 1}],
        description="The dead letters counted by their last answer: an HTTP status, `timeout`, `unreachable`, "
                    "`entity not found`, `message too large`, … (`unrecorded`: dead-lettered before answers were "
                    "kept). A permanent answer (a 4xx other than 401/403/408/429, a redirect, an unknown entity, a "
                    "message too large) dead-letters the event after one attempt.")
    oldestUndeliveredTime: Instant | None = Field(description="When the change behind the oldest event still to "
                                                              "deliver was made; null when none waits.")
    oldestUndeliveredAgeSeconds: float | None = Field(description="How long ago that was, in seconds; null when "
                                                                  "none waits.")
    lanesInBackoff: int = Field(description="Entities whose last attempt failed and that wait out a backoff before "
                                            "trying again (their later events wait behind them; other entities' do "
                                            "not), as of the bridge's last write.")
    lastDeliveredEventId: Id | None
    lastDeliveredTime: Instant | None
    consecutiveFailures: int = Field(description="Failed deliveries since the last success.")
    lastError: str | None = Field(description="The last failure's cause (NO_DESTINATION: events were discarded "
                                              "because the store has no destination).")
    lastFailureTime: Instant | None
    credentialsRefused: bool = Field(description="The destination refused the credentials: delivery is tried "
                                                 "again only slowly until the destination is set anew.")


class DeadLetterQuery(Shape):
    limit: int = Field(DEFAULT_PAGE_SIZE, ge=1, le=MAX_PAGE_SIZE, description="Page size.")
    after: Uuid | None = Field(None, description="nextAfter of the previous page.")
    answer: str | None = Field(None, min_length=1, max_length=200, examples=["answered 500"],
                               description="Only dead letters whose last error contains this text (the destination's "
                                           "answer, such as `answered 500`); give it again with `after`.")


class DeadLetterEntry(Shape):
    eventId: Id
    subject: str = Field(examples=["ProductUpdated"])
    entityId: Id | None = Field(description="Null for schema events.")
    datetime: Instant = Field(description="When the change was made (the event message's datetime).")
    attempts: int
    lastError: str | None
    deadLetterTime: Instant


class DeadLetters(Shape):
    """Newest event first."""

    items: list[DeadLetterEntry]
    nextAfter: Id | None = Field(description="Pass as `after` for the next page; null on the last page.")


class ReplayRequest(Shape):
    """`eventIds`: replay these dead letters of the store; leave it out (`{}`) to replay all of them."""

    eventIds: list[Uuid] | None = Field(None, max_length=MAX_PAGE_SIZE)


class ReplayReport(Shape):
    replayed: int = Field(description="Dead letters put back for delivery (named ids that are not dead letters of "
                                      "the store are not counted).")


class RerunRefusedError(Error):
    """Nothing changed. BATCH_NOT_FAILED: only a FAILED batch is rerun; STAGED_FILE_GONE: retention removed its staged
    file (PIA_STAGED_RETENTION_DAYS), so upload the data again as a new batch."""

    error: Literal["BATCH_NOT_FAILED", "STAGED_FILE_GONE"]


# The order operations' refusals (serving/routes/admin_api.py); the order record itself is contracts.orders.Order.


class PickRefusedError(Error):
    """Nothing was picked. INVALID_REQUEST: every problem of the request with its path (details.errors), such as a
    line item the order does not have or more units than are open; INSUFFICIENT_INVENTORY: the order's warehouse
    lacks the units a backordered line still needs (details.skus); BAD_REQUEST: the body is not JSON."""

    error: Literal["INVALID_REQUEST", "INSUFFICIENT_INVENTORY", "BAD_REQUEST"]
    details: Shortages | Problems | None = Field(None, description="Absent with BAD_REQUEST.")


class OrderNotOpenError(Error):
    """ORDER_NOT_OPEN: the order's status does not allow it (not processed yet, cancelled, delivered), or it has
    nothing left to do; nothing changed."""

    error: Literal["ORDER_NOT_OPEN"]


# Orders that failed to open (db/order_failures.py): the admin list and an operator's retry.


class FailedOrdersQuery(Shape):
    processing: Literal["FAILED", "RETRYING"] = Field("FAILED", description="FAILED: parked after the last attempt "
                                                      "allowed (PIA_ORDER_MAX_ATTEMPTS), waiting for an operator; "
                                                      "RETRYING: failed, tried again after a backoff.")
    limit: int = Field(DEFAULT_PAGE_SIZE, ge=1, le=MAX_PAGE_SIZE, description="Page size.")
    after: Uuid | None = Field(None, description="nextAfter of the previous page.")


class OrderProcessing(Shape):
    """An order as far as its processing (RECEIVED → OPEN) goes."""

    orderId: Id
    number: str
    ecomStoreId: Id
    externalOrderId: str
    orderDate: Instant
    status: Literal["RECEIVED", "OPEN", "PARTIALLY_DELIVERED", "DELIVERED", "CANCELLED"]
    attempts: int = Field(description="Failed attempts to open it since it came in or an operator last retried it.")
    lastError: str | None = Field(description="The last attempt's error: the database's error name and message.")
    lastAttemptTime: Instant | None
    nextAttemptTime: Instant | None = Field(description="When a processor tries it again; null once parked.")
    parked: bool = Field(description="It failed every attempt allowed: it stays RECEIVED until an operator retries "
                                     "it (POST …/orders/{orderIdOrNumber}/retry).")


class FailedOrders(Shape):
    """RECEIVED orders that failed to open, in the order they came in."""

    items: list[OrderProcessing]
    nextAfter: Id | None = Field(description="Pass as `after` for the next page; null on the last page.")


class ShipRefusedError(Error):
    """Nothing was shipped. CAPTURE_NOT_CONFIRMED: the capture's payment is PENDING or FAILED; RECEIPT_ALREADY_SHIPPED:
    the receipt has its shipment."""

    error: Literal["CAPTURE_NOT_CONFIRMED", "RECEIPT_ALREADY_SHIPPED"]
