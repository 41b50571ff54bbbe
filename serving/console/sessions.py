"""Who is signed in to the console, and the checks every console request passes.

A session is a row (db/console_sessions.py) whose id only the browser holds, in an HttpOnly, SameSite=Strict
cookie scoped to /console (Secure unless the console is reached over plain HTTP on this machine). Every form that
changes something carries a CSRF token derived from the cookie's secret (an HMAC of it), so a page of another site
can neither read nor make one; the sign-in form gets the same from a cookie of its own before any session exists.
POSTs whose Origin names another site are refused before any of that is looked at.
"""

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from quart import Response, g, request

from contracts.admin import LOCAL_HOSTS
from contracts.errors import ApiError
from db.clients import Client
from db.console_sessions import live_session
from db.ids import utc_now
from serving.authentication import Caller
from serving.protection import admit
from serving.services import services
from serving.threads import blocking

COOKIE_PATH = "/console"
SESSION_COOKIE = "pia_console"
SIGN_IN_COOKIE = "pia_console_sign_in"  # the sign-in form's CSRF secret, before a session exists
SIGN_IN_COOKIE_SECONDS = 3600
CSRF_FIELD = "csrf_token"
SAFE_METHODS = ("GET", "HEAD")


class FormRefused(ApiError):
    """A state-changing request without the right CSRF token, or sent from another site: nothing was changed."""

    status, code = 403, "FORM_REFUSED"
    default_message = ("This form was not sent from the console's own page (its security token is missing or "
                       "wrong). Nothing was changed: open the page again and repeat.")


class SignedOut(ApiError):
    """A request that needs a session came without a live one."""

    status, code = 401, "SIGNED_OUT"
    default_message = "You are not signed in, or your session has ended. Sign in again."


@dataclass(frozen=True)
class SignedIn:
    """The request's session: its client (an admin client), the tenant it sees, the token its forms carry."""

    client: Client
    csrf_token: str

    @property
    def tenant_id(self) -> str:
        return self.client.tenant_id


def csrf_token(secret: str) -> str:
    """The token the forms of a page carry, bound to the cookie's secret."""
    digest = hmac.new(secret.encode(), b"pia console form", hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _csrf_matches(secret: str | None, token: str | None) -> bool:
    # As bytes: compare_digest refuses str with non-ASCII characters, which a forged form may well carry.
    return bool(secret and token) and hmac.compare_digest(csrf_token(secret).encode(), token.encode())


def _from_this_site() -> bool:
    """A browser names the origin of every POST; without one (not a browser), Sec-Fetch-Site may still tell."""
    origin = request.headers.get("Origin")
    if origin is None:
        return request.headers.get("Sec-Fetch-Site", "same-origin") in ("same-origin", "none")
    return urlsplit(origin).netloc == request.host


async def check_form(secret: str | None) -> None:
    """A state-changing request must come from this site with the token bound to `secret`."""
    form = await request.form
    if not _from_this_site() or not _csrf_matches(secret, form.get(CSRF_FIELD)):
        raise FormRefused()


def on_plain_local_http() -> bool:
    """Plain HTTP to this machine: the one place a browser keeps a session cookie that is not Secure."""
    return request.scheme == "http" and urlsplit(f"//{request.host}").hostname in LOCAL_HOSTS


def set_cookie(response: Response, name: str, value: str, max_age: int) -> None:
    response.set_cookie(name, value, max_age=max_age, path=COOKIE_PATH, secure=not on_plain_local_http(),
                        httponly=True, samesite="Strict")


def forget_cookie(response: Response, name: str) -> None:
    response.delete_cookie(name, path=COOKIE_PATH, secure=not on_plain_local_http(), httponly=True,
                           samesite="Strict")


def sign_in_secret() -> tuple[str, bool]:
    """The sign-in form's CSRF secret, and whether it is new (then the response sets its cookie)."""
    current = request.cookies.get(SIGN_IN_COOKIE)
    return (current, False) if current else (secrets.token_urlsafe(32), True)


async def signed_in() -> SignedIn:
    """The request's live session of an enabled admin client, counted against the client's rate limit and audited
    as its requests are; SignedOut otherwise. A state-changing request must also carry the session's CSRF token."""
    started = time.perf_counter()
    session_id = request.cookies.get(SESSION_COOKIE)
    session = await blocking(live_session, services().engine, session_id, utc_now()) if session_id else None
    client = await services().authenticator.client(session.tenant_id, session.client_id) if session else None
    if session is None or client is None or not client.enabled or client.scope != "admin":
        raise SignedOut()
    # Audited under the session (a hash's prefix: the audit table never holds anything to sign in with), refusals
    # of forged forms included.
    await admit(Caller(client, f"console:{session.session_hash[:16]}", started), services())
    if request.method not in SAFE_METHODS:
        await check_form(session_id)
    g.console = signed = SignedIn(client, csrf_token(session_id))
    return signed
