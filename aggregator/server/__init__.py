"""``wheelfed server``: the long-running aggregator service.

``config`` (settings from a TOML file and ``WHEELFED_*`` variables), ``service`` (the broker
connection, the fleet tracker, the job runner, the scheduler), ``api`` (the FastAPI app and its
dashboard), ``migrations`` (the registry's Alembic scripts). Importing this package imports none
of FastAPI, uvicorn or SQLAlchemy; the modules that need them import them themselves.
"""
