"""The README's first command, shortened: ``wheelfed demo`` with three gateways, fast replay; and
with two, below secure aggregation's minimum fleet."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]


def _demo(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict[str, Any], str]:
    run_dir = tmp_path / "run"
    report_path = tmp_path / "report.json"
    proc = subprocess.run([sys.executable, "-m", "edge_client.cli", "demo", "--speed", "60", "--rounds", "4",
                           "--trees", "10", "--run-dir", str(run_dir), "--report", str(report_path), *args],
                          capture_output=True, text=True, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    # nothing left running
    leftover = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", leftover.stdout
    return proc, json.loads(report_path.read_text()), out


def _assert_honest(report: dict[str, Any], stdout: str) -> None:
    """What the summary must say, whatever the data decided."""
    gateways = {f"gw-{i + 1:02d}" for i in range(report["gateways"])}
    assert "=== WheelFed fleet demo: summary ===" in stdout
    # every score says on how many held-out windows of which gateways it was taken
    federated = [s for s in report["scorings"] if s["step"] != "end of the run"]
    assert federated
    for s in federated:
        assert set(s["windows_per_gateway"]) == gateways, s
        assert s["windows"] == sum(s["windows_per_gateway"].values()) > 0, s
    # a re-scored model says why its windows differ from its first scoring
    for s in federated:
        if "re-scored" in s["model"]:
            assert s["note"].startswith(f"re-scored on {s['windows']} held-out windows of {len(gateways)} gateways"), s
            assert s["note"] in stdout
    # one decision per training step, with its reason; a deployed model beat both bars on the same windows
    assert [d["step"] for d in report["decisions"]] == ["first training", "retraining"], report["decisions"]
    for d in report["decisions"]:
        assert d["reason"] in stdout and d["chance_rule"] == "majority-class rate"
        if d.get("deployed_as"):
            accuracy = d["candidates"][d["deploy"]]
            assert accuracy > d["local_only"] and accuracy > d["chance"], d
            assert d["deployed_rescored"] is None or accuracy >= d["deployed_rescored"], d
        else:
            assert d["deploy"] is None and d["reason"].startswith("no model deployed"), d
    assert report["succeeded"]
    if report["deployed"]:
        # every gateway runs the last deployed model; live predictions equal offline ones
        assert report["all_received_model"], report["per_gateway"]
        assert all(g["predictions"] > 0 for g in report["per_gateway"].values()), report["per_gateway"]
        assert report["live_windows"] > 0 and report["live_agreement"] == 1.0
        assert report["live_max_probability_diff"] < 1e-6
    # the bytes in context: of what the multiple is, by step, and why
    assert "x the raw sensor data (" in stdout and "samples x 6 channels as recorded" in stdout
    assert any(k.startswith("training ") for k in report["traffic_by_step"]), report["traffic_by_step"]
    assert sum(report["traffic_by_step"].values()) <= report["traffic_bytes"]
    assert "why private training costs more than the data" in stdout
    assert "gateways that sat out:" in stdout


def test_fleet_demo_end_to_end(tmp_path: Path) -> None:
    proc, report, out = _demo(tmp_path, "--subjects", "3")
    assert report["gateways"] == 3
    _assert_honest(report, proc.stdout)
    # three gateways: secure aggregation on, and the summary says what it did not hide
    assert report["privacy"]["secure_aggregation"] and "secure aggregation OFF" not in proc.stdout
    assert "held-out scoring is per gateway, in the clear" in proc.stdout
    # the retraining with the later labels deploys on these recordings (the first labelled
    # minutes alone do not beat always guessing the most common held-out activity)
    assert report["decisions"][-1].get("deployed_as"), report["decisions"]
    # the killed gateway rejoined and took part in the next training; nobody sat out
    assert report["killed"] and report["killed_rejoined"], out
    assert report["sat_out"] == [] and "gateways that sat out: none" in proc.stdout


def test_fleet_demo_with_two_gateways_trains_without_secure_aggregation_and_says_so(tmp_path: Path) -> None:
    proc, report, out = _demo(tmp_path, "--subjects", "2", "--no-kill")
    assert report["gateways"] == 2 and not report["killed"]
    _assert_honest(report, proc.stdout)
    assert not report["privacy"]["secure_aggregation"]
    assert "NOTE: secure aggregation needs at least 3 gateways" in proc.stdout
    assert "privacy: secure aggregation OFF" in proc.stdout
    assert "dense and masked" not in proc.stdout and "in the clear (no secure aggregation)" in proc.stdout
