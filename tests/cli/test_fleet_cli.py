"""``wheelfed fleet`` against a real mosquitto: two gateway processes online, one stopped, none at all,
and its failures as one line."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from aggregator.fleet import GatewayProcesses
from edge_client.store import WindowStore
from tests.cli.cli_support import CliRun, assert_one_line_failure, wheelfed
from tests.conftest import PASSWORDS
from tests.e2e.fleet_support import fill_store

USAGE, RUNTIME = 2, 1
AGGREGATOR = {"WHEELFED_MQTT_PASSWORD": PASSWORDS["aggregator"]}


def fleet(tmp_path: Path, port: int, *args: str, env: dict[str, str] = AGGREGATOR) -> CliRun:
    return wheelfed("fleet", "--port", str(port), "--wait", "1", *args, cwd=tmp_path, env=env)


def rows(tmp_path: Path, port: int) -> dict[str, dict]:
    run = fleet(tmp_path, port, "--json")
    assert run.code == 0, run
    return {row["gateway"]: row for row in json.loads(run.stdout)}


def wait_until(tmp_path: Path, port: int, check, timeout_s: float = 30.0) -> dict[str, dict]:
    deadline = time.monotonic() + timeout_s
    while True:
        seen = rows(tmp_path, port)
        if check(seen) or time.monotonic() > deadline:
            return seen


@pytest.mark.slow
@pytest.mark.mosquitto
def test_gateways_online_then_one_stopped(tmp_path: Path, mosquitto) -> None:
    for number, gateway in enumerate(("gw-1", "gw-2")):
        fill_store(tmp_path / f"{gateway}.db", number, n=40)
    processes = GatewayProcesses(mosquitto.port, 5, PASSWORDS, tmp_path)
    try:
        processes.start("gw-1", "--store", str(tmp_path / "gw-1.db"), "--publish-every", "1")
        processes.start("gw-2", "--store", str(tmp_path / "gw-2.db"), "--publish-every", "1", "--serial", "loop://")
        # gw-2's first status may come before its link has opened: wait for the one after
        seen = wait_until(
            tmp_path,
            mosquitto.port,
            lambda s: all(s.get(g, {}).get("online") for g in ("gw-1", "gw-2")) and s["gw-2"].get("link") == "up",
        )
        assert sorted(seen) == ["gw-1", "gw-2"] and all(row["online"] for row in seen.values()), seen
        assert seen["gw-1"]["windows"] == 41 and seen["gw-1"]["labelled"] == 40
        assert seen["gw-1"]["model"] == "" and seen["gw-1"]["predicted"] == 0 and seen["gw-1"]["age_s"] < 30
        assert seen["gw-1"]["link"] is None and seen["gw-2"]["link"] == "up"  # only gw-2 has a sensor link

        table = fleet(tmp_path, mosquitto.port)
        assert table.code == 0 and table.stderr == "", table
        lines = table.stdout.splitlines()
        assert lines[0] == f"2 gateways on 127.0.0.1:{mosquitto.port}, 2 online"
        header = lines[1].split()
        assert header[:6] == ["GATEWAY", "STATE", "SEEN", "MODEL", "LABELLED/WINDOWS", "LINK"]
        assert lines[2].split()[:2] == ["gw-1", "online"] and "40/41" in lines[2] and "no model" in lines[2]
        with WindowStore(tmp_path / "gw-1.db") as store:
            per_label = " ".join(f"{label}={n}" for label, n in store.stats().by_label.items())
        assert f"gw-1: labelled windows {per_label}; feature set e2e-fs-1" in lines, lines

        gw2 = processes.processes.pop("gw-2")
        gw2.send_signal(signal.SIGTERM)  # a clean stop: the gateway says offline before it goes
        gw2.wait(30)
        seen = wait_until(tmp_path, mosquitto.port, lambda s: not s["gw-2"]["online"])
        assert seen["gw-1"]["online"] and not seen["gw-2"]["online"]
        assert seen["gw-2"]["model"] is None and seen["gw-2"]["windows"] is None  # unknown, not zero
        table = fleet(tmp_path, mosquitto.port).stdout.splitlines()
        assert table[0].endswith(f"2 gateways on 127.0.0.1:{mosquitto.port}, 1 online")
        assert table[3].split()[:2] == ["gw-2", "offline"]
    finally:
        processes.stop_all()


@pytest.mark.mosquitto
def test_a_broker_without_gateways_is_one_line(tmp_path: Path, mosquitto) -> None:
    run = fleet(tmp_path, mosquitto.port)
    assert run.code == 0 and run.stderr == "", run
    assert run.stdout.splitlines() == [
        f"no gateway has announced itself on 127.0.0.1:{mosquitto.port} "
        "(none within 1 s; start one with wheelfed gateway)"
    ]
    run = fleet(tmp_path, mosquitto.port, "--json")
    assert run.code == 0 and json.loads(run.stdout) == []


@pytest.mark.mosquitto
def test_a_refused_login_is_one_line(tmp_path: Path, mosquitto) -> None:
    assert_one_line_failure(
        fleet(tmp_path, mosquitto.port, env={"WHEELFED_MQTT_PASSWORD": "wrong"}),
        RUNTIME,
        "wheelfed fleet:",
        "aggregator",
    )
    assert_one_line_failure(fleet(tmp_path, mosquitto.port, env={}), RUNTIME, "WHEELFED_MQTT_PASSWORD is not set")


@pytest.mark.parametrize(
    "args, code, fragments",
    [
        (("--port", "{closed}"), RUNTIME, ("connection refused",)),
        (("--wait", "0"), USAGE, ("--wait",)),
        (("--wait", "soon"), USAGE, ("--wait", "soon")),
        (("--port", "70000"), USAGE, ("--port",)),
        (("extra",), USAGE, ("unrecognized arguments: extra",)),
    ],
)
def test_mistakes_are_one_line(tmp_path: Path, args: tuple[str, ...], code: int, fragments: tuple[str, ...]) -> None:
    from aggregator.broker.mosquitto import find_free_port

    line = [a.format(closed=find_free_port()) for a in args]
    assert_one_line_failure(wheelfed("fleet", *line, cwd=tmp_path, env=AGGREGATOR), code, *fragments)


def test_help_has_examples_that_name_the_options() -> None:
    text = wheelfed("fleet", "--help", cwd=Path.cwd()).stdout
    assert "examples:" in text and "wheelfed fleet --json" in text and "default: 2.0" in text
