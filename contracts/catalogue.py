"""The e-commerce catalogue's shapes (ECOMMERCE.md, SPEC.md): reference lists, products, inventory, campaigns,
the trigger_events answers and the loyalty program. Wire names; they document the routes, which render dicts."""

from typing import Literal

from pydantic import Field

from contracts.models import Day, DecimalString, Id, Instant, Shape

# --- reference lists (GET /product_schema/{list}) -------------------------------------------------------


class ReferenceEntry(Shape):
    """An entry of one of the 12 lists; the fields after name belong to one or two lists each and are present
    only there."""

    id: Id
    code: str
    name: str
    colorCode: str | None = Field(None, description="product_colors only.", examples=["#1F3A5F"])
    sortOrder: int | None = Field(None, description="sizes and dynamic_attributes_options only.")
    valueType: Literal["TEXT", "NUMBER", "BOOLEAN", "OPTION"] | None = Field(
        None, description="dynamic_attributes only.")
    dynamicAttributeId: Id | None = Field(None, description="dynamic_attributes_options only.")


# --- products -------------------------------------------------------------------------------------------


class ProductIds(Shape):
    items: list[Id]
    nextCursor: str | None = Field(description="Pass as cursor for the next page; null on the last one.")


class ProductQuery(Shape):
    includeUnpublished: bool = Field(False, description="true: every visible product, published or not.")
    limit: int | None = Field(None, ge=1, le=5000, description="Page size; without it, the whole list at once.")
    cursor: str | None = Field(None, description="nextCursor of the previous page.")


class DynamicAttributeValue(Shape):
    dynamicAttributeId: Id
    value: str | None = Field(None, description="TEXT, NUMBER and BOOLEAN attributes.")
    optionIds: list[Id] | None = Field(None, description="OPTION attributes.")


class ProductImage(Shape):
    url: str
    sortOrder: int
    altText: str | None


class Sku(Shape):
    id: Id
    number: str
    gtin: str | None
    name: str
    published: bool
    productColorId: Id | None
    sizeId: Id | None
    unitOfMeasureId: Id | None
    price: DecimalString | None = Field(description="Consumer price including VAT: the eCom store's price list, "
                                                    "else the company's base price; null when neither has one.")
    vatRate: DecimalString | None = Field(description="Percent.")


class Product(Shape):
    id: Id
    number: str
    name: str
    description: str | None
    status: Literal["RELEASED", "NOT_RELEASED"]
    published: bool = Field(description="Released, with at least one published SKU in the assortment.")
    brandId: Id | None
    productCategoryId: Id | None
    mainProductGroupId: Id | None
    subProductGroupId: Id | None
    productConceptId: Id | None
    exclusivityLevelId: Id | None
    mainActivityId: Id | None
    dynamicAttributes: list[DynamicAttributeValue]
    images: list[ProductImage]
    currencyIsoCode: str
    skus: list[Sku] = Field(description="The SKUs in the eCom store's assortment, by number.")
    modifiedTime: Instant | None


# --- inventory ------------------------------------------------------------------------------------------


class InventoryLocation(Shape):
    locationId: Id
    locationNumber: str
    locationName: str
    locationType: Literal["WAREHOUSE", "RETAIL_STORE"]
    onHand: DecimalString
    reserved: DecimalString
    available: DecimalString = Field(description="max(onHand - reserved, 0)")


class SkuInventory(Shape):
    skuId: Id
    skuNumber: str
    available: DecimalString = Field(description="Sum over the warehouses: what the web shop can sell for delivery.")
    locations: list[InventoryLocation]
    modifiedTime: Instant | None = Field(description="Latest change of a listed stock row; null without any.")


# --- campaigns ------------------------------------------------------------------------------------------


class CampaignSku(Shape):
    skuId: Id
    campaignPrice: float = Field(description="A JSON number, as SPEC.md shows it.")
    loyaltyProgramMembershipRequired: bool


class LoyaltyProgramRef(Shape):
    id: Id
    name: str


class Campaign(Shape):
    id: Id
    code: str
    name: str
    validFrom: Day
    validTo: Day
    currencyIsoCode: str
    status: Literal["PLANNED", "ACTIVE"]
    campaignType: Literal["NORMAL", "THREE_FOR_TWO"]
    skus: list[CampaignSku] = Field(description="Only SKUs in the eCom store's assortment.")
    loyaltyProgram: LoyaltyProgramRef | None = Field(description="Null when no listed SKU requires membership.")


class Campaigns(Shape):
    campaigns: list[Campaign]


# --- trigger_events, retail stores and the loyalty program --------------------------------------------


class EventsTriggered(Shape):
    eventsTriggered: int
    message: str


class VisitAddress(Shape):
    street: str | None
    postCode: str | None
    city: str | None
    countryIsoCode: str | None


class RetailStore(Shape):
    id: Id
    number: str
    name: str
    status: Literal["RELEASED", "NOT_RELEASED"]
    visitAddress: VisitAddress


class LoyaltyProgram(Shape):
    id: Id
    code: str
    name: str
    currencyIsoCode: str | None = Field(description="Null only for a tenant without any company.")
    retailStoreCount: int

