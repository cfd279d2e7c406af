"""Vertical Federated Forest failures over real processes: mosquitto, three
``wheelfed gateway`` processes of one person and ``wheelfed vertical train``.

* A party's gateway SIGKILLed at level 2 of training: the command fails with one line naming
  it, exit 1, no model file, no partial trees stored on any party.
* A party that refuses the deployment (started without ``--trust``): one line naming it, saying
  which parties now hold the version and that a rerun needs ``--version`` above it; no model file.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.cli.cli_support import REPO, CliRun, assert_one_line_failure
from tests.e2e.test_vertical_forest_deploy import PARTIES, PASSWORDS, person_gateways

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]

TRAIN = (
    "vertical train --parties gw-acc,gw-ecg,gw-gyro --label-holder gw-acc --model-id activity-vf "
    "--trees 8 --max-depth 12 --min-samples-leaf 2 --hop-ms 2000 --tolerance-ms 250 --deadline 5 -o {out}"
)


def _env(port: int) -> dict[str, str]:
    return dict(
        os.environ, PYTHONPATH=str(REPO), WHEELFED_MQTT_PASSWORD=PASSWORDS["aggregator"], WHEELFED_MQTT_PORT=str(port)
    )


def _wheelfed(cwd, port: int, line: str) -> CliRun:
    proc = subprocess.run(
        [sys.executable, "-m", "edge_client.cli", *line.split()],
        cwd=cwd,
        env=_env(port),
        capture_output=True,
        text=True,
        timeout=300,
    )
    return CliRun(proc.returncode, proc.stdout, proc.stderr)


def _stored_models(tmp_path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path)) for g in PARTIES for p in (tmp_path / f"{g}-models").rglob("*.cbor"))


def test_a_gateway_killed_at_level_two_and_a_refused_deployment_are_one_line_each(tmp_path):
    with person_gateways(tmp_path) as person:
        processes, presence, args = person.processes, person.presence, person.gateway_args
        for g in PARTIES:
            processes.start(g, *args[g])
        presence.wait(list(PARTIES), online=True, timeout_s=60)

        # 1. gw-ecg dies once level 2 is reported
        train = subprocess.Popen(
            [sys.executable, "-m", "edge_client.cli", *TRAIN.format(out="a.vfm").split()],
            cwd=tmp_path,
            env=_env(person.port),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines = []
        for line in train.stdout:
            lines.append(line)
            if line.startswith("level 2/"):
                processes.kill("gw-ecg")
                break
        out, err = train.communicate(timeout=120)
        run = CliRun(train.returncode, "".join(lines) + out, err)
        assert any(line.startswith("level 2/") for line in lines), run.stdout
        assert_one_line_failure(run, 1, "gw-ecg", "did not answer", "no model was saved")
        assert not (tmp_path / "a.vfm").exists() and _stored_models(tmp_path) == []

        # 2. gw-ecg back; gw-gyro restarted without --trust: it cannot verify the manifest
        processes.start("gw-ecg", *args["gw-ecg"])
        processes.kill("gw-gyro")
        presence.wait(["gw-gyro"], online=False, timeout_s=60)
        untrusting = [a for a in args["gw-gyro"] if a not in ("--trust", str(tmp_path / "aggregator.pub"))]
        processes.start("gw-gyro", *untrusting)
        presence.wait(list(PARTIES), online=True, timeout_s=60)
        run = _wheelfed(tmp_path, person.port, TRAIN.format(out="b.vfm"))
        assert_one_line_failure(
            run,
            1,
            "deploying activity-vf v1: party gw-gyro did not keep it",
            "no_trusted_key",
            "gw-acc, gw-ecg now hold activity-vf v1",
            "deploying again needs a version above 1",
            "--version",
        )
        assert not (tmp_path / "b.vfm").exists()
        assert _stored_models(tmp_path) == [
            "gw-acc-models/vertical/activity-vf.cbor",
            "gw-ecg-models/vertical/activity-vf.cbor",
        ]
