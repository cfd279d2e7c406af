"""Reaching the broker: a busy port, a broker that is not running, a wrong password, a port that is not MQTT."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aggregator.broker import mosquitto_available
from aggregator.broker.mosquitto import find_free_port
from tests.cli.cli_support import REPO, assert_one_line_failure, wheelfed

pytestmark = pytest.mark.mosquitto


def test_broker_on_a_busy_port_fails_in_one_line(tmp_path: Path) -> None:
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed (the test command installs it)")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = wheelfed("broker", "--port", str(port), "--user", "aggregator:pw", "--run-dir", str(tmp_path / "b"),
                       cwd=tmp_path, timeout=30)
    assert_one_line_failure(run, 1, f"port {port}", "already in use", "--port")
    assert "listening" not in run.stdout


def _start_broker(tmp_path: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "edge_client.cli", "broker", "--port", str(port),
                             "--user", "aggregator:agg-pw", "--run-dir", str(tmp_path / "broker")],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "broker listening" in line, line + proc.stderr.read()
    return proc


def test_broker_stops_cleanly_on_ctrl_c_and_reports_a_dead_mosquitto(tmp_path: Path) -> None:
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed (the test command installs it)")
    port = find_free_port()
    proc = _start_broker(tmp_path, port)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(15) == 0 and "Traceback" not in proc.stderr.read()
    with socket.socket() as probe:  # mosquitto went with it
        assert probe.connect_ex(("127.0.0.1", port)) != 0

    proc = _start_broker(tmp_path, port)
    subprocess.run(["pkill", "-KILL", "-f", f"{tmp_path / 'broker'}/mosquitto.conf"], check=True)
    assert proc.wait(15) == 1
    err = proc.stderr.read()
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("wheelfed broker: the broker stopped")


def test_wrong_or_missing_password_names_the_variable(tmp_path: Path, mosquitto) -> None:
    args = ("train", "-o", "m.cbor", "--port", str(mosquitto.port))
    missing = wheelfed(*args, cwd=tmp_path)
    assert_one_line_failure(missing, 1, "WHEELFED_MQTT_PASSWORD is not set", "'aggregator'")
    wrong = wheelfed(*args, cwd=tmp_path, env={"WHEELFED_MQTT_PASSWORD": "wrong"})
    assert_one_line_failure(wrong, 1, "check the user name 'aggregator' and WHEELFED_MQTT_PASSWORD")
    assert not (tmp_path / "m.cbor").exists()


def test_no_broker_is_refused_at_once(tmp_path: Path) -> None:
    started = time.monotonic()
    run = wheelfed("model", "rollback", "--registry", "r.db", "--port", str(find_free_port()), cwd=tmp_path)
    assert run.code == 2  # no registry: checked before the network
    run = wheelfed("train", "-o", "m.cbor", "--port", str(find_free_port()), cwd=tmp_path)
    assert_one_line_failure(run, 1, "connection refused")
    assert time.monotonic() - started < 10


@pytest.mark.slow
def test_a_port_that_does_not_speak_mqtt_is_named(tmp_path: Path) -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        run = wheelfed("train", "-o", "m.cbor", "--port", str(silent.getsockname()[1]), cwd=tmp_path, timeout=60)
    assert_one_line_failure(run, 1, "no answer", "does not speak MQTT")
