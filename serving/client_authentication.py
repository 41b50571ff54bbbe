"""Proving an API client by its id and secret: the token endpoints and the console's sign-in both come here, so
both doors cost one argon2 check on the verifier's own threads, behind the same budgets for attempts."""

from contracts.formats import control_problem
from db.clients import Client, find_client, get_client
from serving.credentials import DUMMY_HASH
from serving.secret_verifier import VerifierBusy
from serving.services import services
from serving.threads import blocking

# A waiting slot frees as soon as any running secret check ends.
_BUSY_RETRY_AFTER_SECONDS = 1


class AttemptThrottled(Exception):
    """Too many attempts from this address (or for this client from it), or too many checks at once."""

    def __init__(self, description: str, retry_after_seconds: int) -> None:
        super().__init__(f"{description} Retry after {retry_after_seconds} s.")
        self.retry_after_seconds = retry_after_seconds


class AuthenticationFailed(Exception):
    """Unknown client, wrong secret, or a disabled client (the message says which only for a disabled one)."""


async def authenticate_client(tenant_id: str | None, client_id: str, secret: str, remote_addr: str | None) -> Client:
    """The enabled client the secret proves. `tenant_id` None finds the client by its id alone (client ids are
    unique across tenants; the console asks for none)."""
    engine, verifier = services().engine, services().secret_verifier
    if control_problem(tenant_id or "") or control_problem(client_id):
        # Such an id names no client, and PostgreSQL could not even look it up (a NUL).
        raise AuthenticationFailed("Client authentication failed.")
    if tenant_id is None:
        client = await blocking(find_client, engine, client_id)
        tenant_id = client.tenant_id if client else ""
    else:
        client = await blocking(get_client, engine, tenant_id, client_id)
    proof = verifier.proof(tenant_id, client_id, secret)
    # A secret that passed lately costs nothing and is never throttled; anything else may cost a hash.
    if not verifier.recently_proven(proof):
        await _charge_attempt(remote_addr, tenant_id, client_id)
    try:
        # Hash even for an unknown client, so timing does not tell which client ids exist.
        matches = await verifier.matches(proof, secret, client.secret_hash if client else DUMMY_HASH)
    except VerifierBusy:
        raise AttemptThrottled("Too many client secrets are being checked at once.",
                               _BUSY_RETRY_AFTER_SECONDS) from None
    if client is None or not matches:
        raise AuthenticationFailed("Client authentication failed.")
    if not client.enabled:
        raise AuthenticationFailed("The API client is disabled.")
    return client


async def _charge_attempt(remote_addr: str | None, tenant_id: str, client_id: str) -> None:
    refusal = await services().token_attempts.charge(remote_addr, tenant_id, client_id)
    if refusal is None:
        return
    if refusal.budget == "address":
        description = f"More than {refusal.limit} authentication attempts a minute from this address."
    else:
        description = f"More than {refusal.limit} authentication attempts a minute for this client from this address."
    raise AttemptThrottled(description, refusal.retry_after_seconds)
