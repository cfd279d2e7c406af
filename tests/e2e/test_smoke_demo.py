"""The README's first command, shortened: real broker, aggregator and gateway processes."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]


@pytest.mark.parametrize("broker", ["mosquitto", "embedded"])
def test_demo_smoke_run_end_to_end(broker: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "edge_client.cli", "smoke", "--gateways", "2", "--broker", broker],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "2 gateway processes online" in out
    assert "round closed by quorum with 1/2 answered, timed out: ['gw-2']" in out
    assert "restarted gw-2: next round answered by 2/2" in out
    assert "| 3 | ping 1 MiB | 2/2 |" in out


def test_version_and_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "edge_client.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("wheelfed ")
    helptext = subprocess.run(
        [sys.executable, "-m", "edge_client.cli", "--help"], capture_output=True, text=True, check=True
    )
    for command in ("broker", "gateway", "demo", "smoke", "train", "model", "predict"):
        assert command in helptext.stdout


def test_broker_command_requires_users() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "edge_client.cli", "broker", "--port", "0"], capture_output=True, text=True
    )
    assert proc.returncode != 0 and "--user NAME:PASSWORD" in proc.stderr


def test_broker_command_serves_the_acl_config(tmp_path) -> None:
    import signal

    from aggregator.broker import find_free_port
    from shared.protocol.envelope import Message
    from shared.protocol.messages import Pong
    from shared.protocol.topics import TopicLayout
    from shared.transport.mqtt import MqttConfig, MqttTransport

    port = find_free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edge_client.cli",
            "broker",
            "--port",
            str(port),
            "--run-dir",
            str(tmp_path),
            "--user",
            "aggregator:a-pw",
            "--user",
            "gw-1:g-pw",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert f"listening on 127.0.0.1:{port}" in proc.stdout.readline()
        gw = MqttTransport("gw-1", MqttConfig(port=port, username="gw-1", password="g-pw"), presence=False)
        gw.connect()
        gw.publish(TopicLayout().outbox("gw-2"), Message.create(Pong(), sender="gw-2"))
        gw.flush(5)
        assert gw.denied == 1  # the ACL from deploy/ is in force
        gw.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


def _children(pid: int) -> set[int]:
    from pathlib import Path

    kids: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        kids |= {int(p) for p in (task / "children").read_text().split()}
    return kids


def _ignores(pid: int, signum: int) -> bool:
    from pathlib import Path

    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def _alive(pid: int) -> bool:
    from pathlib import Path

    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(
    ("command", "ready", "how"),
    [
        (["smoke", "--gateways", "2"], "[2/5]", "SIGTERM"),
        (["smoke", "--gateways", "2"], "[2/5]", "SIGINT"),
        (["demo", "--subjects", "2", "--speed", "5"], "streaming the labelled start", "SIGINT"),
        (["demo", "--subjects", "2", "--speed", "5"], "aggregator: training", "SIGTERM"),
    ],
    ids=["smoke-SIGTERM", "smoke-SIGINT", "demo-SIGINT-while-streaming", "demo-SIGTERM-while-training"],
)
def test_runs_stop_everything_they_started_when_interrupted(command: list[str], ready: str, how: str) -> None:
    import signal
    import time

    import threading

    def interruptible() -> None:
        # SIGINT as a terminal's foreground job has it. An ignored SIGINT is inherited across exec
        # (and Python then installs no KeyboardInterrupt handler): a suite started in the background
        # of a non-interactive shell (`... &`, as long runs are) ignores it in every worker, and the
        # run would ignore the test's Ctrl-C, as a background job should
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(
        [sys.executable, "-m", "edge_client.cli", *command],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    try:
        for line in proc.stdout:
            if ready in line:
                break
        # keep reading: the run and the gateways it started share this pipe, and a full pipe would
        # block whoever writes next -- a stop that waits on it would then look like a hang
        threading.Thread(target=proc.stdout.read, daemon=True).start()
        children = _children(proc.pid)
        assert len(children) >= 3  # mosquitto + 2 gateways (+ the demo's aggregator process)
        assert not _ignores(proc.pid, getattr(signal, how)), f"the run ignores {how}: it would never stop"
        proc.send_signal(getattr(signal, how))
        proc.wait(60)  # the demo gives its server 30 s to stop gracefully before it kills it
        deadline = time.monotonic() + 10
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [c for c in children if _alive(c)]
    finally:
        proc.kill()
