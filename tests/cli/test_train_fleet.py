"""``wheelfed train`` as an operator runs it from a fresh clone: real mosquitto, real ``wheelfed
gateway`` processes whose stores hold labelled windows under ``wheelfed-tifex-2+<digest>``.

The fleet (shared by the module's tests; training reads the stores, never writes them): gw-1..gw-3
store the same sensor layout, gw-4 another one. No gateway holds windows out (the gateway's
default ``--holdout-fraction 0``), as on a fresh fleet.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from aggregator.broker import BrokerUser, MosquittoBroker, mosquitto_available
from aggregator.fleet import GatewayProcesses, Presence
from aggregator.registry import Registry
from edge_client.features import FEATURE_SET_VERSION
from edge_client.store import WindowRecord, WindowStore
from shared.model import TreeEnsemble
from shared.protocol.topics import AGGREGATOR_ID, TopicLayout
from shared.transport.mqtt import MqttConfig, MqttTransport
from tests.cli.cli_support import REPO, assert_one_line_failure, wheelfed

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]

GATEWAYS = ["gw-1", "gw-2", "gw-3", "gw-4"]
PASSWORDS = {"aggregator": "agg-train-pw", **{g: f"pw-{g}" for g in GATEWAYS}}
WHEEL = f"{FEATURE_SET_VERSION}+{hashlib.sha256(b'wheel imu').hexdigest()[:10]}"
CHEST = f"{FEATURE_SET_VERSION}+{hashlib.sha256(b'chest ecg').hexdigest()[:10]}"
VERSIONS = {"gw-1": WHEEL, "gw-2": WHEEL, "gw-3": WHEEL, "gw-4": CHEST}
LABELS = np.array(["lie", "push", "sit"])


def fill_store(path: Path, version: str, seed: int, n: int = 150, d: int = 6) -> None:
    """Labelled windows of one feature set, as the gateway's pipeline stores them."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = LABELS[np.digitize(X[:, 0] + X[:, 1] + rng.normal(scale=0.3, size=n), [-0.5, 0.6])]
    starts = np.arange(n) * 4_000_000  # back to back: every window lies inside its own annotation only
    with WindowStore(path) as store:
        store.add_many(WindowRecord("s1", int(s), int(s) + 4_000_000, X[i], version) for i, s in enumerate(starts))
        for start, label in zip(starts.tolist(), y.tolist()):  # one annotation per window: each is labelled
            store.label_range("s1", start, start + 4_000_000, label)


@dataclass(frozen=True)
class Fleet:
    port: int
    folder: Path
    processes: GatewayProcesses

    def train(self, *args: str, timeout: float = 60.0):
        return wheelfed(
            "train",
            "--port",
            str(self.port),
            "--no-dp",
            *args,
            cwd=self.folder,
            env={"WHEELFED_MQTT_PASSWORD": PASSWORDS["aggregator"]},
            timeout=timeout,
        )

    def start_training(self, *args: str) -> subprocess.Popen:
        """``wheelfed train`` in the background, stdout line-buffered, for signal tests."""
        env = {**os.environ, "PYTHONPATH": str(REPO), "WHEELFED_MQTT_PASSWORD": PASSWORDS["aggregator"]}
        return subprocess.Popen(
            [sys.executable, "-m", "edge_client.cli", "train", "--port", str(self.port), "--no-dp", *args],
            cwd=self.folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


@contextmanager
def running_fleet(root: Path, gateway_args: dict[str, tuple[str, ...]] | None = None) -> Iterator[Fleet]:
    """Mosquitto and one ``wheelfed gateway`` per store under ``root`` (``gateway_args``: extra
    arguments per gateway), all online; commands run in ``root/work``."""
    if not mosquitto_available():
        pytest.fail("mosquitto is not installed: the test command installs it")
    for k, gateway in enumerate(GATEWAYS):
        fill_store(root / f"{gateway}.db", VERSIONS[gateway], seed=k)
    with MosquittoBroker(root / "broker", users=[BrokerUser(n, p) for n, p in PASSWORDS.items()]) as broker:
        processes = GatewayProcesses(broker.port, 5, PASSWORDS, root)
        try:
            # the aggregator's identity, so it must be gone before a test's wheelfed train connects
            # as the aggregator (the broker would disconnect one of two sessions with one client id)
            watcher = MqttTransport(
                AGGREGATOR_ID,
                MqttConfig(port=broker.port, username="aggregator", password=PASSWORDS["aggregator"]),
                presence=False,
            )
            watcher.connect()
            try:
                presence = Presence(watcher, TopicLayout())
                for gateway in GATEWAYS:
                    processes.start(gateway, *(gateway_args or {}).get(gateway, ()))
                presence.wait(GATEWAYS, online=True, timeout_s=60)
            finally:
                watcher.close()
            work = root / "work"
            work.mkdir()
            yield Fleet(broker.port, work, processes)
        finally:
            processes.stop_all()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Iterator[Fleet]:
    with running_fleet(tmp_path_factory.mktemp("train-fleet")) as running:
        yield running


def readme_train_command() -> list[str]:
    """The README's first ``wheelfed train`` line, as written (the password variable aside)."""
    line = next(
        line
        for line in (REPO / "README.md").read_text().splitlines()
        if line.startswith("WHEELFED_MQTT_PASSWORD=SECRET wheelfed train -o model.cbor")
    )
    words = shlex.split(line.split("#")[0])
    assert words[:3] == ["WHEELFED_MQTT_PASSWORD=SECRET", "wheelfed", "train"], words
    return words[3:]


def test_the_readme_command_trains_on_the_majority_feature_set_and_names_the_gateway_left_out(fleet) -> None:
    args = readme_train_command()
    assert args == ["-o", "model.cbor", "--rounds", "10"]
    run = fleet.train(*args)
    assert run.code == 0, run.stderr
    assert f"feature set {WHEEL} (the majority's): 3 gateways (gw-1, gw-2, gw-3)" in run.stdout
    assert f"  gw-4 left out: feature_set_mismatch: it stores {CHEST}, not {WHEEL}" in run.stdout
    rounds = [line for line in run.stdout.splitlines() if line.startswith("fedscs_xgb ")]
    assert len(rounds) == 10 and all(re.search(r"3/3 clients .* \| elapsed \d+:\d\d, ETA \d+:\d\d$", r) for r in rounds)
    model = TreeEnsemble.from_cbor((fleet.folder / "model.cbor").read_bytes())
    assert model.n_trees == 30 and model.feature_set_version == WHEEL and model.classes == tuple(LABELS)


def test_a_feature_set_no_gateway_stores_is_one_line_listing_the_fleets(fleet) -> None:
    run = fleet.train("-o", "wrong.cbor", "--feature-set", FEATURE_SET_VERSION)
    assert_one_line_failure(
        run,
        1,
        f"no gateway stores feature set '{FEATURE_SET_VERSION}'",
        f"gw-1, gw-2, gw-3 store {WHEEL}",
        f"gw-4 stores {CHEST}",
        "omit --feature-set",
    )
    assert not (fleet.folder / "wrong.cbor").exists()


def test_naming_the_minority_feature_set_trains_there_and_says_why_the_others_are_out(fleet) -> None:
    run = fleet.train("-o", "chest.cbor", "--feature-set", CHEST, "--rounds", "1", "--no-secure-aggregation")
    assert run.code == 0, run.stderr
    assert f"feature set {CHEST}: 1 gateway (gw-4)" in run.stdout
    assert f"  gw-1 left out: feature_set_mismatch: it stores {WHEEL}, not {CHEST}" in run.stdout


def test_a_gateway_that_is_not_online_is_named_at_once(fleet) -> None:
    started = time.monotonic()
    run = fleet.train("-o", "m.cbor", "--clients", "gw-1,gw-9")
    assert_one_line_failure(run, 1, "gw-9 is not online (online: gw-1, gw-2, gw-3, gw-4)")
    assert time.monotonic() - started < 15


def test_evaluate_without_held_out_windows_keeps_and_registers_the_model(fleet) -> None:
    run = fleet.train("-o", "m.cbor", "--registry", "reg.db", "--model-id", "act", "--rounds", "2", "--evaluate")
    assert run.code == 0, run.stderr
    assert "registered act:v1 in reg.db" in run.stdout
    assert (
        "warning: not evaluated: no held-out windows on any gateway (start gateways with --holdout-fraction "
        "0.2); the model is saved in m.cbor and act:v1 in reg.db"
    ) in run.stderr
    assert TreeEnsemble.from_cbor((fleet.folder / "m.cbor").read_bytes()).n_trees == 6
    with Registry(fleet.folder / "reg.db") as registry:
        record, model = registry.model("act")
    assert model.n_trees == 6 and not record.metrics


def wait_for_line(proc: subprocess.Popen, prefix: str, timeout: float = 60.0) -> list[str]:
    """stdout lines up to and including the first that starts with ``prefix``."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line.rstrip("\n"))
        if line.startswith(prefix):
            return seen
    proc.kill()
    raise AssertionError(f"no line starting with {prefix!r} in {seen}")


def test_ctrl_c_saves_the_completed_boosting_rounds(fleet) -> None:
    proc = fleet.start_training("-o", "cut.cbor", "--rounds", "40", "--max-depth", "3", "--bins", "32")
    wait_for_line(proc, "fedscs_xgb 2/40")
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert "Traceback" not in stderr and proc.returncode == 130, stderr
    assert "SIGINT: stopping after the current round and saving the model" in stderr
    last = stderr.strip().splitlines()[-1]
    done = int(
        re.fullmatch(
            r"wheelfed train: interrupted after (\d+) of 40 boosting rounds: saved a \1-round "
            r"model to cut\.cbor",
            last,
        ).group(1)
    )
    assert 2 <= done < 40
    assert TreeEnsemble.from_cbor((fleet.folder / "cut.cbor").read_bytes()).n_trees == 3 * done


def test_sigterm_cuts_a_forest_at_its_last_complete_level(fleet) -> None:
    proc = fleet.start_training(
        "--algorithm", "fedforest", "-o", "forest.json", "--trees", "30", "--max-depth", "12", "--min-samples-leaf", "1"
    )
    wait_for_line(proc, "fedforest 2/13")
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert "Traceback" not in stderr and proc.returncode == 143, stderr
    last = stderr.strip().splitlines()[-1]
    depth = int(
        re.fullmatch(
            r"wheelfed train: interrupted after (\d+) of 13 levels: saved a forest of 30 trees cut "
            r"at depth \1 to forest\.json",
            last,
        ).group(1)
    )
    model = TreeEnsemble.from_json((fleet.folder / "forest.json").read_bytes())
    assert model.n_trees == 30 and model.metadata["max_depth"] == depth < 12


def test_a_terminal_sees_one_updating_progress_line(fleet) -> None:
    """stdout on a pseudo-terminal: the rounds rewrite one line (\\r) with a bar and an ETA."""
    master, slave = os.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO), "WHEELFED_MQTT_PASSWORD": PASSWORDS["aggregator"]}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edge_client.cli",
            "train",
            "--port",
            str(fleet.port),
            "-o",
            "tty.cbor",
            "--rounds",
            "3",
            "--bins",
            "32",
        ],
        cwd=fleet.folder,
        env=env,
        stdout=slave,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the terminal's last writer is gone
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    screen = b"".join(chunks).decode()
    updates = re.findall(r"\r\[[#-]{20}\] (\d)/3 boosting rounds \| elapsed \d+:\d\d, ETA \d+:\d\d \| 3/3", screen)
    assert updates == ["1", "2", "3"], screen


def test_a_second_ctrl_c_aborts_at_once_without_a_traceback(fleet) -> None:
    """gw-2 is frozen (SIGSTOP), so the round in flight waits for its deadline: the first Ctrl-C
    waits with it, the second ends the command at once, saving nothing."""
    proc = fleet.start_training(
        "-o", "abort.cbor", "--rounds", "40", "--max-depth", "3", "--bins", "32", "--deadline", "60"
    )
    wait_for_line(proc, "fedscs_xgb 1/40")
    gateway = fleet.processes.processes["gw-2"]
    gateway.send_signal(signal.SIGSTOP)
    try:
        time.sleep(0.5)  # the next round is waiting for gw-2
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None  # waiting for the round boundary
        aborted = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        assert time.monotonic() - aborted < 5
    finally:
        gateway.send_signal(signal.SIGCONT)
    assert "Traceback" not in stderr and proc.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1] == "wheelfed train: interrupted"
    assert not (fleet.folder / "abort.cbor").exists()


def test_evaluation_scores_the_saved_model_and_stores_its_metrics(tmp_path) -> None:
    """gw-1 and gw-2 hold the last fifth of their sessions out, gw-3 holds nothing out: the
    model is scored on the first two, gw-3 is named, the metrics go to the registered model."""
    holdout = ("--holdout-fraction", "0.2")
    with running_fleet(tmp_path, {"gw-1": holdout, "gw-2": holdout}) as fleet:
        run = fleet.train("--registry", "reg.db", "--model-id", "act", "--rounds", "3", "--bins", "32", "--evaluate")
    assert run.code == 0 and "warning:" not in run.stderr, run.stderr
    held_out = re.search(r"^held-out: n=(\d+) accuracy=([\d.]+)", run.stdout, re.MULTILINE)
    assert held_out and int(held_out.group(1)) == 2 * 30  # 150 windows each, the last fifth
    assert "  gw-3: not evaluated: no_holdout_windows: this gateway keeps no held-out windows" in run.stdout
    with Registry(fleet.folder / "reg.db") as registry:
        record, model = registry.model("act")
    assert record.metrics["n"] == 60 and record.metrics["accuracy"] == pytest.approx(float(held_out.group(2)), abs=1e-3)
    assert model.n_trees == 9 and model.feature_set_version == WHEEL


def test_a_gateway_lost_mid_training_keeps_the_completed_rounds(fleet) -> None:
    """Last in this module: it kills gw-2 (and starts it again)."""
    proc = fleet.start_training(
        "-o",
        "partial.cbor",
        "--rounds",
        "40",
        "--max-depth",
        "3",
        "--bins",
        "32",
        "--min-fraction",
        "1",
        "--deadline",
        "3",
    )
    try:
        wait_for_line(proc, "fedscs_xgb 2/40")
        fleet.processes.kill("gw-2")
        stdout, stderr = proc.communicate(timeout=90)
    finally:
        fleet.processes.start("gw-2")
    assert "Traceback" not in stderr and proc.returncode == 1, stderr
    last = stderr.strip().splitlines()[-1]
    match = re.fullmatch(
        r"wheelfed train: .*gw-2.*; after (\d+) of 40 boosting rounds completed: saved a \1-round "
        r"model to partial\.cbor",
        last,
    )
    assert match, last
    assert TreeEnsemble.from_cbor((fleet.folder / "partial.cbor").read_bytes()).n_trees == 3 * int(match.group(1))
