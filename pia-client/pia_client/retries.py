"""SPEC's retry guidance as a tenacity policy, shared by the sync and the async client.

Retried: 429, 500, 502, 503 and network errors, with exponential backoff and full jitter; a `Retry-After` header
(429, and the 503 of a busy upload door) is waited out instead. Never retried: 400, 413 (unchanged they fail
again) and 409 (read the existing resource instead), nor any other 4xx.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import RetryCallState, retry_if_exception, stop_after_attempt, wait_random_exponential

RETRIED_STATUSES = frozenset({429, 500, 502, 503})


class ApiCallFailed(Exception):
    """The server answered 4xx or 5xx; `body` is its error body (or a stand-in when it sent none)."""

    def __init__(self, status: int, body: dict[str, Any], retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status} {body.get('error', '')}: {body.get('message', '')}".rstrip(": "))
        self.status, self.body, self.retry_after = status, body, retry_after

    @property
    def code(self) -> str | None:
        return self.body.get("error")


def failure(response: httpx.Response) -> ApiCallFailed:
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {"error": f"HTTP_{response.status_code}", "message": response.text[:500]}
    return ApiCallFailed(response.status_code, body, _seconds(response.headers.get("Retry-After")))


def _seconds(value: str | None) -> float | None:
    # Retry-After may also be an HTTP date; pia sends seconds, and a date falls back to the backoff.
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def is_transient(error: BaseException) -> bool:
    if isinstance(error, ApiCallFailed):
        return error.status in RETRIED_STATUSES
    return isinstance(error, httpx.TransportError)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to retry. `longest_retry_after` bounds a server's Retry-After (tests shorten it)."""

    attempts: int = 8
    first_wait: float = 0.5
    longest_wait: float = 30.0
    longest_retry_after: float = 120.0

    def wait(self, state: RetryCallState) -> float:
        error = state.outcome.exception() if state.outcome else None
        if isinstance(error, ApiCallFailed) and error.retry_after is not None:
            return min(error.retry_after, self.longest_retry_after)
        return wait_random_exponential(multiplier=self.first_wait, max=self.longest_wait)(state)

    def tenacity_arguments(self, on_retry: Callable[[RetryCallState], None] | None = None) -> dict[str, Any]:
        """Keyword arguments for tenacity's Retrying and AsyncRetrying alike."""
        arguments: dict[str, Any] = {"retry": retry_if_exception(is_transient), "wait": self.wait,
                                     "stop": stop_after_attempt(self.attempts), "reraise": True}
        if on_retry is not None:
            arguments["before_sleep"] = on_retry
        return arguments
