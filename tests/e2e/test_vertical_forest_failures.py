"""Vertical Federated Forest failures over real processes (issue 16): mosquitto, three
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

from aggregator.broker import BrokerUser, MosquittoBroker, mosquitto_available
from aggregator.fleet import GatewayProcesses, Presence
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from shared.transport.mqtt import MqttConfig, MqttTransport
from tests.cli.cli_support import REPO, CliRun, assert_one_line_failure
from tests.e2e.test_vertical_forest_deploy import PARTIES, PASSWORDS, _fill

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]

TRAIN = ("vertical train --parties gw-acc,gw-ecg,gw-gyro --label-holder gw-acc --model-id activity-vf "
         "--trees 8 --max-depth 12 --min-samples-leaf 2 --hop-ms 2000 --tolerance-ms 250 --deadline 5 -o {out}")


def _env(port: int) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), WHEELFED_MQTT_PASSWORD=PASSWORDS["aggregator"],
                WHEELFED_MQTT_PORT=str(port))


def _wheelfed(cwd, port: int, line: str) -> CliRun:
    proc = subprocess.run([sys.executable, "-m", "edge_client.cli", *line.split()], cwd=cwd, env=_env(port),
                          capture_output=True, text=True, timeout=300)
    return CliRun(proc.returncode, proc.stdout, proc.stderr)


def _stored_models(tmp_path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path)) for g in PARTIES for p in (tmp_path / f"{g}-models").rglob("*.cbor"))


def test_a_gateway_killed_at_level_two_and_a_refused_deployment_are_one_line_each(tmp_path):
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed: the test command installs it")
    stores = {g: tmp_path / f"{g}.db" for g in PARTIES}
    _fill(stores)
    broker = MosquittoBroker(tmp_path / "broker", users=[BrokerUser(n, p) for n, p in PASSWORDS.items()])
    with broker:
        port = broker.port
        assert _wheelfed(tmp_path, port, "keygen -o aggregator.key").code == 0
        assert _wheelfed(tmp_path, port, "vertical keygen -o person.key").code == 0
        key_args = ("--party-key-file", str(tmp_path / "person.key"))
        trust = ("--trust", str(tmp_path / "aggregator.pub"))
        processes = GatewayProcesses(port, 5, PASSWORDS, tmp_path)
        agg = MqttTransport(AGGREGATOR_ID, MqttConfig(port=port, username="aggregator",
                                                      password=PASSWORDS["aggregator"]), presence=False)
        agg.connect()
        presence = Presence(agg, TopicLayout())
        try:
            for g in PARTIES:
                processes.start(g, "--store", str(stores[g]), *key_args, *trust)
            presence.wait(list(PARTIES), online=True, timeout_s=60)

            # 1. gw-ecg dies once level 2 is reported
            train = subprocess.Popen([sys.executable, "-m", "edge_client.cli", *TRAIN.format(out="a.vfm").split()],
                                     cwd=tmp_path, env=_env(port), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
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
            processes.start("gw-ecg", "--store", str(stores["gw-ecg"]), *key_args, *trust)
            processes.kill("gw-gyro")
            presence.wait(["gw-gyro"], online=False, timeout_s=60)
            processes.start("gw-gyro", "--store", str(stores["gw-gyro"]), *key_args)
            presence.wait(list(PARTIES), online=True, timeout_s=60)
            run = _wheelfed(tmp_path, port, TRAIN.format(out="b.vfm"))
            assert_one_line_failure(run, 1, "deploying activity-vf v1: party gw-gyro did not keep it", "no_trusted_key",
                                    "gw-acc, gw-ecg now hold activity-vf v1",
                                    "deploying again needs a version above 1", "--version")
            assert not (tmp_path / "b.vfm").exists()
            assert _stored_models(tmp_path) == ["gw-acc-models/vertical/activity-vf.cbor",
                                                "gw-ecg-models/vertical/activity-vf.cbor"]
        finally:
            processes.stop_all()
            agg.close()
