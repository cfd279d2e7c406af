"""Reaching the broker: a busy port, a broker that is not running, a wrong password, a port that is not MQTT."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aggregator.broker import mosquitto_available
from aggregator.broker.mosquitto import find_free_port
from tests.cli.cli_support import REPO, assert_one_line_failure, wheelfed
from tests.deploy.certs_support import certificate_dir

pytestmark = pytest.mark.mosquitto


def test_broker_on_a_busy_port_fails_in_one_line(tmp_path: Path) -> None:
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed (the test command installs it)")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = wheelfed(
            "broker",
            "--port",
            str(port),
            "--user",
            "aggregator:pw",
            "--run-dir",
            str(tmp_path / "b"),
            cwd=tmp_path,
            timeout=30,
        )
    assert_one_line_failure(run, 1, f"port {port}", "already in use", "--port")
    assert "listening" not in run.stdout


def _start_broker(tmp_path: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edge_client.cli",
            "broker",
            "--port",
            str(port),
            "--user",
            "aggregator:agg-pw",
            "--run-dir",
            str(tmp_path / "broker"),
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
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


# -- passwords off the command line, plain TCP on loopback only, TLS from deploy/certs -------------


def _pids_running(run_dir: Path) -> dict[str, int]:
    """The mosquitto process serving ``run_dir`` (by its config path), by name."""
    found = subprocess.run(["pgrep", "-f", f"{run_dir}/mosquitto.conf"], capture_output=True, text=True).stdout.split()
    return {"mosquitto": int(found[0])} if found else {}


def _cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def test_password_file_keeps_passwords_out_of_ps_and_out_of_the_run_dir(tmp_path: Path) -> None:
    """No password in the argv of ``wheelfed broker`` or mosquitto, in the rendered config, nor in
    clear in any file of the run dir (0700; mosquitto gets the hashes only, 0600)."""
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed (the test command installs it)")
    passwords = tmp_path / "passwords"
    passwords.write_text("# broker accounts\naggregator:agg-Secret-1\n\ngw-1:gw1-Secret-2\n")
    passwords.chmod(0o600)
    port, run_dir = find_free_port(), tmp_path / "broker"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edge_client.cli",
            "broker",
            "--port",
            str(port),
            "--password-file",
            str(passwords),
            "--run-dir",
            str(run_dir),
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and "broker listening" in proc.stdout.readline()
        pids = {"wheelfed broker": proc.pid, **_pids_running(run_dir)}
        assert set(pids) == {"wheelfed broker", "mosquitto"}
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
        for secret in ("agg-Secret-1", "gw1-Secret-2"):
            assert secret not in ps
            for name, pid in pids.items():
                assert secret.encode() not in _cmdline(pid), name
            for file in run_dir.rglob("*"):
                assert file.is_dir() or secret.encode() not in file.read_bytes(), file
        assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
        assert stat.S_IMODE((run_dir / "passwd").stat().st_mode) == 0o600
        assert [line.split(":")[0] for line in (run_dir / "passwd").read_text().splitlines()] == ["aggregator", "gw-1"]
        fleet = wheelfed(
            "fleet", "--port", str(port), "--wait", "0.2", cwd=tmp_path, env={"WHEELFED_MQTT_PASSWORD": "agg-Secret-1"}
        )
        assert fleet.code == 0, fleet.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(15)
    err = proc.stderr.read()
    assert f"plain TCP without TLS on 127.0.0.1:{port}" in err and "--tls-cert-dir" in err and "visible" not in err


def test_a_password_file_others_can_read_is_refused_with_the_fix(tmp_path: Path) -> None:
    passwords = tmp_path / "passwords"
    passwords.write_text("aggregator:secret\n")
    passwords.chmod(0o644)
    run = wheelfed("broker", "--password-file", str(passwords), cwd=tmp_path)
    assert_one_line_failure(run, 2, str(passwords), "mode 0644", f"chmod 600 {passwords}")


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("aggregator:secret\ngw-1\n", "line 2: not NAME:PASSWORD"),
        ("aggregator:secret\nbad name:pw\n", "line 2: invalid client id 'bad name'"),
        ("gw-1:a\ngw-1:b\n", "line 2: user gw-1 appears twice"),
        ("# nobody\n", "no users"),
    ],
)
def test_password_file_mistakes_are_one_line(tmp_path: Path, content: str, fragment: str) -> None:
    passwords = tmp_path / "passwords"
    passwords.write_text(content)
    passwords.chmod(0o600)
    assert_one_line_failure(wheelfed("broker", "--password-file", str(passwords), cwd=tmp_path), 2, fragment)


def test_a_user_in_both_the_file_and_the_command_line_is_refused(tmp_path: Path) -> None:
    passwords = tmp_path / "passwords"
    passwords.write_text("gw-1:a\n")
    passwords.chmod(0o600)
    run = wheelfed("broker", "--password-file", str(passwords), "--user", "gw-1:b", cwd=tmp_path)
    assert_one_line_failure(run, 2, "user gw-1 given more than once")


def test_user_with_password_warns_and_plain_tcp_is_loopback_only(tmp_path: Path) -> None:
    """``--user NAME:PASSWORD`` still works but says why not; plain TCP off loopback is refused."""
    run = wheelfed("broker", "--user", "gw-1:hunter2", "--bind", "0.0.0.0", cwd=tmp_path)
    assert_one_line_failure(run, 2, "plain TCP", "loopback", "--tls-cert-dir", "deploy/certs")
    assert "visible to every local user in ps" in run.stderr and "--password-file" in run.stderr


def test_tls_takes_no_passwords(tmp_path: Path) -> None:
    certs = certificate_dir(tmp_path / "certs")
    run = wheelfed("broker", "--tls-cert-dir", str(certs), "--user", "gw-1:pw", cwd=tmp_path)
    assert_one_line_failure(run, 2, "--user/--password-file", "--tls-cert-dir", "CN")


def test_a_revocation_list_needs_tls(tmp_path: Path) -> None:
    crl = tmp_path / "crl.pem"
    crl.write_text("")
    run = wheelfed("broker", "--user", "gw-1:pw", "--crl", str(crl), cwd=tmp_path)
    assert_one_line_failure(run, 2, "--crl", "--tls-cert-dir")


def test_tls_broker_serves_the_scripts_certificates_on_8883_by_default(tmp_path: Path) -> None:
    """8883 is held here (or by someone else): the refusal names the port the broker chose."""
    certs = certificate_dir(tmp_path / "certs")
    with socket.socket() as holder:
        with contextlib.suppress(OSError):
            holder.bind(("0.0.0.0", 8883))
            holder.listen()
        run = wheelfed("broker", "--tls-cert-dir", str(certs), "--run-dir", str(tmp_path / "b"), cwd=tmp_path)
    assert_one_line_failure(run, 1, "port 8883", "already in use")


def test_end_to_end_over_tls_with_the_scripts_certificates(tmp_path: Path) -> None:
    """``wheelfed broker --tls-cert-dir DIR`` and a client's ``--tls-ca/--tls-cert/--tls-key`` take the
    script's folder as it is; no plain-TCP warning."""
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed (the test command installs it)")
    certs = certificate_dir(tmp_path / "certs", "gw-1")
    port = find_free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edge_client.cli",
            "broker",
            "--tls-cert-dir",
            str(certs),
            "--port",
            str(port),
            "--run-dir",
            str(tmp_path / "broker"),
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and "broker listening" in proc.stdout.readline()
        tls = (
            "--tls-ca",
            str(certs / "ca.crt"),
            "--tls-cert",
            str(certs / "aggregator.crt"),
            "--tls-key",
            str(certs / "aggregator.key"),
        )
        fleet = wheelfed("fleet", "--host", "localhost", "--port", str(port), "--wait", "0.2", *tls, cwd=tmp_path)
        assert fleet.code == 0 and "no gateway has announced itself" in fleet.stdout, fleet.stderr
        wrong = (
            "--tls-ca",
            str(certs / "ca.crt"),
            "--tls-cert",
            str(certs / "gw-1.crt"),
            "--tls-key",
            str(certs / "gw-1.key"),
        )  # a gateway's certificate does not make an aggregator
        as_gw1 = wheelfed("fleet", "--host", "localhost", "--port", str(port), "--wait", "0.2", *wrong, cwd=tmp_path)
        assert as_gw1.code == 0 and "no gateway" in as_gw1.stdout  # it is gw-1 there: the ACL shows it nothing
        # TLS 1.3 only: with 1.2 a client certificate (whose CN is the gateway's id) crosses in clear
        old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        old.load_verify_locations(certs / "ca.crt")
        old.load_cert_chain(certs / "gw-1.crt", certs / "gw-1.key")
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        with socket.create_connection(("localhost", port), timeout=5) as raw, pytest.raises(ssl.SSLError):
            old.wrap_socket(raw, server_hostname="localhost").do_handshake()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(15)
    assert "plain TCP" not in proc.stderr.read()


@pytest.mark.parametrize(
    ("options", "environment", "port"),
    [
        ((), {}, 1883),
        (("--tls-ca", "ca.crt"), {}, 8883),
        (("--tls-ca", "ca.crt", "--port", "9999"), {}, 9999),
        (("--tls-ca", "ca.crt"), {"WHEELFED_MQTT_PORT": "7777"}, 7777),
    ],
)
def test_client_commands_talk_to_the_port_their_transport_implies(
    tmp_path: Path, monkeypatch, options, environment, port
) -> None:
    from edge_client.cli import build_parser
    from edge_client.cli.connection import settle_broker_port

    (tmp_path / "ca.crt").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WHEELFED_MQTT_PORT", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    args = build_parser().parse_args(["fleet", *options])
    settle_broker_port(args)
    assert args.port == port
