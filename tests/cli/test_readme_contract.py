"""The README's commands and every ``--help`` example run as written, against real processes.

The walkthrough ("A fleet by hand") runs in order in one folder: import, keygen, a mosquitto
broker, three replayed sessions each read by a real gateway process, then the aggregator's
commands. Afterwards every other ``wheelfed`` line of README.md and every example of every
``--help`` runs in the same folder and fleet. The only changes to a line are a free port for
1883/8883, a live pty for the device paths and ``deploy/certs``'s certificates for the certificate
folder.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from aggregator.broker import mosquitto_available
from aggregator.broker.mosquitto import find_free_port
from tests.cli.cli_support import REPO, CliRun
from tests.cli.shell import Background, Shell

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]

WALKTHROUGH = "## A fleet by hand"
GATEWAYS = ("gw-1", "gw-2", "gw-3")
DEVICE_PLACEHOLDERS = ("/dev/pts/3", "/dev/pts/N", "/dev/ttyUSB0")
#: The helper processes past one machine need their own broker accounts and fleets; their tests
#: start them as wheelfed commands.
SCALING_COMMANDS = {
    "merge-worker": "merge workers run in tests/aggregator/test_merge_workers.py (MergeWorkerProcesses)",
    "site-aggregator": "site aggregators run in tests/e2e/test_site_aggregator.py",
    "load-test": "load-test hosts run in tests/e2e/test_scale_load.py and tests/e2e/test_soak.py",
}


def sh_blocks(markdown: str) -> list[tuple[str, list[str]]]:
    """(heading, command lines) of every ```sh block, in order."""
    blocks, heading = [], ""
    for match in re.finditer(r"^(#+ [^\n]*)$|^```sh\n(.*?)^```", markdown, flags=re.M | re.S):
        if match.group(1):
            heading = match.group(1)
        else:
            blocks.append((heading, [line for line in match.group(2).splitlines() if line.strip()]))
    return blocks


def readme_lines() -> tuple[list[str], list[str]]:
    """The walkthrough's lines and every other ``wheelfed`` line of README.md."""
    walkthrough, others = [], []
    for heading, lines in sh_blocks((REPO / "README.md").read_text()):
        wheelfed = [line for line in lines if not line.startswith("./deploy/run")]
        (walkthrough if heading == WALKTHROUGH else others).extend(wheelfed)
    return walkthrough, others


def help_examples() -> list[str]:
    from edge_client.cli import build_parser

    subparsers = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    lines = []
    for sub in subparsers.values():
        epilog = sub.epilog or ""
        lines += [
            line.strip()
            for line in epilog.split("examples:", 1)[-1].splitlines()
            if "wheelfed" in line and "examples:" in epilog
        ]
    return lines


def _ok(run: CliRun | Background | None, line: str) -> CliRun | Background | None:
    if isinstance(run, CliRun):
        assert run.code == 0 and "Traceback" not in run.stderr, f"{line!r} -> exit {run.code}: {run.stderr}"
    return run


def _labelled(job: Background) -> int:
    counts = [int(m) for text in job.out for m in re.findall(r"\blabelled=(\d+)", text)]
    return counts[-1] if counts else 0


def _command(line: str) -> str:
    """The wheelfed subcommand of a README line (after any VAR=value prefixes)."""
    words = line.split("#")[0].split()
    return words[words.index("wheelfed") + 1] if "wheelfed" in words[:-1] else ""


class Walk:
    """The walkthrough's folder, shell, fleet and the output of each README line."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = find_free_port()
        self.shell = Shell(folder, env={"WHEELFED_MQTT_PORT": str(self.port)})
        self.shell.substitutions = {"1883": str(self.port)}
        self.outputs: dict[str, CliRun] = {}
        self.gateways: dict[str, Background] = {}

    def run(self, line: str) -> CliRun | Background | None:
        result = _ok(self.shell.run(line), line)
        if isinstance(result, CliRun):
            self.outputs[line] = result
        return result

    def start_gateway(self, replay_line: str, gateway_line: str, gateway: str) -> None:
        number = gateway.split("-")[1]
        replay = self.shell.run(replay_line.replace("_s01.", f"_s0{number}."))
        assert isinstance(replay, Background)
        pty = replay.wait_for(r"pty: (\S+)").group(1)
        line = gateway_line.replace("gw-1", gateway).replace("PW1", f"PW{number}").replace("/dev/pts/3", pty)
        job = self.shell.run(line)
        assert isinstance(job, Background)
        job.wait_for(rf"gateway {gateway}:")
        self.gateways[gateway] = job

    def wait_for_labels(self, at_least: int = 40, timeout_s: float = 120.0) -> None:

        deadline = time.monotonic() + timeout_s
        while min(_labelled(job) for job in self.gateways.values()) < at_least:
            assert time.monotonic() < deadline, {g: _labelled(j) for g, j in self.gateways.items()}
            time.sleep(0.5)


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory):
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed (the test command installs it)")
    walk = Walk(tmp_path_factory.mktemp("readme"))
    readme = (REPO / "README.md").read_text()  # the alert rules the README shows, saved as it says
    (walk.folder / "rules.json").write_text(re.search(r"`rules.json`.*?```json\n(.*?)```", readme, re.S).group(1))
    lines, _ = readme_lines()
    replay_line = next(line for line in lines if _command(line) == "replay")
    try:
        for line in lines:
            if line is replay_line:
                continue
            if _command(line) == "gateway":
                for gateway in GATEWAYS:
                    walk.start_gateway(replay_line, line, gateway)
                walk.wait_for_labels()
                continue
            started = walk.run(line)
            if isinstance(started, Background):
                started.wait_for(r"\S")
        yield walk
    finally:
        stopped = walk.shell.stop_all()
        walk.stopped = stopped


def test_walkthrough_trains_registers_deploys_rolls_back_exports_and_predicts(walk: Walk) -> None:
    out = {line.split("#")[0].strip(): run for line, run in walk.outputs.items()}
    fleet = next(run for line, run in out.items() if line.endswith("wheelfed fleet"))
    for gateway in GATEWAYS:
        assert gateway in fleet.stdout
    assert (walk.folder / "model.cbor").is_file() and (walk.folder / "more.cbor").is_file()
    assert (walk.folder / "activity.cbor").is_file()
    final_list = [run for line, run in out.items() if line.startswith("wheelfed model list")][-1].stdout
    rows = {line.split()[0]: line for line in final_list.splitlines() if line.strip()}
    assert "gw-3" in rows["activity:v1"] and "gw-1" in rows["activity:v2"] and "gw-3" not in rows["activity:v2"], (
        final_list
    )
    predict = next(run for line, run in out.items() if line.startswith("wheelfed predict"))
    assert "accuracy on" in predict.stdout


def _prepare(walk: Walk, line: str) -> str:
    """Give a line what it refers to: a live pty for a device path, a CA for the TLS folder, a free 8883."""
    if _command(line) == "broker":  # a second broker beside the walkthrough's
        line = line.replace("1883", str(find_free_port()))
    for placeholder in DEVICE_PLACEHOLDERS:
        if placeholder in line:
            replay = walk.shell.run("wheelfed replay recordings/seglearn_watch_s05.wfrec --pty --speed 0")
            assert isinstance(replay, Background)
            line = line.replace(placeholder, replay.wait_for(r"pty: (\S+)").group(1))
    if "/etc/wheelfed/certs" in line:
        line = line.replace("/etc/wheelfed/certs", str(_test_ca(walk.folder / "certs")))
    return line.replace("8883", str(find_free_port()))


def _test_ca(folder: Path) -> Path:
    """The certificates a clinic makes with ``deploy/certs`` (it keeps what exists)."""
    subprocess.run([str(REPO / "deploy" / "certs"), "-o", str(folder), "gw-1"], check=True, capture_output=True)
    return folder


OTHER_LINES = readme_lines()[1] + help_examples()


def _output_target(line: str) -> str | None:
    words = line.split("#")[0].split()
    for flag in ("-o", "--output"):
        if flag in words[:-1]:
            return words[words.index(flag) + 1].rstrip("/")
    return None


def _gateway_files(name: str) -> bool:
    return name.endswith(("-windows.db", "-windows.db-wal", "-windows.db-shm", "-models"))


def _shell_for(walk: Walk, line: str, folder: Path) -> Shell:
    """The walkthrough's shell; or a fresh folder that links to the walkthrough's files, as a
    second machine or a new user's folder would be, when the line would write what the
    walkthrough already has (``keygen -o aggregator.key`` rightly refuses to overwrite a key) or
    starts a gateway (the walkthrough's gw-1 owns its store and model folder)."""
    target = _output_target(line)
    gateway = _command(line) == "gateway"
    if not gateway and (target is None or not (walk.folder / target).exists()):
        return walk.shell
    stem = Path(target).stem if target else None
    for item in walk.folder.iterdir():
        if item.stem != stem and not (gateway and _gateway_files(item.name)):
            (folder / item.name).symlink_to(item)
    shell = Shell(folder, env={k: v for k, v in walk.shell.env.items() if k.startswith("WHEELFED_")})
    shell.substitutions = dict(walk.shell.substitutions)
    return shell


@pytest.mark.parametrize("line", OTHER_LINES)
def test_every_other_readme_line_and_help_example_runs_as_written(walk: Walk, line: str, tmp_path: Path) -> None:
    if _command(line) == "demo":
        pytest.skip("the demo has its own end-to-end test (tests/e2e/test_fleet_demo.py)")
    if _command(line) in SCALING_COMMANDS:
        pytest.skip(SCALING_COMMANDS[_command(line)])
    shell = _shell_for(walk, line, tmp_path)
    result = _ok(shell.run(_prepare(walk, line)), line)
    if isinstance(result, Background):
        result.wait_for(r"\S", timeout_s=60)
        if _command(line) == "record":
            time.sleep(3)  # the replay behind the device runs at full speed: let the recording take it in
        code = shell.stop(result)
        assert code in (0, 130) and "Traceback" not in "".join(result.err), (line, code, "".join(result.err))
