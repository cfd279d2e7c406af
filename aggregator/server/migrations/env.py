"""Alembic environment: migrations run on the connection ``aggregator.registry`` hands over
(``config.attributes["connection"]``), inside its transaction -- never from a URL of their own."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None)
with context.begin_transaction():
    context.run_migrations()
