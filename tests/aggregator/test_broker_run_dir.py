"""A broker started on a temporary run folder (``wheelfed broker`` without ``--run-dir``) removes
it -- config, password hashes, persistence -- when it stops cleanly; a folder the operator named,
a killed broker and a restart keep theirs."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from aggregator.broker import MosquittoBroker, mosquitto_available
from aggregator.broker.mosquitto import (
    BrokerUser,
    find_free_port,
    is_temporary_run_dir,
    temporary_run_dir,
)

REPO = Path(__file__).resolve().parents[2]
USERS = [BrokerUser("aggregator", "pw")]


def _temporary_folders() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("wheelfed-broker-*")}


@pytest.mark.mosquitto
def test_a_clean_stop_removes_a_temporary_run_folder_and_nothing_else(tmp_path) -> None:
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed (the test command installs it)")
    run_dir = temporary_run_dir()
    assert is_temporary_run_dir(run_dir) and oct(run_dir.stat().st_mode & 0o777) == "0o700"
    broker = MosquittoBroker(run_dir, users=USERS).start()
    broker.restart()  # a restart keeps it (the config and the sessions)
    assert (run_dir / "mosquitto.conf").is_file() and (run_dir / "passwd").is_file()
    broker.stop()
    assert not run_dir.exists()

    named = tmp_path / "state"
    with MosquittoBroker(named, users=USERS):
        pass
    assert (named / "mosquitto.conf").is_file()  # the operator's folder stays
    assert not is_temporary_run_dir(tmp_path)

    crashed = temporary_run_dir()
    broker = MosquittoBroker(crashed, users=USERS).start()
    broker.stop(kill=True)  # a crash leaves it, for its log
    assert (crashed / "mosquitto.log").is_file()
    shutil.rmtree(crashed)


@pytest.mark.mosquitto
def test_wheelfed_broker_without_run_dir_leaves_no_temporary_folder(tmp_path) -> None:
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed (the test command installs it)")
    before = _temporary_folders()
    proc = subprocess.Popen(
        [sys.executable, "-m", "edge_client.cli", "broker", "--port", str(find_free_port()), "--user", "aggregator:pw"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert "broker listening" in line, line + proc.stderr.read()
        made = _temporary_folders() - before
        assert len(made) == 1 and next(iter(made)) in line
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
    assert _temporary_folders() - before == set()
