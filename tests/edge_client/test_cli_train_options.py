"""``wheelfed train``'s privacy options: a bad combination is one clear line, before any network."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    "args, message",
    [
        (["--client-fraction", "0.5"], "client_fraction < 1"),
        (["--algorithm", "fedforest", "--client-splits"], "add --paper-protocol"),
        (["--algorithm", "fedga-tree", "--dp-epsilon", "2"], "does not apply to fedga-tree"),
        (["--multi-strategy", "one_output_per_tree"], "vector-leaf"),
        (["--min-crowd", "-1"], "--min-crowd"),
    ],
)
def test_bad_privacy_options_end_in_one_line(tmp_path, args, message) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "edge_client.cli", "train", "-o", str(tmp_path / "m.cbor"), "--port", "1", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in proc.stderr
