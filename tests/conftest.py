"""Shared fixtures: a real mosquitto, started per test on a free port with the deploy/ configs."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Iterator

import pytest

try:  # the Pi-profile venv runs only the TFLite tests, without hypothesis
    from hypothesis import settings
except ImportError:  # pragma: no cover
    settings = None
if settings is not None:
    # CI runs the property tests on a fixed set of examples (derandomized), so a submission's
    # result does not depend on the draw; local runs keep exploring new examples.
    settings.register_profile("ci", derandomize=True)
    if os.environ.get("CI"):
        settings.load_profile("ci")

from aggregator.broker import BrokerUser, MosquittoBroker, mosquitto_available

PASSWORDS = {"aggregator": "agg-secret", "gw-1": "pw-1", "gw-2": "pw-2", "gw-3": "pw-3"}


@pytest.fixture
def mosquitto(tmp_path: Path) -> Iterator[MosquittoBroker]:
    """A password+ACL mosquitto with users aggregator, gw-1..gw-3 (see PASSWORDS)."""
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed: the test command installs it (`apt-get install -y mosquitto`)")
    broker = MosquittoBroker(tmp_path / "broker", users=[BrokerUser(n, p) for n, p in PASSWORDS.items()])
    with broker:
        yield broker


@pytest.fixture
def tls_certs(tmp_path: Path) -> Callable[[str], tuple[str, str]]:
    """A throwaway CA + broker certificate; returns a function issuing client certs by CN."""
    if shutil.which("openssl") is None:
        pytest.fail("openssl is not installed")
    d = tmp_path / "certs"
    d.mkdir()

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=wheelfed-test-ca",
        "-keyout", "ca.key", "-out", "ca.crt")

    def issue(cn: str, name: str, san: str | None = None) -> tuple[str, str]:
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={cn}", "-keyout", f"{name}.key", "-out", f"{name}.csr")
        ext = d / f"{name}.ext"
        ext.write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "2", "-out", f"{name}.crt", "-extfile", str(ext))
        return str(d / f"{name}.crt"), str(d / f"{name}.key")

    issue("localhost", "broker", san="IP:127.0.0.1,DNS:localhost")
    issue.dir = d  # type: ignore[attr-defined]
    return issue
