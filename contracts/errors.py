"""The error codes of the contract, one type per code, rendered as {"error","message","details"}."""

from typing import Any, ClassVar


class ApiError(Exception):
    status: ClassVar[int] = 500
    code: ClassVar[str] = "INTERNAL_SERVER_ERROR"
    default_message: ClassVar[str] = "The server failed to handle the request."

    def __init__(self, message: str | None = None, details: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        self.message = message or self.default_message
        self.details = details
        self.headers = headers or {}
        super().__init__(self.message)

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.details is not None:
            body["details"] = self.details
        return body

    def __reduce__(self) -> tuple[Any, ...]:
        # Uploads are checked in worker processes and their refusals cross back pickled; rebuild from the state,
        # as the constructors of the subclasses take different arguments.
        return _rebuilt, (type(self), self.__dict__)


def _rebuilt(kind: type[ApiError], state: dict[str, Any]) -> ApiError:
    error = Exception.__new__(kind)
    Exception.__init__(error, state["message"])
    error.__dict__.update(state)
    return error


class BadRequest(ApiError):
    status, code, default_message = 400, "BAD_REQUEST", "The request body could not be parsed."


class ValidationFailed(ApiError):
    status, code, default_message = 400, "VALIDATION_ERROR", "The request failed validation."


class InvalidRequest(ApiError):
    """E-commerce validation: every problem at once, each {"path","code","message"}, in details.errors."""

    status, code = 400, "INVALID_REQUEST"

    def __init__(self, errors: list[dict[str, str]], message: str | None = None) -> None:
        super().__init__(message or f"The request has {len(errors)} problem(s).", {"errors": errors})


class Unauthorized(ApiError):
    status, code, default_message = 401, "UNAUTHORIZED", "A valid bearer token is required."

    def __init__(self, message: str | None = None, error: str = "invalid_token") -> None:
        # RFC 6750 §3: say which scheme is expected and, when a token was sent, what was wrong with it.
        challenge = 'Bearer realm="pia"' + (f', error="{error}"' if error else "")
        super().__init__(message, headers={"WWW-Authenticate": challenge})


class Forbidden(ApiError):
    status, code, default_message = 403, "FORBIDDEN", "The token is not valid for this resource."


class NotFound(ApiError):
    status, code, default_message = 404, "NOT_FOUND", "No such resource."


class SkuNotFound(NotFound):
    code, default_message = "SKU_NOT_FOUND", "The SKU is not in the eCom store's assortment."


class CustomerNotFound(NotFound):
    code, default_message = "CUSTOMER_NOT_FOUND", "No such customer."


class MethodNotAllowed(ApiError):
    status, code, default_message = 405, "METHOD_NOT_ALLOWED", "The method is not allowed on this resource."


class Conflict(ApiError):
    status, code, default_message = 409, "CONFLICT", "The request conflicts with existing state."


class BatchIdReused(Conflict):
    code, default_message = "BATCH_ID_REUSED", "The batch id was already used for a different payload."


class BatchNotFailed(Conflict):
    """A rerun of a batch that is not FAILED."""

    code = "BATCH_NOT_FAILED"


class StagedFileGone(Conflict):
    """A rerun of a batch whose staged file retention has removed."""

    code = "STAGED_FILE_GONE"


class CustomerConflict(Conflict):
    code, default_message = "CUSTOMER_CONFLICT", "Another customer already has this e-mail address or phone."


class LimitExceeded(ApiError):
    status, code = 413, "LIMIT_EXCEEDED"

    def __init__(self, limit: str, maximum: int, received: int) -> None:
        super().__init__(
            f"{limit} exceeded: received {received}, maximum {maximum}.",
            {"limit": limit, "max": maximum, "received": received},
        )


class UnsupportedMediaType(ApiError):
    status, code = 415, "UNSUPPORTED_MEDIA_TYPE"


class TooManyRequests(ApiError):
    status, code, default_message = 429, "TOO_MANY_REQUESTS", "Rate limit exceeded."


class ServiceUnavailable(ApiError):
    """Temporarily out of capacity; SPEC's retry guidance has clients retry a 503 with backoff."""

    status, code = 503, "SERVICE_UNAVAILABLE"

    def __init__(self, message: str, retry_after_seconds: int) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after_seconds)})


class InternalServerError(ApiError):
    pass


class OtherHttpError(ApiError):
    """An HTTP-level failure without a code of its own in the contract, named after its status."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code  # type: ignore[misc]


class InsufficientInventory(ApiError):
    """Click and collect: no location has the quantity of these SKUs available; nothing was reserved."""

    status, code = 400, "INSUFFICIENT_INVENTORY"

    def __init__(self, shortages: list[dict[str, str]]) -> None:
        numbers = ", ".join(shortage["skuNumber"] for shortage in shortages)
        super().__init__(f"Not enough available to reserve SKU(s) {numbers}; nothing was reserved.",
                         {"skus": shortages})


class RetailStoreNotInNetwork(ApiError):
    status, code = 400, "RETAIL_STORE_NOT_IN_NETWORK"
    default_message = "The retail store is not a released store of the eCom store's click and collect network."


class DuplicateOrder(ApiError):
    """A repeated externalOrderId or externalOrderNumber of the eCom store (SPEC.md rule 9)."""

    status, code = 409, "DUPLICATE_ORDER"

    def __init__(self, existing_order_id: str) -> None:
        super().__init__("The eCom store already has an order with this externalOrderId or externalOrderNumber.",
                         {"existingOrderId": existing_order_id})


class OrderNotOpen(Conflict):
    """The order's status does not allow the operation (not processed yet, cancelled, or nothing left to do)."""

    code = "ORDER_NOT_OPEN"


class CaptureNotConfirmed(Conflict):
    code, default_message = "CAPTURE_NOT_CONFIRMED", "The capture's payment is not confirmed; it cannot ship yet."


class ReceiptAlreadyShipped(Conflict):
    code, default_message = "RECEIPT_ALREADY_SHIPPED", "The receipt has already been shipped."


class CaptureAlreadyCompleted(Conflict):
    code, default_message = "CAPTURE_ALREADY_COMPLETED", "The capture was already reported with another result."


class RefundAlreadyCompleted(Conflict):
    code, default_message = "REFUND_ALREADY_COMPLETED", "The refund was already reported with another result."


class CartNotActive(Conflict):
    """A parked cart ended another way (collected, cancelled or expired); details.state says how. Nothing changed."""

    code = "CART_NOT_ACTIVE"

    def __init__(self, message: str, state: str) -> None:
        super().__init__(message, {"state": state})
