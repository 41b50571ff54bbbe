"""Published limits (GET /limits) and the values the service enforces; one source for both."""

RATE_LIMIT_PER_MINUTE = 1_800
MAX_ITEMS_PER_BATCH = 20_000
RECOMMENDED_ITEMS_PER_BATCH = 5_000
MAX_HORIZON_DAYS = 62
EXPECTED_HORIZON_DAYS = 30
MAX_HORIZON_START_AGE_DAYS = 7
MAX_REQUEST_BYTES = 10_000_000
RECOMMENDED_REQUEST_BYTES = 1_000_000
MAX_DECOMPRESSED_BYTES = 50_000_000
MAX_COMPRESSION_RATIO = 100
MAX_DECIMAL_PLACES = 4
MAX_REJECTED_ITEMS_LISTED = 500
MAX_VALIDATION_ERRORS_LISTED = 1_000
MAX_WARNINGS_LISTED = 100  # distinct unknown field names listed with an accepted batch
DEFAULT_PAGE_SIZE = 1_000
MAX_PAGE_SIZE = 5_000
# Batch lists page fewer: a batch status carries up to MAX_REJECTED_ITEMS_LISTED rejected items.
DEFAULT_BATCH_PAGE_SIZE = 100
MAX_BATCH_PAGE_SIZE = 1_000
# Free JSON a client stores (a customer's ext): levels of nesting and bytes as compact JSON. Enforced on the
# e-commerce API, not published by demand planning's GET /limits (README "Decisions").
MAX_FREE_JSON_DEPTH = 32
MAX_FREE_JSON_BYTES = 16_384


def published_limits(rate_limit_per_minute: int = RATE_LIMIT_PER_MINUTE) -> dict[str, int]:
    return {
        "maxItemsPerBatch": MAX_ITEMS_PER_BATCH,
        "recommendedItemsPerBatch": RECOMMENDED_ITEMS_PER_BATCH,
        "maxHorizonDays": MAX_HORIZON_DAYS,
        "expectedHorizonDays": EXPECTED_HORIZON_DAYS,
        "maxHorizonStartAgeDays": MAX_HORIZON_START_AGE_DAYS,
        "maxRequestBytes": MAX_REQUEST_BYTES,
        "recommendedRequestBytes": RECOMMENDED_REQUEST_BYTES,
        "maxDecompressedBytes": MAX_DECOMPRESSED_BYTES,
        "maxCompressionRatio": MAX_COMPRESSION_RATIO,
        "maxDecimalPlaces": MAX_DECIMAL_PLACES,
        "maxRejectedItemsListed": MAX_REJECTED_ITEMS_LISTED,
        "maxPageSize": MAX_PAGE_SIZE,
        "defaultPageSize": DEFAULT_PAGE_SIZE,
        "rateLimitPerMinute": rate_limit_per_minute,
    }
