"""``wheelfed gateway`` started as an operator would: every expected failure at start is one
line with exit 2 (the command line) or 1 (the machine: a locked store, a busy port, ...), no
traceback and no file left behind; a serial device that vanishes at runtime is one warning line,
then the status line says why, and the gateway reads again when the device is back."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from firmware_bridge.descriptors import ChannelSpec, SensorDescriptor
from firmware_bridge.frames import DescriptorFrame, SampleFrame, encode_frame
from firmware_bridge.replay import open_pty
from tests.cli.cli_support import REPO, assert_one_line_failure, files_under, wheelfed
from tests.conftest import PASSWORDS

USAGE, RUNTIME = 2, 1
WATCH = SensorDescriptor(1, "watch", "imu", 50.0, (ChannelSpec("ax", "g", 0.001),))


def watch(first: int, end: int) -> list[SampleFrame]:
    """Frames ``first..end-1`` of a 50 Hz sensor, 25 samples (0.5 s) each."""
    return [SampleFrame(1, seq, seq * 500_000, np.full((25, 1), seq, np.int16)) for seq in range(first, end)]


class GatewayProcess:
    """A running ``wheelfed gateway``: its stdout (start and status lines) and stderr (log lines)
    collected as they come, so a test can wait for a line."""

    def __init__(self, cwd: Path, *args: str, env: dict[str, str] | None = None) -> None:
        full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edge_client.cli", "gateway", *args],
            cwd=cwd,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._collect, args=(s, lines), daemon=True)
            for s, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))
        ]
        for t in self._readers:
            t.start()

    @staticmethod
    def _collect(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line.rstrip("\n"))

    def wait_for(self, cond: Callable[[], bool], timeout: float = 20.0) -> bool:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                return cond()
            time.sleep(0.05)
        return True

    def stats(self) -> dict[str, str]:
        """The latest status line as a dict."""
        lines = [line for line in self.out if line.startswith("session=")]
        return dict(field.split("=", 1) for field in lines[-1].split()) if lines else {}

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(30)
        finally:
            self.proc.kill()
        for t in self._readers:
            t.join(5)
        return code


def gateway_on_a_new_pty(
    cwd: Path, *args: str, link: Path | None = None, tries: int = 3, env: dict[str, str] | None = None
) -> tuple[GatewayProcess, int, str]:
    """A gateway (``args`` must include ``--stats-every``) reading a new pty, through the stable
    name ``link`` if given; returns it with the pty's master fd and slave path once ``link=up``.

    Pty numbers are shared by every process on the machine, and one that is still reopening its
    own vanished ``/dev/pts/N`` may hold the new pty first -- the gateway then refuses it as busy,
    which is right, but not this test's subject: take another pty.
    """
    for _ in range(tries):
        master, slave = open_pty()
        if link is not None:
            link.unlink(missing_ok=True)
            os.symlink(slave, link)
        gateway = GatewayProcess(cwd, *args, "--serial", str(link or slave), env=env)
        if gateway.wait_for(lambda: gateway.stats().get("link") == "up"):
            return gateway, master, slave
        gateway.stop()
        os.close(master)
        assert any("in use by another process" in line for line in gateway.err), gateway.err
    raise AssertionError(f"{tries} new ptys in a row were held by other processes")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "table.csv").write_text("a,b\n1,2\n")
    with sqlite3.connect(tmp_path / "registry.db") as db:  # another application's database
        db.execute("CREATE TABLE models (id INTEGER PRIMARY KEY)")
    db.close()
    return tmp_path


STARTUP_MISTAKES = [
    (
        "--store table.csv",
        USAGE,
        (
            "--store",
            "table.csv is not a window store",
        ),
    ),
    (
        "--store nowhere/gw.db",
        USAGE,
        (
            "--store",
            "the folder nowhere does not exist",
        ),
    ),
    ("--store registry.db", RUNTIME, ("registry.db", "not a WheelFed window store")),
    ("--trust table.csv", RUNTIME, ("--trust", "table.csv")),
    ("--model-dir table.csv/models", RUNTIME, ("cannot create the model directory table.csv/models",)),
]


@pytest.mark.parametrize("line, code, fragments", STARTUP_MISTAKES, ids=[m[0] for m in STARTUP_MISTAKES])
def test_a_wrong_file_at_start_is_one_line_and_changes_nothing(
    folder: Path, line: str, code: int, fragments: tuple[str, ...]
) -> None:
    before = {name: (folder / name).read_bytes() for name in ("table.csv", "registry.db")}
    listing = files_under(folder)
    run = wheelfed("gateway", "--client-id", "gw-1", "--no-broker", "--store", "gw.db", *line.split(), cwd=folder)
    assert_one_line_failure(run, code, *fragments)
    assert files_under(folder) == listing, "a file was created"
    assert {name: (folder / name).read_bytes() for name in before} == before, "a file was changed"


ALERT_MISTAKES = [
    ("[{", ("rules.json is not valid JSON", "line 1")),
    ('{"name": "r"}', ("expected a JSON list of alert rules",)),
    ('[{"name": "r", "kind": "absent", "minutes": 5}]', ("rule 1", "missing labels")),
    ('[{"name": "r", "kind": "absent", "labels": ["a"], "minutes": 5, "colour": "red"}]', ("unknown field(s) colour",)),
    ('[{"name": "r", "kind": "absent", "labels": ["a"], "minutes": "5"}]', ("minutes must be a int", "'5'")),
    ('[{"name": "r", "kind": "often", "labels": ["a"], "minutes": 5}]', ("kind must be",)),
    ('[{"name": "r", "kind": "absent", "labels": ["a"], "minutes": 0}]', ("minutes > 0",)),
]


@pytest.mark.parametrize("text, fragments", ALERT_MISTAKES, ids=[m[0] for m in ALERT_MISTAKES])
def test_alert_rules_that_are_not_rules_are_one_line(folder: Path, text: str, fragments: tuple[str, ...]) -> None:
    (folder / "rules.json").write_text(text)
    listing = files_under(folder)
    run = wheelfed(
        "gateway", "--client-id", "gw-1", "--no-broker", "--store", "gw.db", "--alerts", "rules.json", cwd=folder
    )
    assert_one_line_failure(run, USAGE, "--alerts", *fragments)
    assert files_under(folder) == listing


@pytest.mark.slow
def test_a_store_written_by_another_gateway_and_a_busy_port_refuse_to_start(folder: Path) -> None:
    first, master, slave = gateway_on_a_new_pty(
        folder, "--client-id", "gw-1", "--no-broker", "--store", "gw.db", "--stats-every", "0.2"
    )
    try:
        second = wheelfed("gateway", "--client-id", "gw-2", "--no-broker", "--store", "gw.db", cwd=folder)
        assert_one_line_failure(second, RUNTIME, "gw.db is in use by another gateway process")
        third = wheelfed(
            "gateway", "--client-id", "gw-3", "--no-broker", "--store", "gw-3.db", "--serial", slave, cwd=folder
        )
        assert_one_line_failure(third, RUNTIME, f"serial port {slave} is in use by another process")
        assert first.proc.poll() is None  # the running gateway is not disturbed
    finally:
        assert first.stop() == 0, first.err
        os.close(master)


@pytest.mark.slow
def test_a_device_that_vanishes_is_one_warning_then_the_status_says_gone_and_it_is_read_again(folder: Path) -> None:
    link = folder / "ttyChair"  # a stable name, as udev's /dev/serial/by-id/... (pty numbers are shared)
    gateway, master, _ = gateway_on_a_new_pty(
        folder, "--client-id", "gw-1", "--no-broker", "--store", "gw.db", "--stats-every", "0.2", link=link
    )
    second = None
    try:
        os.write(master, encode_frame(DescriptorFrame(WATCH)) + b"".join(map(encode_frame, watch(0, 4))))
        assert gateway.wait_for(lambda: gateway.stats().get("frames") == "5"), gateway.out[-1:]
        os.unlink(link)
        os.close(master)  # unplugged
        assert gateway.wait_for(lambda: gateway.stats().get("link") == "gone"), (gateway.out[-3:], gateway.err)
        time.sleep(1.0)  # several reopen attempts: still one line
        warnings = [line for line in gateway.err if "WARNING" in line]
        assert len(warnings) == 1 and "serial device gone" in warnings[0], gateway.err

        second, slave2 = open_pty()  # plugged in again: another device node under the same name
        os.symlink(slave2, link)
        assert gateway.wait_for(lambda: gateway.stats().get("link") == "changed"), (gateway.out[-3:], gateway.err)
        os.write(second, b"".join(map(encode_frame, watch(4, 8))))  # samples before it announced itself
        assert gateway.wait_for(lambda: gateway.stats().get("unattributed") == "4"), gateway.out[-1:]
        os.write(second, encode_frame(DescriptorFrame(WATCH)) + b"".join(map(encode_frame, watch(8, 12))))
        assert gateway.wait_for(lambda: gateway.stats().get("link") == "up"), gateway.out[-1:]
        stats = gateway.stats()
        assert (stats["reopens"], stats["device_changes"], stats["streams"]) == ("1", "1", "1")
    finally:
        assert gateway.stop() == 0, gateway.err
        if second is not None:
            os.close(second)
    assert "Traceback" not in "\n".join(gateway.err)


@pytest.mark.mosquitto
@pytest.mark.parametrize("serial", [False, True], ids=["no-serial", "serial-gone-too"])
@pytest.mark.parametrize("broker_at_start", [True, False], ids=["broker-went-away", "broker-never-there"])
def test_sigterm_without_a_broker_stops_the_gateway_promptly(
    tmp_path: Path, mosquitto, broker_at_start, serial
) -> None:
    """The broker vanished (a demo's broker killed first, a cloud outage) or never answered:
    SIGTERM must still stop the gateway at once -- its offline message cannot be delivered, and
    it must not wait for it. With ``serial``, its sensor's pty is closed as well (the demo's
    replay killed with the broker): the read thread, reopening a device that is gone, must not
    hold the exit up either."""
    if not broker_at_start:
        mosquitto.stop(kill=True)
    args = (
        "--client-id",
        "gw-1",
        "--port",
        str(mosquitto.port),
        "--store",
        str(tmp_path / "gw-1.db"),
        "--stats-every",
        "0.2",
    )
    env = {"WHEELFED_MQTT_PASSWORD": PASSWORDS["gw-1"]}
    master = None
    if serial:
        gateway, master, _ = gateway_on_a_new_pty(tmp_path, *args, env=env)
    else:
        gateway = GatewayProcess(tmp_path, *args, env=env)
    try:
        if broker_at_start:
            assert gateway.wait_for(lambda: gateway.stats().get("broker") == "connected"), gateway.err
            mosquitto.stop(kill=True)
        assert gateway.wait_for(lambda: gateway.stats().get("broker") == "offline"), gateway.err
        if serial:
            os.close(master)  # the pty is gone
            master = None
            assert gateway.wait_for(lambda: gateway.stats().get("link") not in (None, "up")), gateway.out[-1:]
        started = time.monotonic()
        gateway.proc.send_signal(signal.SIGTERM)
        code = gateway.proc.wait(30)
        took = time.monotonic() - started
    finally:
        gateway.stop()
        if master is not None:
            os.close(master)
    assert code == 0 and took < 3.0, (code, took, gateway.err[-5:])
