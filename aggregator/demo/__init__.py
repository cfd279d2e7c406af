"""``wheelfed demo``: the fleet on real recorded sessions (orchestrator, ``wheelfed server`` as
its aggregator driven through the REST API, terminal view, summary report)."""
