"""The event subjects of SPEC.md's Events section and the reference list each schema subject announces."""

PRODUCT_UPDATED = "ProductUpdated"
INVENTORY_UPDATED = "InventoryUpdated"
CAMPAIGN_UPDATED = "CampaignUpdated"
RETAIL_STORE_UPDATED = "RetailStoreUpdated"
ORDER_CREATED = "OrderCreated"
ORDER_READY_FOR_PAYMENT_CAPTURE = "OrderReadyForPaymentCapture"
ORDER_FULFILLED = "OrderFulfilled"
ORDER_READY_FOR_REFUND = "OrderReadyForRefund"
ORDER_SHIPPED = "OrderShipped"

# Reference list (the last segment of GET /product_schema/{list}) → the schema event announcing its changes.
REFERENCE_LISTS: dict[str, str] = {
    "brands": "BrandsUpdated",
    "product_categories": "ProductCategoriesUpdated",
    "main_product_groups": "MainProductGroupsUpdated",
    "sub_product_groups": "SubProductGroupsUpdated",
    "product_concepts": "ProductConceptsUpdated",
    "exclusivity_levels": "ExclusivityLevelsUpdated",
    "main_activities": "MainActivitiesUpdated",
    "unit_of_measures": "UnitOfMeasuresUpdated",
    "product_colors": "ProductColorsUpdated",
    "sizes": "SizesUpdated",
    "dynamic_attributes": "DynamicAttributesUpdated",
    "dynamic_attributes_options": "DynamicAttributeOptionsUpdated",
}
