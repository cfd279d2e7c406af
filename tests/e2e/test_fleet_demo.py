"""The README's first command, shortened: ``wheelfed demo`` with three gateways, fast replay."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]


def test_fleet_demo_end_to_end(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    report_path = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "edge_client.cli", "demo", "--subjects", "3", "--speed", "60",
                           "--rounds", "4", "--trees", "10", "--run-dir", str(run_dir), "--report", str(report_path)],
                          capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    report = json.loads(report_path.read_text())
    # every gateway trained, received the deployed model and recognised its stream live
    assert report["gateways"] == 3 and report["all_received_model"], out
    assert all(g["predictions"] > 50 for g in report["per_gateway"].values()), report["per_gateway"]
    # live predictions agree with offline predictions of the same windows by the same model
    assert report["live_windows"] > 150 and report["live_agreement"] == 1.0
    assert report["live_max_probability_diff"] < 1e-6
    # federating pays off: on each gateway's own held-out windows (mean over gateways), the first
    # federated model is not below the gateways' local-only models
    local = sum(report["local_only"].values()) / len(report["local_only"])
    federated = max(sum(acc.values()) / len(acc) for name, acc in report["gateway_accuracy"].items()
                    if name in ("fedscs-xgb", "fedforest"))
    assert federated >= local, (federated, local, report["gateway_accuracy"], report["local_only"])
    # the killed gateway rejoined and took part in the next training
    assert report["killed"] and report["killed_rejoined"], out
    assert "=== WheelFed fleet demo: summary ===" in proc.stdout
    # nothing left running
    leftover = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", leftover.stdout
