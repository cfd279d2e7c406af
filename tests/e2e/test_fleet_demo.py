"""The README's first command, shortened: ``wheelfed demo`` with three gateways, fast replay; and
with two, below secure aggregation's minimum fleet. The demo drives ``wheelfed server`` through
its REST API: the test opens the dashboard URL the demo prints while the demo runs. The demo
ends with a one-screen summary that names that dashboard; the full report (``--report``) holds
every table and explanation (``details``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]

DASHBOARD = re.compile(r"dashboard (http://127\.0\.0\.1:\d+)/#token=([\w-]+) ")


def _fetch(url: str, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
        return response.status, response.read()


def _demo(tmp_path: Path, *args: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """Run the demo; while it runs, open the dashboard and the API at the URL it printed."""
    run_dir = tmp_path / "run"
    report_path = tmp_path / "report.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edge_client.cli",
            "demo",
            "--speed",
            "60",
            "--rounds",
            "4",
            "--trees",
            "10",
            "--run-dir",
            str(run_dir),
            "--report",
            str(report_path),
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines, seen = [], {}
    try:
        for line in proc.stdout:
            lines.append(line)
            if not seen and (match := DASHBOARD.search(line)):
                url, token = match.groups()
                status, page = _fetch(url + "/")
                seen = {
                    "url": url,
                    "dashboard": (status, b"<html" in page.lower()),
                    "health": json.loads(_fetch(url + "/api/health", token)[1]),
                    "gateways": json.loads(_fetch(url + "/api/gateways", token)[1]),
                }
                try:
                    _fetch(url + "/api/jobs")
                except urllib.error.HTTPError as exc:
                    seen["jobs_without_token"] = exc.code
        proc.wait(900)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(lines)
    assert proc.returncode == 0, out
    # nothing left running
    leftover = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True)
    assert leftover.stdout.strip() == "", leftover.stdout
    return out, json.loads(report_path.read_text()), seen


def _summary(stdout: str) -> list[str]:
    """The demo's last screen: its summary."""
    return stdout[stdout.index("=== WheelFed fleet demo: summary ===") :].rstrip("\n").split("\n")


def _assert_one_screen(stdout: str, report: dict[str, Any], seen: dict[str, Any]) -> None:
    """The summary fits one screen, names the dashboard the demo ran and where the full report is."""
    from aggregator.demo.summary import SCREEN_COLUMNS, SCREEN_LINES

    lines = _summary(stdout)
    assert len(lines) <= SCREEN_LINES and max(map(len, lines)) <= SCREEN_COLUMNS, "\n".join(lines)
    text = " ".join(line.strip() for line in lines)
    assert f"{seen['url']}/#token=" in text and report["dashboard_url"].startswith(seen["url"])
    assert f"full report (every table, reason and byte count): {report['report_path']}" in text
    assert "privacy: " in text and ("why epsilon" in text or "secure aggregation OFF" in text)


def _assert_honest(report: dict[str, Any], stdout: str) -> None:
    """What the report must say, whatever the data decided (``stdout``: its full text)."""
    gateways = {f"gw-{i + 1:02d}" for i in range(report["gateways"])}
    assert "=== WheelFed fleet demo: full report ===" in stdout
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
    first, retraining = report["decisions"]
    for d in report["decisions"]:
        assert d["reason"] in stdout and d["chance_rule"] == "majority-class rate"
        if not d.get("deployed_as"):
            assert d["deploy"] is None and d["reason"].startswith("no model deployed"), d
    if first.get("deployed_as"):  # the demo's rule: above both bars on the same windows
        accuracy = first["candidates"][first["deploy"]]
        assert accuracy > first["local_only"] and accuracy > first["chance"], first
    # the retraining is the server's: one schedule, fired once, its job and promotion decision
    server = report["server"]
    assert server["schedule"]["min_new_windows"] >= 1
    [fired] = [j for j in server["jobs"] if j["schedule_id"] == server["schedule"]["schedule_id"]]
    assert fired["state"] == "completed", fired
    [promotion] = [p for p in server["promotions"] if p["job_id"] == fired["job_id"]]
    assert retraining["reason"].startswith(("the server's promotion rule", "no model deployed: the server's"))
    assert promotion["detail"] in retraining["reason"] and f"schedule {server['schedule']['schedule_id']}" in stdout
    assert bool(retraining.get("deployed_as")) == (promotion["decision"] == "rolled-out"), (retraining, promotion)
    if promotion["baseline_value"] is not None:  # threshold 0: not below the deployed model on the same windows
        assert (promotion["candidate_value"] >= promotion["baseline_value"]) == (promotion["decision"] != "rejected")
    # every job went through the API (GET /api/jobs): both algorithms, each gateway's local-only
    # model in each step, the FedGA-Tree job, and the schedule's retraining
    assert len(server["jobs"]) == 2 + 2 * report["gateways"] + 1 + 1, server["jobs"]
    assert all(j["state"] == "completed" for j in server["jobs"]), server["jobs"]
    assert report["succeeded"]
    if report["deployed"]:
        # every gateway runs the last deployed model; live predictions equal offline ones
        assert report["all_received_model"], report["per_gateway"]
        assert all(g["predictions"] > 0 for g in report["per_gateway"].values()), report["per_gateway"]
        assert report["live_windows"] > 0 and report["live_agreement"] == 1.0
        assert report["live_max_probability_diff"] < 1e-6
    # the raw data in context: how much never left the gateways; the server's bytes by step when
    # its /metrics exports them (wheelfed_mqtt_bytes_total), else the summary says it cannot
    assert "samples x 6 channels as recorded" in stdout and "never left the gateways" in stdout
    if report["traffic_bytes"]:
        assert "x the raw sensor data (" in stdout and "why private training costs more than the data" in stdout
        assert any(k.startswith("training ") for k in report["traffic_by_step"]), report["traffic_by_step"]
        assert 0 < sum(report["traffic_by_step"].values()) <= report["traffic_bytes"]
    else:
        assert report["traffic_by_step"] == {} and "its /metrics has no wheelfed_mqtt_bytes_total" in stdout
    assert "gateways that sat out:" in stdout


def _assert_third_contender(report: dict[str, Any], stdout: str, run_dir: Path) -> None:
    """FedGA-Tree after the first training: one server job over the fleet, one registered tree per
    gateway; the summary's numbers are the API's (the jobs' per-gateway held-out scoring) and
    the registry's (decision nodes); a tree is deployed only on a worst-served gateway it serves
    better than the federated model, and only to that gateway."""
    from aggregator.registry import Registry

    gateways = sorted(f"gw-{i + 1:02d}" for i in range(report["gateways"]))
    jobs = report["server"]["jobs"]
    [ga] = [j for j in jobs if j["algorithm"] == "fedga-tree"]
    assert ga["state"] == "completed" and sorted(ga["participants"]) == gateways, ga
    assert ga["job_id"] == report["personal_job"]["job_id"]
    trees = ga["evaluation"]["models"]
    assert trees == {g: f"activity.{g}:v1" for g in gateways}
    assert set(trees.values()) <= set(report["server"]["models"])
    assert report["personal_job"]["settings"]["generations"] == 20
    assert "Table II uses 100" in stdout
    federated_label = report["personal_job"]["federated"].split(" ")[0]
    [federated] = [j for j in jobs if j["result"] == federated_label]
    personal = {d["gateway"]: d for d in report["personal"]}
    assert sorted(personal) == gateways
    deployments = report["server"]["deployments"]
    with Registry(run_dir / "registry.db") as registry:
        for g, d in personal.items():
            scored = ga["evaluation"]["per_client"][g]
            [local] = [j for j in jobs if j["result"] == f"local-{g}:v1"]  # the first training's
            assert d["tree"] == trees[g] and d["tree_accuracy"] == scored["accuracy"]
            assert d["tree_windows"] == scored["n"] == d["windows"] == federated["evaluation"]["per_client"][g]["n"]
            assert d["federated"] == pytest.approx(federated["evaluation"]["per_client"][g]["accuracy"], abs=1e-12)
            assert d["local_only"] == pytest.approx(local["evaluation"]["per_client"][g]["accuracy"], abs=1e-12)
            model = registry.model(f"activity.{g}", 1)[1]
            assert d["decision_nodes"] == int((model.trees[0].feature >= 0).sum())
            assert d["worst_served"] == (d["federated"] <= d["local_only"] and d["federated"] < 1)
            assert d["deploy"] == (d["worst_served"] and d["tree_accuracy"] > d["federated"])
            served = "yes" if d["worst_served"] else "no"
            assert (
                f"| {g} | {d['windows']} | {d['federated']:.3f} | {d['local_only']:.3f} | "
                f"{d['tree_accuracy']:.3f} | {d['decision_nodes']} | {served} | "
                f"{d['tree'] if d['deploy'] else 'no'} |"
            ) in stdout
            if d["worst_served"]:
                assert f"  {g}: {d['reason']}" in stdout
            # a tree goes to its own gateway only, and only when deployed by the rule
            rows = [r for r in deployments if r["model_id"] == f"activity.{g}"]
            assert all(r["client"] == g for r in rows), rows
            assert any(r["state"] == "active" for r in rows) == d["deploy"], (d, rows)
    assert report["personal_deployed"] == {g: d["tree"] for g, d in personal.items() if d["deploy"]}
    assert (
        "privacy of FedGA-Tree: each gateway sent the aggregator, in the clear, its sample count with Laplace "
        "noise (epsilon 1.0)" in stdout
    )


def _assert_server_seen(seen: dict[str, Any], report: dict[str, Any]) -> None:
    """The dashboard URL the demo printed answered while it ran, with the token it printed."""
    assert seen["dashboard"] == (200, True), seen
    assert seen["health"]["status"] == "ok" and seen["health"]["broker_connected"], seen
    assert seen.get("jobs_without_token") == 401, seen  # the API asks for the operator token
    assert report["server"]["url"] == seen["url"]


def test_fleet_demo_end_to_end(tmp_path: Path) -> None:
    screen, report, seen = _demo(tmp_path, "--subjects", "3")
    out = "\n".join(report["details"])
    assert report["gateways"] == 3
    _assert_one_screen(screen, report, seen)
    _assert_honest(report, out)
    _assert_third_contender(report, out, tmp_path / "run")
    _assert_server_seen(seen, report)
    # three gateways: secure aggregation on, and the summary says what it did not hide
    assert report["privacy"]["secure_aggregation"] and "secure aggregation OFF" not in out
    assert "held-out scoring is per gateway, in the clear" in out
    # a model is deployed on these recordings, so live recognition runs (which step deploys varies
    # with the private trainings' noise: the retrained model scored below the deployed one on
    # some runs, and the server's promotion rule rightly kept the deployed one)
    assert any(d["deployed_as"] for d in report["decisions"]), report["decisions"]
    # the killed gateway rejoined and took part in the next training; nobody sat out
    assert report["killed"] and report["killed_rejoined"], out
    assert report["sat_out"] == [] and "gateways that sat out: none" in out


def test_fleet_demo_with_two_gateways_trains_without_secure_aggregation_and_says_so(tmp_path: Path) -> None:
    screen, report, seen = _demo(tmp_path, "--subjects", "2", "--no-kill")
    out = "\n".join(report["details"])
    assert report["gateways"] == 2 and not report["killed"]
    _assert_one_screen(screen, report, seen)
    _assert_honest(report, out)
    _assert_third_contender(report, out, tmp_path / "run")
    _assert_server_seen(seen, report)
    assert not report["privacy"]["secure_aggregation"]
    assert "NOTE: secure aggregation needs at least 3 gateways" in screen
    assert "privacy: secure aggregation OFF" in out and "privacy: secure aggregation OFF" in screen
