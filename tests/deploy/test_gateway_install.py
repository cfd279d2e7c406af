"""``deploy/gateway/``: the unit passes ``systemd-analyze verify``, the script passes shellcheck,
the udev rule names the device the config template reads; and end to end (slow), the script
installs a gateway into a throwaway root with the Raspberry Pi profile (numpy 1.26 +
tflite-runtime 2.14 and nothing of the server's or the trainer's, nor the aggregator package:
``wheelfed --help`` lists the gateway's commands only), the installed
``wheelfed gateway --check`` passes, the installed gateway -- started as the unit starts it --
takes a pushed model, runs it on TFLite and predicts on a replayed real recording exactly what
the model predicts offline; an upgrade keeps the edited config, the store and the models; an
uninstall keeps the data, a purge removes it."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.cli.cli_support import REPO
from tests.edge_client.test_edge_dependencies import GATEWAY_COMMANDS

GATEWAY_DIR = REPO / "deploy" / "gateway"
INSTALL = GATEWAY_DIR / "install.sh"
UNIT = GATEWAY_DIR / "wheelfed-gateway.service"
RULES = GATEWAY_DIR / "99-wheelfed-serial.rules"
TEMPLATE = GATEWAY_DIR / "gateway.toml"


def need(binary: str, package: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.fail(f"{binary} is not installed: apt-get install -y {package}")
    return path


def verify_unit(unit: Path) -> None:
    """``systemd-analyze verify``: exit 0 and not a word on stderr (warnings included)."""
    run = subprocess.run(
        [need("systemd-analyze", "systemd"), "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0 and run.stderr.strip() == "", run.stderr


def unit_settings(text: str) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def install(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(INSTALL), *args], capture_output=True, text=True, timeout=timeout)


def test_install_script_passes_shellcheck() -> None:
    run = subprocess.run(
        [need("shellcheck", "shellcheck"), "--severity=style", str(INSTALL)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stdout


def test_unit_passes_systemd_analyze_verify_and_asks_for_what_the_gateway_needs(tmp_path: Path) -> None:
    """The shipped unit, with ExecStart pointed at a stand-in (verify checks the binary exists)."""
    stand_in = tmp_path / "opt" / "wheelfed" / "venv" / "bin" / "wheelfed"
    stand_in.parent.mkdir(parents=True)
    stand_in.write_text("#!/bin/sh\n")
    stand_in.chmod(0o755)
    unit = tmp_path / "wheelfed-gateway.service"
    unit.write_text(UNIT.read_text().replace("/opt/wheelfed", str(tmp_path / "opt" / "wheelfed")))
    verify_unit(unit)
    got = unit_settings(UNIT.read_text())
    assert got["ExecStart"] == [
        "/opt/wheelfed/venv/bin/wheelfed --log-level INFO gateway --config /etc/wheelfed/gateway.toml"
    ]
    for key, value in {
        "Type": "notify",
        "Restart": "on-failure",
        "RestartPreventExitStatus": "2",
        "User": "wheelfed",
        "SupplementaryGroups": "dialout",
        "ProtectSystem": "strict",
        "ReadWritePaths": "/var/lib/wheelfed",
        "StateDirectory": "wheelfed",
        "NoNewPrivileges": "yes",
        "WorkingDirectory": "/var/lib/wheelfed",
    }.items():
        assert got[key] == [value], key
    assert int(got["WatchdogSec"][0]) >= 10  # the gateway pings every WatchdogSec/2 from its main loop


def test_the_template_keeps_its_state_where_the_unit_may_write_and_reads_the_udev_name() -> None:
    template = TEMPLATE.read_text()
    assert re.search(r'^store = "@STATE@/windows\.db"$', template, re.M)
    assert re.search(r'^model_dir = "@STATE@/models"$', template, re.M)
    assert re.search(r"^StateDirectory=wheelfed$", UNIT.read_text(), re.M)  # @STATE@ = /var/lib/wheelfed
    device = re.search(r'^device = "/dev/(.+)"$', template, re.M).group(1)
    rules = [line for line in RULES.read_text().splitlines() if line and not line.startswith("#")]
    assert len(rules) >= 6
    entry = re.compile(r'^(?:[A-Z]+(?:\{[a-zA-Z]+\})?(?:==|\+=|=)"[^"]*"(?:, |$))+$')
    for rule in rules:
        assert entry.match(rule), rule
        assert re.search(r'ATTRS\{idVendor\}=="[0-9a-f]{4}", ATTRS\{idProduct\}=="[0-9a-f]{4}"', rule), rule
        assert f'SYMLINK+="{device}"' in rule and 'GROUP="dialout"' in rule and 'SUBSYSTEM=="tty"' in rule
    assert "ATTRS{serial}" in RULES.read_text()  # how to pin one adapter by its serial number


@pytest.mark.parametrize(
    "args, message",
    [
        (("--engine", "tensorflow"), "--engine must be tflite-runtime or ai-edge-litert, got tensorflow"),
        (("--purge",), "--purge goes with --uninstall"),
        (
            ("--client-id", "gw/1"),
            "--client-id gw/1: use 1-64 characters from A-Z a-z 0-9 _ . - starting with a letter or digit",
        ),
        (("--frobnicate",), "unknown option --frobnicate (see --help)"),
    ],
)
def test_install_script_refuses_bad_options_in_one_line(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    run = install("--prefix", str(tmp_path / "root"), *args, timeout=60)
    assert run.returncode == 2 and run.stderr == f"deploy/gateway/install.sh: {message}\n", run.stderr
    assert not (tmp_path / "root" / "opt").exists()


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) runs the script as nobody")
def test_without_prefix_it_needs_root() -> None:
    if os.getuid() == 0:
        # nobody may not be able to read the checkout (a clone in root's 0700 home): run a copy
        # of the script from a folder anyone can read, with that folder as the working directory
        with tempfile.TemporaryDirectory() as folder:
            os.chmod(folder, 0o755)
            script = Path(folder) / "deploy" / "gateway" / "install.sh"
            script.parent.mkdir(parents=True)
            shutil.copy(INSTALL, script)
            for path in (script.parent.parent, script.parent, script):
                path.chmod(0o755)
            run = subprocess.run(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "bash", str(script)],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=folder,
            )
    else:
        run = install(timeout=60)
    assert run.returncode == 2 and run.stderr == (
        "deploy/gateway/install.sh: run as root (sudo), or give --prefix DIR to install into a folder\n"
    )


def test_nothing_to_upgrade_before_an_install(tmp_path: Path) -> None:
    run = install("--prefix", str(tmp_path / "root"), "--upgrade", timeout=60)
    assert run.returncode == 1 and "nothing to upgrade" in run.stderr


def digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.slow
@pytest.mark.mosquitto
def test_install_check_push_replay_predict_upgrade_uninstall(tmp_path: Path) -> None:
    import aggregator
    from aggregator.algorithms import FedSCSXGB
    from aggregator.broker import BrokerUser, MosquittoBroker, mosquitto_available
    from aggregator.deployment import deploy
    from aggregator.fleet import Presence
    from aggregator.registry import Registry
    from aggregator.rounds import RoundEngine
    from edge_client.processing import extract_recording
    from edge_client.store import WindowRecord, WindowStore
    from firmware_bridge.importers import seglearn_watch
    from firmware_bridge.recording import Recording
    from firmware_bridge.replay import open_pty, replay
    from shared.model import model_inputs
    from shared.protocol.messages import Status
    from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
    from shared.signing import SigningKey
    from shared.transport.mqtt import MqttConfig, MqttTransport

    if not mosquitto_available():
        pytest.fail("mosquitto is not installed: the test command installs it (`apt-get install -y mosquitto`)")
    root = tmp_path / "root"
    run = install("--prefix", str(root), "--client-id", "gw-1")
    assert run.returncode == 0, run.stderr
    assert "--prefix: not creating the system user wheelfed" in run.stderr
    venv, etc, state = root / "opt" / "wheelfed" / "venv", root / "etc" / "wheelfed", root / "var" / "lib" / "wheelfed"
    python, wheelfed = venv / "bin" / "python", venv / "bin" / "wheelfed"

    # the Pi profile and nothing else: numpy 1.26 + tflite-runtime 2.14, no server/training packages
    listed = subprocess.run(
        [str(python), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True, check=True
    ).stdout
    installed = dict(line.lower().split("==") for line in listed.split())
    assert installed["numpy"].startswith("1.26.") and installed["tflite-runtime"].startswith("2.14.")
    assert {"wheelfed", "paho-mqtt", "cbor2", "pyserial", "cryptography", "tflite", "flatbuffers"} <= set(installed)
    assert not set(installed) & {
        "scipy",
        "xgboost",
        "scikit-learn",
        "pandas",
        "fastapi",
        "uvicorn",
        "sqlalchemy",
        "alembic",
        "ai-edge-litert",
        "tensorflow",
        "amqtt",
        "hypothesis",
        "pytest",
    }
    # the gateway's packages and commands only: no aggregator to import, no server command listed
    assert subprocess.run([str(python), "-c", "import aggregator"], capture_output=True, cwd="/").returncode == 1
    helped = subprocess.run([str(wheelfed), "--help"], capture_output=True, text=True, cwd="/")
    assert helped.returncode == 0 and helped.stderr == "", helped.stderr
    listed = re.findall(r"^    ([a-z-]+) ", helped.stdout, re.M)
    assert listed == GATEWAY_COMMANDS, helped.stdout
    verify_unit(root / "etc" / "systemd" / "system" / "wheelfed-gateway.service")
    assert (root / "etc" / "udev" / "rules.d" / "99-wheelfed-serial.rules").read_text() == RULES.read_text()

    # a model trained on a real recording, and a store that has run before (it knows its feature set)
    recording_path = seglearn_watch.import_all(tmp_path / "rec")[0]
    recording = Recording.load(recording_path)
    batch, _ = extract_recording(recording_path)
    fsv = batch.feature_set_version
    labelled = np.array([y is not None for y in batch.labels])
    X, y = batch.X[labelled], np.array([str(v) for v in batch.labels[labelled]])
    model = aggregator.simulate(
        FedSCSXGB(n_rounds=3, n_bins=32, feature_set_version=fsv, secure_aggregation=False), [(X, y)]
    )
    registry = Registry(tmp_path / "registry.db")
    registry.add("activity", model)
    key = SigningKey.generate()
    key.verify_key.save(etc / "aggregator.pub")
    with WindowStore(state / "windows.db") as store:
        store.add(WindowRecord("earlier", 0, 1, batch.X[0], fsv))

    passwords = {"aggregator": "agg-pw", "gw-1": "gw-pw"}
    (etc / "mqtt-password").write_text(passwords["gw-1"] + "\n")
    master, slave = open_pty()
    statuses: list[Status] = []
    with MosquittoBroker(tmp_path / "broker", users=[BrokerUser(n, p) for n, p in passwords.items()]) as broker:
        # what the operator edits after the install: trust key, broker, password, engine, device
        config = etc / "gateway.toml"
        text = config.read_text()
        for old, new in (
            ("trust = []", 'trust = ["aggregator.pub"]'),
            ('engine = "auto"', 'engine = "tflite"'),
            ("stats_every = 60.0", "stats_every = 1"),
            ("publish_every = 10.0", "publish_every = 0.5"),
            ('device = "/dev/wheelfed-sensor"', f'device = "{slave}"'),
            ('host = "broker.example.org"', f'host = "127.0.0.1"\nport = {broker.port}'),
            ("\ntls_", "\n# tls_"),
            ("# password_file", "password_file"),
        ):
            assert old in text, old
            text = text.replace(old, new)
        config.write_text(text)
        check = subprocess.run(
            [str(wheelfed), "gateway", "--config", str(config), "--check"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
        )
        assert check.returncode == 0 and check.stderr == "", check.stderr
        assert check.stdout.startswith("OK: gateway gw-1: ") and "engine tflite (TFLite available)" in check.stdout

        agg = MqttTransport(
            AGGREGATOR_ID,
            MqttConfig(port=broker.port, username="aggregator", password=passwords["aggregator"]),
            presence=False,
        )
        agg.connect()
        agg.subscribe(TopicLayout().status("gw-1"), lambda _t, m: statuses.append(m.body))
        presence = Presence(agg, TopicLayout())
        # as the unit starts it: ExecStart's command line, from / (no password in the environment)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("WHEELFED_", "PYTHON"))}
        gateway = subprocess.Popen(
            [str(wheelfed), "--log-level", "INFO", "gateway", "--config", str(config)],
            cwd="/",
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(line.rstrip() for line in gateway.stdout), daemon=True)
        reader.start()
        try:
            presence.wait(["gw-1"], online=True, timeout_s=60)
            deadline = time.monotonic() + 30  # the session line may follow the retained status
            while not (started := [line for line in lines if line.startswith("gateway gw-1: session ")]):
                assert time.monotonic() < deadline and gateway.poll() is None, lines
                time.sleep(0.05)
            session = started[0].split()[3].rstrip(",")  # client id + start time, as a service runs it
            result = deploy(RoundEngine(agg), registry, key, "activity", 1, ["gw-1"])
            assert result.active == ["gw-1"], result
            stats = replay(recording, master, speed=0, wait_for_reader_s=30)
            assert stats.completed
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:
                with WindowStore(state / "windows.db") as store:
                    if len(store.predictions(session)) >= len(batch.X) - 2:
                        break
                time.sleep(0.5)
            time.sleep(1.5)
            gateway.send_signal(signal.SIGTERM)
            assert gateway.wait(30) == 0, "\n".join(lines)
        finally:
            gateway.kill()
            agg.close()
            os.close(master)
        reader.join(5)
    assert any("model=activity:v1" in line for line in lines), lines
    online = [s for s in statuses if s.online]  # the last one is the last will: offline, no detail
    assert online and online[-1].detail["engine"] == "tflite", online[-1:]

    # TFLite on the Pi profile predicts what the model predicts offline, window for window
    with WindowStore(state / "windows.db") as store:
        live = store.predictions(session)
        windows = store.query(fsv, labelled_only=False)
    assert len(live) >= len(batch.X) - 2
    rows = {int(e): i for i, e in enumerate(windows.meta.end_us)}
    offline = model.predict_proba(model_inputs(model, windows.X[[rows[p.end_us] for p in live]].astype(np.float32)))
    np.testing.assert_allclose(np.array([p.probabilities for p in live]), offline, rtol=0, atol=1e-6)
    assert [p.label for p in live] == [str(c) for c in np.asarray(model.classes)[offline.argmax(axis=1)]]

    # upgrade: the edited config, the store and the models are kept; the venv works again
    kept_config, kept_state = config.read_bytes(), digest(state)
    assert any(name.startswith("models/") for name in kept_state), kept_state
    run = install("--prefix", str(root), "--upgrade")
    assert run.returncode == 0 and f"kept {config} (yours)" in run.stderr, run.stderr
    assert config.read_bytes() == kept_config and digest(state) == kept_state
    assert subprocess.run([str(wheelfed), "--version"], capture_output=True, text=True).returncode == 0
    assert install("--prefix", str(root), timeout=60).returncode == 1  # a second install says: --upgrade

    # uninstall keeps the data and the settings; --purge removes them
    run = install("--prefix", str(root), "--uninstall", timeout=60)
    assert run.returncode == 0, run.stderr
    assert (
        not (root / "opt" / "wheelfed").exists()
        and not (root / "etc" / "systemd" / "system" / "wheelfed-gateway.service").exists()
    )
    assert not (root / "etc" / "udev" / "rules.d" / "99-wheelfed-serial.rules").exists()
    assert digest(state) == kept_state and config.read_bytes() == kept_config
    run = install("--prefix", str(root), "--uninstall", "--purge", timeout=60)
    assert run.returncode == 0 and not state.exists() and not etc.exists(), run.stderr
