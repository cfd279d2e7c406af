"""The gateway runs with the edge dependencies only: never xgboost, scikit-learn, pandas, amqtt."""

from __future__ import annotations

import subprocess
import sys

GATEWAY_MODULES = [
    "edge_client.gateway",
    "edge_client.dispatcher",
    "edge_client.store",
    "edge_client.pipeline",
    "shared.model",
    "shared.transport.mqtt",
    "shared.transport.memory",
    "shared.protocol.messages",
    "edge_client.cli",
    "firmware_bridge",
]
FORBIDDEN = ["xgboost", "sklearn", "pandas", "amqtt", "fastapi", "aggregator"]


def test_gateway_imports_pull_in_no_server_or_training_libraries() -> None:
    code = (
        "import importlib, sys\n"
        f"for m in {GATEWAY_MODULES!r}: importlib.import_module(m)\n"
        f"bad = sorted({{m.split('.')[0] for m in sys.modules}} & set({FORBIDDEN!r}))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"gateway imports pulled in {out.stdout.strip()}"


#: The ``wheelfed`` subcommands a gateway has on its own (``edge_client/cli``).
GATEWAY_COMMANDS = ["gateway", "features", "record", "replay", "import", "predict"]
#: Prepended to a ``python -c`` program: every import of the aggregator fails as it does on a
#: gateway installed without it (``deploy/gateway/install.sh``), whatever this venv holds.
WITHOUT_AGGREGATOR = (
    "import importlib.abc, sys\n"
    "class NoAggregator(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] == 'aggregator':\n"
    "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
    "sys.meta_path.insert(0, NoAggregator())\n"
)


def _gateway_only(program: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_AGGREGATOR + program, *argv], capture_output=True, text=True, timeout=120
    )


def test_without_the_aggregator_wheelfed_lists_the_gateway_commands_only() -> None:
    listed = _gateway_only(
        "from edge_client.cli import build_parser\n"
        "print(' '.join(build_parser()._subparsers._group_actions[0].choices))"
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == GATEWAY_COMMANDS
    main = "from edge_client.cli import main\nsys.exit(main())"
    helped = _gateway_only(main, "--help")
    assert helped.returncode == 0 and helped.stderr == "", helped.stderr
    assert all(f"\n    {command} " in helped.stdout for command in GATEWAY_COMMANDS), helped.stdout
    assert " train " not in helped.stdout and " server " not in helped.stdout
    assert _gateway_only(main, "gateway", "--help").returncode == 0
    server_command = _gateway_only(main, "train")
    assert server_command.returncode == 2 and "invalid choice: 'train'" in server_command.stderr, server_command.stderr
