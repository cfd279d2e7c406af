"""The aggregator's ``wheelfed`` commands: broker, fleet, train, vertical, keygen and model,
server, the helper processes past one machine (merge-worker, site-aggregator, load-test), demo
and smoke.

Each module is a group of subcommands with an ``add(subparsers)``, declared as a
``wheelfed.commands`` entry point in ``pyproject.toml``; ``edge_client.cli`` finds them there,
so the gateway's code never imports this package and a gateway installed without it lists only
its own commands. They reuse the gateway side's argument checks, broker options and one-line
errors (``edge_client.cli.arguments``, ``connection``, ``errors``), which the layers allow.
"""
