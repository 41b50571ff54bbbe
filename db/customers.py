"""The tenant's customers: read them, create or change them, keeping e-mail and phone unique within the tenant.

A write reads the customer in its transaction (locked on PostgreSQL), applies only the fields it was given and
writes nothing when they change nothing, so a repeated request leaves `modified_time` alone. Concurrent writes
of one e-mail, phone or id meet in the unique keys: the loser's transaction fails (PostgreSQL: a unique
violation once the winner commits; DuckDB: a constraint error or a write-write conflict at once) and is run
again, and the second run sees the winner, so it answers 409 or becomes an update, never a 500.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from typing import Any, TypeVar

import orjson
import sqlalchemy as sa

from contracts.customers import email_key
from contracts.errors import CustomerConflict, InvalidRequest
from db.engine import is_duckdb
from db.ids import new_id, utc_now
from db.schema import customer_loyalty_memberships as memberships_table
from db.schema import customers, loyalty_programs
from rules.retry import RetryPolicy

T = TypeVar("T")
# Runs of one write before a contended one gives up; the backoff between them grows to about a second.
WRITE_ATTEMPTS = 8
# Failures a concurrent write causes: unique violations, and DuckDB's write-write conflicts (OperationalError).
_CONTENDED = (sa.exc.IntegrityError, sa.exc.OperationalError)
# Jittered, growing backoff: the winner's transaction commits meanwhile, and losers do not meet again.
_CONTENDED_RETRY = RetryPolicy(WRITE_ATTEMPTS, base_seconds=0.008, max_seconds=0.008 * 2 ** WRITE_ATTEMPTS)


@dataclass(frozen=True)
class Membership:
    loyalty_program_id: str
    member_number: str
    member_since: date


@dataclass(frozen=True)
class Customer:
    """A customer as held. A write names the fields it changes by these names (`id` and the times excepted)."""

    id: str
    first_name: str | None = None
    last_name: str | None = None
    email: str | None = None
    phone: str | None = None
    birth_date: date | None = None
    delivery_address: dict[str, Any] | None = None
    invoice_address: dict[str, Any] | None = None
    ext: dict[str, Any] = field(default_factory=dict)
    memberships: tuple[Membership, ...] = ()  # ordered by loyalty_program_id
    created_time: datetime | None = field(default=None, compare=False)
    modified_time: datetime | None = field(default=None, compare=False)


def get_customer(engine: sa.Engine, tenant_id: str, customer_id: str) -> Customer | None:
    with engine.connect() as conn:
        return _read(conn, tenant_id, customers.c.id == customer_id)


def customer_by_email(engine: sa.Engine, tenant_id: str, normalized_email: str) -> Customer | None:
    with engine.connect() as conn:
        return _read(conn, tenant_id, customers.c.email_key == email_key(normalized_email))


def put_customer(engine: sa.Engine, tenant_id: str, customer_id: str,
                 changes: dict[str, Any]) -> tuple[Customer, bool]:
    """Apply `changes` (Customer field names) to the customer, creating it if need be; True when created."""

    def attempt(conn: sa.Connection) -> tuple[Customer, bool]:
        return _save(conn, tenant_id, customer_id, _locked(conn, tenant_id, customers.c.id == customer_id), changes)

    return _contended(engine, attempt)


def change_customer(engine: sa.Engine, tenant_id: str, customer_id: str, changes: dict[str, Any]) -> Customer | None:
    """Apply `changes` to a known customer; None when there is no such customer."""

    def attempt(conn: sa.Connection) -> Customer | None:
        current = _locked(conn, tenant_id, customers.c.id == customer_id)
        return _save(conn, tenant_id, customer_id, current, changes)[0] if current else None

    return _contended(engine, attempt)


def push_customer(engine: sa.Engine, tenant_id: str, changes: dict[str, Any]) -> tuple[Customer, bool]:
    """Apply `changes` to the customer holding `changes["phone"]`, or create one with a new id."""

    def attempt(conn: sa.Connection) -> tuple[Customer, bool]:
        owner = _locked(conn, tenant_id, customers.c.phone == changes["phone"])
        # The phone is not checked again: an owner created since the look-up trips the unique key, and the
        # next run finds it (PostgreSQL reads each statement afresh, so a check here could answer 409).
        return _save(conn, tenant_id, owner.id if owner else new_id(), owner, changes, unique=("email",))

    return _contended(engine, attempt)


def _contended(engine: sa.Engine, work: Callable[[sa.Connection], T]) -> T:
    """Run `work` in a transaction, again after a concurrent write made it fail (see the module's comment)."""

    def in_transaction() -> T:
        with engine.begin() as conn:
            return work(conn)

    return _CONTENDED_RETRY.call(in_transaction, lambda error: isinstance(error, _CONTENDED))


def _save(conn: sa.Connection, tenant_id: str, customer_id: str, current: Customer | None,
          changes: dict[str, Any], unique: Sequence[str] = ("email", "phone")) -> tuple[Customer, bool]:
    """Write `changes` over `current` (None: create the customer); True when created. `unique`: the fields to
    answer 409 for when another customer holds them."""
    _check(conn, tenant_id, current, changes)
    if "memberships" in changes:  # held and compared in one order
        changes = {**changes, "memberships": tuple(sorted(changes["memberships"], key=lambda m: m.loyalty_program_id))}
    wanted = replace(current or Customer(customer_id), **changes)
    if wanted == current:
        return current, False
    _check_unique(conn, tenant_id, wanted, unique)
    now = utc_now()
    saved = replace(wanted, created_time=current.created_time if current else now, modified_time=now)
    _write(conn, tenant_id, current, saved)
    return saved, current is None


def _check(conn: sa.Connection, tenant_id: str, current: Customer | None, changes: dict[str, Any]) -> None:
    """The problems a body can only show against what is held: every one of them in one 400."""
    problems = []
    if current is None:
        problems += [{"path": wire, "code": "REQUIRED", "message": f"A new customer needs {wire}."}
                     for name, wire in (("first_name", "firstName"), ("last_name", "lastName"))
                     if changes.get(name) is None]
    if changes.get("memberships"):
        problems += _membership_problems(conn, tenant_id, changes["memberships"])
    if problems:
        raise InvalidRequest(problems)


def _membership_problems(conn: sa.Connection, tenant_id: str, wanted: Sequence[Membership]) -> list[dict[str, str]]:
    ids = {m.loyalty_program_id for m in wanted}
    known = set(conn.scalars(sa.select(loyalty_programs.c.id)
                             .where(loyalty_programs.c.tenant_id == tenant_id, loyalty_programs.c.id.in_(ids))))
    problems, seen = [], set()
    for index, membership in enumerate(wanted):
        path = f"loyaltyMemberships[{index}].loyaltyProgramId"
        if membership.loyalty_program_id in seen:
            problems.append({"path": path, "code": "DUPLICATE_LOYALTY_PROGRAM",
                             "message": "The customer is listed twice as a member of this program."})
        elif membership.loyalty_program_id not in known:
            problems.append({"path": path, "code": "UNKNOWN_LOYALTY_PROGRAM",
                             "message": f"No loyalty program {membership.loyalty_program_id} in this tenant."})
        seen.add(membership.loyalty_program_id)
    return problems


def _check_unique(conn: sa.Connection, tenant_id: str, wanted: Customer, names: Sequence[str]) -> None:
    """409 when another customer of the tenant holds the e-mail or the phone (those of them named)."""
    held_as = {"email": (customers.c.email_key, email_key(wanted.email) if wanted.email else None),
               "phone": (customers.c.phone, wanted.phone)}
    unique = {name: held_as[name] for name in names}
    taken = [column == value for column, value in unique.values() if value is not None]
    if not taken:
        return
    others = conn.execute(sa.select(customers.c.id, customers.c.email_key, customers.c.phone).where(
        customers.c.tenant_id == tenant_id, customers.c.id != wanted.id, sa.or_(*taken))).all()
    conflicts = [{"field": name, "existingCustomerId": other.id}
                 for name, (column, value) in unique.items() for other in others
                 if value is not None and other._mapping[column] == value]
    if conflicts:
        fields_taken = " and ".join(conflict["field"] for conflict in conflicts)
        raise CustomerConflict(f"Another customer already has this {fields_taken}.", {"conflicts": conflicts})


def _columns(customer: Customer) -> dict[str, Any]:
    return {
        "first_name": customer.first_name, "last_name": customer.last_name, "email": customer.email,
        "email_key": email_key(customer.email) if customer.email else None, "phone": customer.phone,
        "birth_date": customer.birth_date, "delivery_address": _json_text(customer.delivery_address),
        "invoice_address": _json_text(customer.invoice_address), "ext": _json_text(customer.ext),
        "modified_time": customer.modified_time,
    }


def _write(conn: sa.Connection, tenant_id: str, current: Customer | None, saved: Customer) -> None:
    if current is None:
        conn.execute(customers.insert().values(id=saved.id, tenant_id=tenant_id, created_time=saved.created_time,
                                               **_columns(saved)))
    else:
        conn.execute(customers.update().where(customers.c.tenant_id == tenant_id, customers.c.id == saved.id)
                     .values(**_columns(saved)))
    if current is not None and current.memberships == saved.memberships:
        return
    table = memberships_table
    conn.execute(table.delete().where(table.c.tenant_id == tenant_id, table.c.customer_id == saved.id))
    if saved.memberships:
        conn.execute(table.insert(), [
            {"tenant_id": tenant_id, "customer_id": saved.id, "loyalty_program_id": m.loyalty_program_id,
             "member_number": m.member_number, "member_since": m.member_since} for m in saved.memberships])


def _locked(conn: sa.Connection, tenant_id: str, which: sa.ColumnElement[bool]) -> Customer | None:
    """The customer about to be changed, locked against concurrent writers until the transaction ends."""
    # DuckDB has no row locks; its write-write conflicts make the later writer run again instead.
    return _read(conn, tenant_id, which, lock=not is_duckdb(conn.engine))


def _read(conn: sa.Connection, tenant_id: str, which: sa.ColumnElement[bool], lock: bool = False) -> Customer | None:
    query = sa.select(customers).where(customers.c.tenant_id == tenant_id, which)
    row = conn.execute(query.with_for_update() if lock else query).first()
    if row is None:
        return None
    table = memberships_table
    held = conn.execute(sa.select(table.c.loyalty_program_id, table.c.member_number, table.c.member_since)
                        .where(table.c.tenant_id == tenant_id, table.c.customer_id == row.id)
                        .order_by(table.c.loyalty_program_id))
    return Customer(
        id=row.id, first_name=row.first_name, last_name=row.last_name, email=row.email, phone=row.phone,
        birth_date=row.birth_date, delivery_address=_json_value(row.delivery_address),
        invoice_address=_json_value(row.invoice_address), ext=_json_value(row.ext) or {},
        memberships=tuple(Membership(*membership) for membership in held),
        created_time=row.created_time, modified_time=row.modified_time)


def _json_text(value: dict[str, Any] | None) -> str | None:
    return None if value is None else orjson.dumps(value).decode()


def _json_value(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)
