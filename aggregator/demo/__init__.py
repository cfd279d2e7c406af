"""``wheelfed demo``: the fleet on real recorded sessions (orchestrator, aggregator process,
terminal view, summary report)."""
