"""What ``MosquittoBroker`` puts on disk and on command lines: hashes only, nothing readable by others,
and plain TCP on loopback only."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest

import aggregator.broker.mosquitto as mosquitto_module
from aggregator.broker import BrokerUser, MosquittoBroker, mosquitto_available
from aggregator.broker.embedded import EmbeddedBroker
from shared.transport.mqtt import MqttConfig, MqttTransport

pytestmark = pytest.mark.mosquitto
USERS = [BrokerUser("aggregator", "agg:with-colon"), BrokerUser("gw-1", "gw1 secret")]


def test_passwords_reach_mosquitto_hashed_and_never_as_arguments(tmp_path: Path, monkeypatch) -> None:
    """``mosquitto_passwd -b FILE NAME PASSWORD`` showed each password in ``ps`` while the broker started."""
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed (the test command installs it)")
    argvs: list[list[str]] = []
    real_run, real_popen = subprocess.run, subprocess.Popen

    def run(argv, *a, **kw):
        argvs.append(list(argv))
        return real_run(argv, *a, **kw)

    def popen(argv, *a, **kw):
        argvs.append(list(argv))
        return real_popen(argv, *a, **kw)

    monkeypatch.setattr(mosquitto_module.subprocess, "run", run)
    monkeypatch.setattr(mosquitto_module.subprocess, "Popen", popen)
    with MosquittoBroker(tmp_path / "broker", users=USERS) as broker:
        for user in USERS:  # the hashes are of the whole password, colons and spaces included
            t = MqttTransport(
                user.name, MqttConfig(port=broker.port, username=user.name, password=user.password), presence=False
            )
            t.connect(timeout_s=5)
            t.close()
    run_dir = broker.run_dir
    assert argvs and not [argv for argv in argvs for u in USERS if any(u.password in word for word in argv)]
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((run_dir / "passwd").stat().st_mode) == 0o600
    assert [line.split("$")[:2] for line in (run_dir / "passwd").read_text().splitlines()] == [
        ["aggregator:", "7"],
        ["gw-1:", "7"],
    ]  # PBKDF2-SHA512 hashes
    assert not (run_dir / "passwd.new").exists()
    for file in run_dir.iterdir():
        assert not any(u.password.encode() in file.read_bytes() for u in USERS), file


def test_plain_tcp_is_refused_off_loopback(tmp_path: Path) -> None:
    for broker in (MosquittoBroker, EmbeddedBroker):
        with pytest.raises(ValueError, match="plain TCP .* loopback only, not on 0.0.0.0.*--tls-cert-dir"):
            broker(tmp_path, users=USERS, bind_address="0.0.0.0")
    assert MosquittoBroker(tmp_path, users=USERS, bind_address="::1").host == "::1"


def test_tls_takes_no_passwords(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="CN is the identity"):
        MosquittoBroker(tmp_path, users=USERS, tls_cert_dir=tmp_path)


def test_a_user_never_shows_its_password() -> None:
    assert "secret" not in repr(BrokerUser("gw-1", "gw1 secret")) + str(USERS)
