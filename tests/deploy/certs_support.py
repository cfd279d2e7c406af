"""Running ``deploy/certs``, the certificate script, as an operator would."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.cli.cli_support import REPO, CliRun

CERTS_SCRIPT = REPO / "deploy" / "certs"


def make_certs(out: Path, *args: str) -> CliRun:
    """``deploy/certs -o OUT ARGS``; its exit code and output."""
    proc = subprocess.run([str(CERTS_SCRIPT), "-o", str(out), *args], capture_output=True, text=True, timeout=60)
    return CliRun(proc.returncode, proc.stdout, proc.stderr)


def certificate_dir(out: Path, *client_ids: str) -> Path:
    """A certificate folder made by the script (CA, broker, aggregator and ``client_ids``)."""
    run = make_certs(out, *client_ids)
    assert run.code == 0, run.stderr
    return out
