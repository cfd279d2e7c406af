"""``deploy/certs``: what it writes, with which permissions, idempotently, and its one-line errors."""

from __future__ import annotations

import re
import shutil
import ssl
import stat
import subprocess
from pathlib import Path

import pytest

from shared.protocol.envelope import CLIENT_ID_PATTERN
from tests.deploy.certs_support import CERTS_SCRIPT, make_certs

if shutil.which("openssl") is None:
    pytest.fail("openssl is not installed", allow_module_level=True)

PAIRS = ("ca", "broker", "aggregator", "gw-1", "gw-2")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def subject_and_sans(cert: Path) -> str:
    return subprocess.run(
        ["openssl", "x509", "-in", str(cert), "-noout", "-subject", "-ext", "subjectAltName"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def assert_one_line_error(run, code: int, *fragments: str) -> None:
    lines = run.stderr.strip().splitlines()
    assert run.code == code and len(lines) == 1 and lines[0].startswith("deploy/certs: "), run
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def test_makes_a_ca_the_broker_the_aggregator_and_each_gateway(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    run = make_certs(out, "--host", "broker.example.org", "--host", "10.0.0.5", "gw-1", "gw-2")
    assert run.code == 0 and run.stderr == ""
    assert run.stdout.splitlines() == [f"wrote {out}/{name}.{ext}" for name in PAIRS for ext in ("key", "crt")]
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{n}.{e}" for n in PAIRS for e in ("key", "crt"))
    assert mode(out) == 0o700
    for name in PAIRS:
        assert mode(out / f"{name}.key") == 0o600 and mode(out / f"{name}.crt") == 0o644
    for client in ("aggregator", "gw-1", "gw-2"):  # CN = client id: the broker's username and client id
        assert f"subject=CN = {client}\n" in subject_and_sans(out / f"{client}.crt")
    broker = subject_and_sans(out / "broker.crt")
    assert "DNS:localhost, IP Address:127.0.0.1, DNS:broker.example.org, IP Address:10.0.0.5" in broker
    # usable as written by Python's TLS (what paho uses) on both sides
    ssl.create_default_context(cafile=str(out / "ca.crt")).load_cert_chain(out / "gw-1.crt", out / "gw-1.key")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(out / "broker.crt", out / "broker.key")


def test_running_again_keeps_everything_and_issues_only_new_gateways(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    assert make_certs(out, "gw-1").code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    again = make_certs(out, "gw-1", "gw-3", "gw-3")
    assert again.code == 0
    assert [line for line in again.stdout.splitlines() if line.startswith("wrote")] == [
        f"wrote {out}/gw-3.key",
        f"wrote {out}/gw-3.crt",
    ]
    assert f"kept {out}/ca.key" in again.stdout.splitlines()
    assert {name: (out / name).read_bytes() for name in before} == before
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(out / "ca.crt"), str(out / "gw-3.crt")], capture_output=True, text=True
    )
    assert verify.returncode == 0, verify.stderr


def test_an_existing_folder_keeps_its_mode_and_no_scratch_files_remain(tmp_path: Path) -> None:
    out = tmp_path / "shared"
    out.mkdir(mode=0o750)
    out.chmod(0o750)  # e.g. readable by a system mosquitto's group: not ours to change
    assert make_certs(out, "gw-1").code == 0
    assert mode(out) == 0o750 and not [p for p in out.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize(
    "args, code, fragments",
    [
        (["gw 1"], 2, ["invalid client id 'gw 1'", "usage:"]),
        (["-gw"], 2, ["unknown option -gw"]),
        (["broker"], 2, ["'broker' cannot be a client id"]),
        (["--days", "0", "gw-1"], 2, ["--days needs a positive number"]),
        (["--host", "a b"], 2, ["invalid --host 'a b'"]),
    ],
)
def test_usage_mistakes_are_one_line(tmp_path: Path, args, code, fragments) -> None:
    run = make_certs(tmp_path / "certs", *args)
    assert_one_line_error(run, code, *fragments)
    assert not (tmp_path / "certs").exists()  # refused before anything is written


def test_broken_folders_are_named_with_what_to_do(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    assert make_certs(out, "gw-1").code == 0
    (out / "gw-1.key").unlink()
    assert_one_line_error(
        make_certs(out, "gw-1"), 1, f"{out}/gw-1.crt exists without {out}/gw-1.key", "delete it to reissue"
    )
    (out / "gw-1.crt").unlink()

    (out / "ca.key").rename(tmp_path / "ca.key.offline")  # a CA key kept offline
    kept = make_certs(out, "gw-1")  # ... still re-makes nothing it has
    assert_one_line_error(kept, 1, f"cannot issue {out}/gw-1.crt: {out}/ca.key is missing")
    assert make_certs(out).code == 0  # nothing to sign: fine without the CA key

    (out / "ca.crt").unlink()  # a new CA: the old certificates are no longer valid under it
    assert_one_line_error(
        make_certs(out),
        1,
        f"{out}/broker.crt is not valid under {out}/ca.crt",
        "delete broker.crt and broker.key to reissue",
    )


def test_a_folder_that_cannot_be_made_is_named(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    assert_one_line_error(make_certs(tmp_path / "file" / "certs"), 1, f"cannot create {tmp_path}/file/certs")


def test_client_id_rule_matches_the_protocol() -> None:
    """The script refuses exactly what validate_client_id refuses (ids are topic levels)."""
    assert (
        re.search(r"^CLIENT_ID_PATTERN='(.*)'$", CERTS_SCRIPT.read_text(), re.M).group(1) == CLIENT_ID_PATTERN.pattern
    )
