"""Stores as every scope lists them: `{"items": [...]}` of retail stores or eCom stores."""

from typing import Literal

from pydantic import Field

from contracts.models import Id, Shape

StoreStatus = Literal["RELEASED", "NOT_RELEASED"]


class VisitAddress(Shape):
    street: str | None
    postCode: str | None
    city: str | None
    countryIsoCode: str | None = Field(description="ISO 3166-1 alpha-2.")


class RetailStore(Shape):
    id: Id
    number: str
    name: str
    status: StoreStatus
    visitAddress: VisitAddress


class EcomStore(Shape):
    id: Id
    number: str
    name: str
    status: StoreStatus
