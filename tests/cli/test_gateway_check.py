"""``wheelfed gateway --check`` and ``--config`` as an operator runs them: a good setup against a
real TLS mosquitto is one OK line (exit 0); each thing wrong -- in the file or on the machine --
is exactly one line on stderr (exit 1), no traceback. A gateway started from the file runs with
the file's settings, the command line winning, and under systemd says READY=1 and pings the
watchdog from its main loop."""

from __future__ import annotations

import datetime
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from aggregator.broker import MosquittoBroker, mosquitto_available
from aggregator.broker.mosquitto import find_free_port
from edge_client.gateway_config import GatewaySettings, check_environment
from firmware_bridge.replay import open_pty
from shared.signing import SigningKey
from tests.cli.cli_support import REPO, CliRun, assert_one_line_failure, wheelfed
from tests.deploy.certs_support import certificate_dir

CHECK = "wheelfed gateway --check: "


def write_config(folder: Path, text: str) -> Path:
    path = folder / "gateway.toml"
    path.write_text(text)
    return path


def problems(run: CliRun) -> list[str]:
    """--check's problem lines (each must be one prefixed line; nothing else on stderr)."""
    assert "Traceback" not in run.stderr, run.stderr
    lines = run.stderr.splitlines()
    assert all(line.startswith(CHECK) for line in lines), lines
    return [line[len(CHECK) :] for line in lines]


def issue(certs: Path, cn: str, name: str, *, days: tuple[int, int] = (-1, 30), ca: str = "ca") -> None:
    """A client certificate for ``cn`` signed by ``certs/{ca}.key``, valid from/to ``days`` from now."""
    ca_key = serialization.load_pem_private_key((certs / f"{ca}.key").read_bytes(), password=None)
    ca_cert = x509.load_pem_x509_certificate((certs / f"{ca}.crt").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + datetime.timedelta(days=days[0]))
        .not_valid_after(now + datetime.timedelta(days=days[1]))
        .sign(ca_key, hashes.SHA256())
    )
    (certs / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (certs / f"{name}.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def make_ca(certs: Path, name: str, subject: x509.Name | None = None) -> None:
    """A CA ``name`` with its own key (and, given ``subject``, another CA's name)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = subject or x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    (certs / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (certs / f"{name}.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


@pytest.mark.mosquitto
def test_tls_setup_checks_out_and_each_certificate_mistake_is_one_line(tmp_path: Path) -> None:
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed: the test command installs it (`apt-get install -y mosquitto`)")
    certs = certificate_dir(tmp_path / "certs", "gw-1", "gw-2")
    issue(certs, "gw-1", "expired", days=(-30, -1))
    issue(certs, "gw-1", "future", days=(2, 30))
    make_ca(certs, "other-ca")
    issue(certs, "gw-1", "foreign", ca="other-ca")
    make_ca(certs, "impostor-ca", x509.load_pem_x509_certificate((certs / "ca.crt").read_bytes()).subject)
    issue(certs, "gw-1", "forged", ca="impostor-ca")
    SigningKey.generate().verify_key.save(tmp_path / "aggregator.pub")
    master, slave = open_pty()
    try:
        with MosquittoBroker(tmp_path / "broker", tls_cert_dir=certs) as broker:

            def check(cert: str, key: str, ca: str = "ca") -> CliRun:
                config = write_config(
                    tmp_path,
                    f"""client_id = "gw-1"
store = "windows.db"
trust = ["aggregator.pub"]
engine = "numpy"
[serial]
device = "{slave}"
[broker]
port = {broker.port}
tls_ca = "certs/{ca}.crt"
tls_cert = "certs/{cert}.crt"
tls_key = "certs/{key}.key"
""",
                )
                return wheelfed("gateway", "--check", "--config", str(config), cwd=tmp_path)

            good = check("gw-1", "gw-1")
            assert good.code == 0 and good.stderr == "", good
            assert good.stdout.startswith("OK: gateway gw-1: store ") and good.stdout.count("\n") == 1
            assert f"serial {slave}" in good.stdout and f"broker 127.0.0.1:{broker.port} reachable (TLS)" in good.stdout

            wrong_cn = check("gw-2", "gw-2")
            assert wrong_cn.code == 1 and problems(wrong_cn) == [
                f"tls_cert {tmp_path}/certs/gw-2.crt: its CN is 'gw-2', not the client id 'gw-1' (the broker takes "
                "the CN as the gateway's identity)"
            ]
            expired = check("expired", "expired")
            assert expired.code == 1 and len(problems(expired)) == 2, expired.stderr  # and the broker refuses it
            assert problems(expired)[0].startswith(f"tls_cert {tmp_path}/certs/expired.crt: expired on ")
            assert problems(expired)[1].startswith(f"broker 127.0.0.1:{broker.port}: TLS refused (")
            future = check("future", "future")
            assert (
                future.code == 1
                and problems(future)[0].startswith(f"tls_cert {tmp_path}/certs/future.crt: not valid before ")
                and "clock" in problems(future)[0]
            )
            mismatch = check("gw-1", "gw-2")
            assert mismatch.code == 1 and problems(mismatch)[0] == (
                f"tls_key {tmp_path}/certs/gw-2.key: does not belong to tls_cert {tmp_path}/certs/gw-1.crt"
            )
            foreign = check("foreign", "foreign")
            assert foreign.code == 1 and problems(foreign)[0] == (
                f"tls_cert {tmp_path}/certs/foreign.crt: not issued by tls_ca {tmp_path}/certs/ca.crt "
                "(its issuer is CN=other-ca)"
            )
            forged = check("forged", "forged")
            assert forged.code == 1 and problems(forged)[0] == (
                f"tls_cert {tmp_path}/certs/forged.crt: not issued by tls_ca {tmp_path}/certs/ca.crt "
                "(its signature does not verify with the CA's key)"
            )
            assert problems(forged)[1].startswith(f"broker 127.0.0.1:{broker.port}: TLS refused (")
            wrong_ca = check("gw-1", "gw-1", ca="other-ca")
            assert wrong_ca.code == 1 and problems(wrong_ca)[0].startswith(
                f"tls_cert {tmp_path}/certs/gw-1.crt: not issued by tls_ca"
            )
            assert problems(wrong_ca)[1].startswith(f"broker 127.0.0.1:{broker.port}: TLS refused (")
    finally:
        os.close(master)


def test_each_machine_problem_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "junk.pub").write_bytes(os.urandom(40))
    (tmp_path / "empty-password").write_text("\n")
    closed = find_free_port()
    config = write_config(
        tmp_path,
        f"""client_id = "gw-1"
store = "missing/windows.db"
trust = ["junk.pub"]
[serial]
device = "/dev/ttyWHEELFEDNOPE"
[broker]
port = {closed}
password_file = "empty-password"
""",
    )
    run = wheelfed("gateway", "--check", "--config", str(config), cwd=tmp_path)
    assert run.code == 1 and run.stdout == ""
    found = problems(run)
    expected = [
        f"store: the folder {tmp_path}/missing does not exist (create it first)",
        "serial /dev/ttyWHEELFEDNOPE: not present (is the sensor adapter plugged in?",
        f"trust {tmp_path}/junk.pub: ",
        f"password_file {tmp_path}/empty-password: empty",
        f"broker 127.0.0.1:{closed}: connection refused (is the broker running, is the port open?)",
    ]
    assert len(found) == len(expected) and all(f.startswith(e) for f, e in zip(found, expected)), found
    # the environment's password stands in for the file's; the command line's port for the file's
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        run = wheelfed(
            "gateway",
            "--check",
            "--config",
            str(config),
            "--port",
            str(listener.getsockname()[1]),
            cwd=tmp_path,
            env={"WHEELFED_MQTT_PASSWORD": "pw"},
        )
    finally:
        listener.close()
    assert [p.split(":")[0] for p in problems(run)] == [
        "store",
        "serial /dev/ttyWHEELFEDNOPE",
        f"trust {tmp_path}/junk.pub",
    ]


def test_free_space_and_the_tflite_engine(tmp_path: Path) -> None:
    report = check_environment(
        GatewaySettings("gw-1", store=tmp_path / "w.db", broker=False, engine="tflite"), min_free_bytes=2**62
    )
    assert len(report.problems) == 1 and report.problems[0].startswith("store: only ")
    assert report.problems[0].endswith(f"MiB free on {tmp_path} (want {2**62 / 2**20:.0f} MiB)")
    ok = check_environment(GatewaySettings("gw-1", store=tmp_path / "w.db", broker=False, engine="tflite"))
    assert ok.problems == () and "engine tflite (TFLite available)" in ok.notes  # the main venv has ai-edge-litert
    blocked = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import sys; sys.modules['ai_edge_litert'] = sys.modules['tflite_runtime'] = None\n"
                "from pathlib import Path\n"
                "from edge_client.gateway_config import GatewaySettings, check_environment\n"
                f"r = check_environment(GatewaySettings('gw-1', store=Path({str(tmp_path / 'w.db')!r}), broker=False, "
                "engine='tflite'))\nprint(len(r.problems), *r.problems)"
            ),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    assert blocked.stdout.startswith("1 engine tflite: the TFLite engine needs a TFLite interpreter"), blocked


def test_config_mistakes_are_one_line_each_exit_2_to_run_and_1_to_check(tmp_path: Path) -> None:
    config = write_config(tmp_path, "client_id = 'gw-1'\n[serial]\nbuad = 9600\n[retention]\nmax_windows = 0\n")
    run = wheelfed("gateway", "--config", str(config), cwd=tmp_path)
    assert_one_line_failure(run, 2, "retention.max_windows: must be at least 1, got 0")
    assert run.stderr.splitlines() == [
        f"wheelfed gateway: {config}: serial.buad: unknown key (did you mean serial.baud?)",
        f"wheelfed gateway: {config}: retention.max_windows: must be at least 1, got 0",
    ]
    checked = wheelfed("gateway", "--check", "--config", str(config), cwd=tmp_path)
    assert checked.code == 1 and problems(checked) == [
        f"{config}: serial.buad: unknown key (did you mean serial.baud?)",
        f"{config}: retention.max_windows: must be at least 1, got 0",
    ]
    assert_one_line_failure(
        wheelfed("gateway", "--no-broker", cwd=tmp_path),
        2,
        "client id: not set (--client-id, or client_id in the config file)",
    )
    assert_one_line_failure(
        wheelfed("gateway", "--config", "nope.toml", cwd=tmp_path), 2, "--config", "no such file: nope.toml"
    )
    assert list(tmp_path.iterdir()) == [config], "a refused start left files behind"


def test_a_gateway_runs_from_its_config_and_tells_systemd(tmp_path: Path) -> None:
    """READY=1 after start, WATCHDOG=1 every WatchdogSec/2 from the main loop, over a real
    NOTIFY_SOCKET; the file's store, serial device and broker setting, the command line's
    stats interval."""
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify"))
    notify.settimeout(10)
    master, slave = open_pty()
    config = write_config(
        tmp_path,
        f"""client_id = "gw-7"
store = "data/w.db"
stats_every = 30
[serial]
device = "{slave}"
[broker]
enabled = false
""",
    )
    (tmp_path / "data").mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "600000"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "edge_client.cli", "gateway", "--config", str(config), "--stats-every", "0.5"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        messages = [notify.recv(4096).decode()]
        started = time.monotonic()
        messages += [notify.recv(4096).decode() for _ in range(4)]
        elapsed = time.monotonic() - started
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        notify.close()
        os.close(master)
    assert proc.returncode == 0, err
    assert messages[0].startswith("READY=1\nSTATUS=session gw-7-") and messages[0].endswith(", broker -")
    assert messages[1:] == ["WATCHDOG=1"] * 4
    assert 0.6 < elapsed < 3.0, elapsed  # every 0.3 s (half of 0.6 s), give or take the loop's tick
    lines = out.splitlines()
    assert lines[0].startswith("gateway gw-7: session gw-7-") and lines[0].endswith(
        f", store {tmp_path}/data/w.db, serial {slave}, broker -"
    )
    assert sum(line.startswith("session=") for line in lines) >= 2  # --stats-every 0.5 beat the file's 30
    assert (tmp_path / "data" / "w.db").exists()
