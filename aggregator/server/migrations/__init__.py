"""Alembic migrations of the registry database (``aggregator.registry`` runs them on open)."""
