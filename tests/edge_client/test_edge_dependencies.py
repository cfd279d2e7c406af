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
