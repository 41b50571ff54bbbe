"""Customer shapes (ECOMMERCE.md "Customers"): the request bodies with their field checks, and the record.

Decisions where the contract is silent:
- A write changes only the fields it sends: an absent field keeps its value, null clears it. `firstName` and
  `lastName` are needed to create a customer and cannot be cleared (null is `REQUIRED`).
- E-mail addresses are checked by email_validator without a deliverability check and kept in its normalized
  form (the domain lower-cased, the local part as sent); phones are parsed with their leading `+` by
  phonenumbers, must be valid numbers and are kept in E.164 form (`+47 412 34 567` is kept as `+4741234567`).
- Addresses need `street`, `postCode`, `city` and `countryIsoCode` (two upper-case letters); a delivery address
  may add `name`, `email` and `phone`, an invoice address `email`, checked like the customer's own.
- `birthDate` and a membership's `memberSince` are real days, not after today (UTC): `INVALID_DATE`.
- `loyaltyMemberships`, when sent, is the customer's whole list (null or [] removes every membership); each
  names a loyalty program of the tenant, at most once (`UNKNOWN_LOYALTY_PROGRAM`, `DUPLICATE_LOYALTY_PROGRAM`).
- Names and address lines are 1 to 200 characters without control characters; a member number is a key
  (1 to 64 characters, see `contracts/formats.py`).
- `ext` is an object, replaced whole when sent; `{}` when none was sent or it was cleared. It is nested at most 32
  levels deep and at most 16,384 bytes long as compact JSON (`contracts.models.FreeJson`).
"""

import re
from datetime import UTC, datetime
from typing import Annotated, Any

import phonenumbers
from email_validator import EmailNotValidError, validate_email
from pydantic import AfterValidator, Field, field_validator
from pydantic_core import PydanticCustomError

from contracts.formats import DATE, DATE_SHAPE, KEY, NAME, TEXT, TextFormat, date_value, key_problem
from contracts.models import Day, FreeJson, Id, Instant, Shape, absent_or_given

MAX_TEXT_LENGTH = 200  # String(200) in the store
# Digits after the +, with the separators people write between groups; letters (vanity numbers) are refused.
_PHONE_CHARACTERS = re.compile(r"\+[0-9 ().-]+")


def _email(text: str) -> str:
    try:
        return validate_email(text, check_deliverability=False).normalized
    except EmailNotValidError as error:
        raise PydanticCustomError("INVALID_EMAIL", "Not an e-mail address: {reason}", {"reason": str(error)}) \
            from None


def normalized_email(text: str) -> str | None:
    """The form an e-mail address is kept in, or None when the text is not an address."""
    try:
        return _email(text)
    except PydanticCustomError:
        return None


def email_problem(text: str) -> str | None:
    """Why the text is not an e-mail address (email_validator's reason), or None. The one e-mail rule: the API's
    models and the back-office checker both use it."""
    try:
        validate_email(text, check_deliverability=False)
    except EmailNotValidError as error:
        return str(error)
    return None


def email_key(normalized: str) -> str:
    """What makes two addresses one customer's: the normalized address, compared case-insensitively."""
    return normalized.lower()


def e164_phone(text: str) -> str | None:
    """The number in E.164 form, or None when the text is not a valid phone number written with its leading `+`
    (digits and the separators people write). The one phone rule of the API's models and the back-office checker."""
    if _PHONE_CHARACTERS.fullmatch(text):
        try:
            number = phonenumbers.parse(text, None)
        except phonenumbers.NumberParseException:
            return None
        if phonenumbers.is_valid_number(number):
            return phonenumbers.format_number(number, phonenumbers.PhoneNumberFormat.E164)
    return None


def _phone(text: str) -> str:
    if (number := e164_phone(text)) is not None:
        return number
    raise PydanticCustomError("INVALID_PHONE", "Not a valid phone number in E.164 form, such as +4741234567.")


def _past_day(text: str) -> str:
    day = date_value(text)
    if day is None:
        raise PydanticCustomError("INVALID_DATE", f"Not {DATE_SHAPE}.")
    if day > datetime.now(UTC).date():
        raise PydanticCustomError("INVALID_DATE", "The day lies in the future.")
    return text


def _text(text: str) -> str:
    if not text.strip():
        raise PydanticCustomError("REQUIRED", "Must not be empty.")
    if len(text) > MAX_TEXT_LENGTH or not TEXT.matches(text):
        raise PydanticCustomError("INVALID_VALUE", f"Must be at most {MAX_TEXT_LENGTH} characters long, with no "
                                                   "control characters.")
    return text


def _country(text: str) -> str:
    if not re.fullmatch(r"[A-Z]{2}", text):
        raise PydanticCustomError("INVALID_COUNTRY_CODE", "Must be an ISO 3166-1 alpha-2 code such as NO.")
    return text


def _member_number(text: str) -> str:
    problem = key_problem(text)
    if problem:
        raise PydanticCustomError("INVALID_VALUE", "memberNumber " + problem)
    return text


# What JSON Schema can say of these is in their schemas; that an address passes email-validator, a phone number is
# valid in its country and a day is not after today, it cannot.
Email = Annotated[str, AfterValidator(_email), Field(json_schema_extra={"format": "email", "maxLength": 254},
                                                     examples=["anna.berg@example.no"])]
Phone = Annotated[str, AfterValidator(_phone), Field(
    description="E.164 (separators such as spaces are also read)",
    json_schema_extra={"pattern": TextFormat(r"\+[1-9][0-9]{1,14}").json_schema}, examples=["+4741234567"])]
PastDay = Annotated[Day, AfterValidator(_past_day), Field(json_schema_extra={"pattern": DATE.json_schema})]
Text = Annotated[str, AfterValidator(_text), Field(json_schema_extra={
    "minLength": 1, "maxLength": MAX_TEXT_LENGTH, "pattern": NAME.json_schema})]
CountryCode = Annotated[str, AfterValidator(_country),
                        Field(json_schema_extra={"pattern": TextFormat("[A-Z]{2}").json_schema}, examples=["NO"])]
MemberNumber = Annotated[str, AfterValidator(_member_number),
                         Field(json_schema_extra={"pattern": KEY.json_schema})]


class InvoiceAddress(Shape):
    street: Text
    postCode: Text
    city: Text
    countryIsoCode: CountryCode
    email: Email | None = None


class DeliveryAddress(InvoiceAddress):
    name: Text | None = None
    phone: Phone | None = None


class LoyaltyMembership(Shape):
    loyaltyProgramId: Id
    memberNumber: MemberNumber
    memberSince: PastDay


class CustomerFields(Shape):
    """The body of PUT /customers/{customerId}: the fields to set; absent keeps, null clears."""

    # Absent keeps a name; null is refused (a customer keeps one).
    firstName: Text | None = Field(None, json_schema_extra=absent_or_given)
    lastName: Text | None = Field(None, json_schema_extra=absent_or_given)
    email: Email | None = None
    phone: Phone | None = None
    birthDate: PastDay | None = None
    deliveryAddress: DeliveryAddress | None = None
    invoiceAddress: InvoiceAddress | None = None
    loyaltyMemberships: list[LoyaltyMembership] | None = None
    ext: FreeJson | None = None

    @field_validator("firstName", "lastName", mode="before")
    @classmethod
    def _names_stay(cls, value: Any) -> Any:
        # Runs only for a sent value: absent keeps the name, null would leave the customer without one.
        if value is None:
            raise PydanticCustomError("REQUIRED", "A customer's name cannot be cleared.")
        return value


class PushedCustomer(CustomerFields):
    """The body of PUT /push-customer: the customer is found by `phone`, which is required."""

    phone: Phone


class CustomerAddresses(Shape):
    """The body of PUT /customers/{customerId}/addresses; absent keeps an address, null clears it."""

    deliveryAddress: DeliveryAddress | None = None
    invoiceAddress: InvoiceAddress | None = None


class Customer(Shape):
    """The customer record."""

    id: Id
    firstName: str
    lastName: str
    email: str | None
    phone: str | None = Field(description="E.164")
    birthDate: Day | None
    deliveryAddress: DeliveryAddress | None
    invoiceAddress: InvoiceAddress | None
    loyaltyMemberships: list[LoyaltyMembership]
    ext: dict[str, Any]
    createdTime: Instant
    modifiedTime: Instant
