"""Loading the back-office document (`pia admin load`, the admin API): check it whole, then upsert it and write its
change events in one transaction.

The document is keyed on business keys. Ids are generated on first insert only and a row is written only when
one of its values differs, so loading the same document twice changes nothing and writes no event.
Modules: `document` (paths, entries, list names), `checking` (every problem with its path), `sync` (the keyed
upsert), `applying` (each entity's rows, in dependency order), `announcing` (the outbox rows).
"""

from typing import Any

import sqlalchemy as sa

from db.backoffice.announcing import announce, take_view
from db.backoffice.applying import apply_document
from db.backoffice.checking import document_errors
from db.backoffice.checking import schema_errors as _schema_errors  # noqa: F401 (the format tests use it)
from db.backoffice.document import DocumentError, DocumentInvalid, error_order
from db.backoffice.sync import LoadReport
from db.ids import utc_now
from db.schema import tenants
from db.write_turns import transaction_with_retries

__all__ = ["DocumentError", "DocumentInvalid", "LoadReport", "load_document"]


def load_document(engine: sa.Engine, tenant_id: str, document: dict[str, Any]) -> LoadReport:
    """Load the document whole or not at all; a load that loses to a concurrent writer of the same rows (DuckDB) is
    run again, as every writer is (db/write_turns.py)."""

    def attempt(conn: sa.Connection) -> LoadReport:
        # Checked inside the transaction, so the references it relies on cannot change before the writes.
        errors = sorted(set(document_errors(conn, tenant_id, document)), key=error_order)
        if errors:
            raise DocumentInvalid(errors)
        before = take_view(conn, tenant_id)
        applier = apply_document(conn, tenant_id, utc_now(), document)
        announce(applier, before)
        # What processes keep of the catalogue for order creation is read afresh after it (db/order_context.py).
        conn.execute(tenants.update().where(tenants.c.id == tenant_id)
                     .values(catalogue_version=tenants.c.catalogue_version + 1))
        return applier.report

    return transaction_with_retries(engine, attempt)
