"""Alembic environment: runs on the connection handed over by db.migrate."""

from alembic import context

from db.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, compare_type=True)
with context.begin_transaction():
    context.run_migrations()
