"""Alembic environment: runs on the connection handed over by db.migrate."""

from alembic import context

from db.schema import metadata
from db.tenancy import ACROSS_TENANTS

# A migration changes the schema and back-fills rows for every tenant at once, on purpose.
connection = context.config.attributes["connection"].execution_options(**{ACROSS_TENANTS: "schema migration"})
context.configure(connection=connection, target_metadata=metadata, compare_type=True)
with context.begin_transaction():
    context.run_migrations()
