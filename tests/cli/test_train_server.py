"""``wheelfed train`` and ``wheelfed model`` through a running ``wheelfed server``: a real server
process with bearer tokens and a signing key, real mosquitto and four real gateway processes.

The oracle of the submitted job: the model the CLI downloads with ``-o`` equals the in-memory
simulation of the options it was given (the options reach the server intact, the server trains
what a local run trains). Every failure -- no token, a read-only token for a change, a value the
server refuses, an unknown model, no server at all -- is one line with the CLI's exit codes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import aggregator
from aggregator.algorithms import FedSCSXGB
from aggregator.broker.mosquitto import find_free_port
from shared.model import TreeEnsemble
from shared.signing import SigningKey
from tests.cli.cli_support import REPO, CliRun, assert_one_line_failure, wheelfed
from tests.e2e.fleet_support import FEATURE_SET, GATEWAYS, PASSWORDS, client_data, start_fleet
from tests.server.server_support import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.mosquitto]

OPERATOR, READER = "operator-token-1", "read-token-1"
USAGE, RUNTIME = 2, 1


@dataclass
class Setup:
    server: ServerProcess
    folder: Path
    stores: dict[str, Path]

    def cli(self, *args: str, token: str | None = OPERATOR, timeout: float = 120.0) -> CliRun:
        """``wheelfed ARGS`` as a process, the server and ``token`` in its environment."""
        return wheelfed(*args, cwd=self.folder, env=self._env(token), timeout=timeout)

    def main(
        self, capsys: pytest.CaptureFixture, *args: str, token: str | None = OPERATOR, server: bool = True
    ) -> CliRun:
        """The same in this process (``edge_client.cli.main``): a process start costs seconds on
        a busy machine; what is tested -- the requests, the answers, the one line -- is the same."""
        from edge_client.cli import main

        with pytest.MonkeyPatch.context() as patch:
            for name in ("WHEELFED_SERVER", "WHEELFED_TOKEN"):
                patch.delenv(name, raising=False)
            for name, value in (self._env(token) if server else {}).items():
                patch.setenv(name, value)
            patch.chdir(self.folder)
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse's usage errors
                code = int(exc.code or 0)
        captured = capsys.readouterr()
        return CliRun(code, captured.out, captured.err)

    def _env(self, token: str | None) -> dict[str, str]:
        return {"WHEELFED_SERVER": self.server.url, **({"WHEELFED_TOKEN": token} if token else {})}


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Iterator[Setup]:
    root = tmp_path_factory.mktemp("train-server")
    key = SigningKey.generate()
    key.save(root / "aggregator.key")
    key.verify_key.save(root / "aggregator.pub")
    work = root / "work"
    work.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)  # the gateways keep their models in ./ID-models/
        patch.setenv("WHEELFED_OPERATOR_TOKENS", OPERATOR)
        patch.setenv("WHEELFED_READ_TOKENS", READER)
        with start_fleet(root, "--holdout-fraction", "0.2", "--trust", str(root / "aggregator.pub")) as fleet:
            fleet.agg.close()  # the server is the aggregator (one connection per client id)
            server = ServerProcess(
                str(root / "server.db"),
                fleet.port,
                PASSWORDS["aggregator"],
                root / "server.log",
                "--key",
                str(root / "aggregator.key"),
            )
            try:
                deadline = time.monotonic() + 30
                while sum(row["online"] for row in _get(server, "/api/gateways")) < len(GATEWAYS):
                    assert time.monotonic() < deadline, _get(server, "/api/gateways")
                    time.sleep(0.2)
                yield Setup(server, work, fleet.stores)
            finally:
                server.terminate()


def _get(server: ServerProcess, path: str, *, raw: bool = False):
    request = urllib.request.Request(server.url + path, headers={"Authorization": f"Bearer {READER}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        data = response.read()
    return data if raw else json.loads(data)


@pytest.fixture(scope="module")
def trained(setup: Setup) -> CliRun:
    """``act:v1``, trained through the server (the other tests read, deploy and compare it)."""
    return setup.cli(
        "train", "--model-id", "act", "--rounds", "3", "--max-depth", "3", "--bins", "16", "--no-dp", "-o", "act.cbor"
    )


def test_train_submits_the_job_follows_its_rounds_and_downloads_the_simulated_model(
    setup: Setup, trained: CliRun
) -> None:
    run = trained
    assert run.code == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith(f"training fedscs_xgb on the online gateways via the server {setup.server.url}: job ")
    job_id = lines[0].rsplit(" ", 1)[1]
    assert f"job {job_id}: feature set {FEATURE_SET}: 4 gateways (gw-1, gw-2, gw-3, gw-4)" in lines
    rounds = [line for line in lines if line.startswith("fedscs_xgb ")]
    assert [r.split(":")[0] for r in rounds] == ["fedscs_xgb 1/3", "fedscs_xgb 2/3", "fedscs_xgb 3/3"], run.stdout
    assert all("4/4 clients" in r and "| elapsed" in r for r in rounds)
    assert any(line.startswith("held-out: ") and "accuracy=" in line for line in lines), run.stdout
    assert lines[-1].startswith(
        f"act.cbor and act:v1 on {setup.server.url}: 9 trees, classes ['lie', 'push', "
        f"'sit'], feature set {FEATURE_SET}; job {job_id}, 3 boosting rounds"
    ), lines[-1]

    job = _get(setup.server, f"/api/jobs/{job_id}")
    assert job["config"] == {
        "n_rounds": 3,
        "max_depth": 3,
        "n_bins": 16,
        "learning_rate": 0.2,
        "protocol": "histogram",
        "multi_strategy": "one_output_per_tree",
        "secure_aggregation": True,
    }
    downloaded = TreeEnsemble.from_cbor((setup.folder / "act.cbor").read_bytes())
    simulated = aggregator.simulate(
        FedSCSXGB(n_rounds=3, max_depth=3, n_bins=16, protocol="histogram", feature_set_version=FEATURE_SET),
        client_data(setup.stores, 0.2),
        seed=0,
    )
    assert downloaded == simulated


def test_model_actions_read_and_deploy_through_the_server(setup: Setup, trained: CliRun, capsys) -> None:
    assert trained.code == 0, trained.stderr
    listed = setup.cli("model", "list", token=READER)  # a process, as an operator runs it; the rest in-process
    assert listed.code == 0 and any(
        line.startswith("act:v1 ") and "fedscs-xgb" in line for line in listed.stdout.splitlines()
    ), listed
    shown = setup.main(capsys, "model", "show", "act", token=READER)
    assert shown.code == 0 and shown.stdout.startswith("act:v1: fedscs-xgb boosted model, 9 trees"), shown
    assert "classes: lie, push, sit" in shown.stdout and "held-out metrics" in shown.stdout
    exported = setup.main(capsys, "model", "export", "act:v1", "-o", "exported.json", token=READER)
    assert exported.code == 0, exported.stderr
    server_bytes = _get(setup.server, "/api/models/act/1/download", raw=True)
    assert TreeEnsemble.from_json((setup.folder / "exported.json").read_text()) == TreeEnsemble.from_cbor(server_bytes)
    compared = setup.main(capsys, "model", "compare", "act:v1", "act:v1", token=READER)
    assert compared.code == 0 and "accuracy" in compared.stdout and "+0" in compared.stdout, compared

    deployed = setup.main(capsys, "model", "deploy", "act:v1", "--clients", "gw-1,gw-2")
    assert deployed.code == 0, deployed.stderr
    assert deployed.stdout.splitlines()[0] == "act:v1: active on gw-1, gw-2"
    row = next(
        line
        for line in setup.main(capsys, "model", "list", token=READER).stdout.splitlines()
        if line.startswith("act:v1 ")
    )
    assert "gw-1=active" in row and "gw-2=active" in row and "gw-3" not in row


def test_ctrl_c_cancels_the_job_on_the_server(setup: Setup) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "WHEELFED_SERVER": setup.server.url, "WHEELFED_TOKEN": OPERATOR}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edge_client.cli",
            "train",
            "--model-id",
            "long",
            "--rounds",
            "200",
            "--max-depth",
            "2",
            "--bins",
            "8",
            "--no-dp",
        ],
        cwd=setup.folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    first = proc.stdout.readline()
    job_id = first.rsplit(" ", 1)[1].strip()
    while not proc.stdout.readline().startswith("fedscs_xgb 1/200"):
        assert proc.poll() is None, proc.stderr.read()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err
    assert "SIGINT: asking the server to cancel the job" in err and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"wheelfed train: interrupted: job {job_id} cancelled on the server after "), last
    assert last.endswith(" of 200 boosting rounds; the server registered no model"), last
    job = _get(setup.server, f"/api/jobs/{job_id}")
    assert job["state"] == "cancelled" and job["result"] == "" and 1 <= job["completed"] < 200
    assert not [m for m in _get(setup.server, "/api/models") if m["model_id"] == "long"]


def test_each_failure_is_one_line_with_the_cli_s_exit_code(setup: Setup, trained: CliRun, capsys) -> None:
    assert trained.code == 0, trained.stderr
    (setup.folder / "token").write_text(READER + "\n")
    key = str(setup.folder.parent / "aggregator.key")
    nowhere = f"http://127.0.0.1:{find_free_port()}"
    train = ("train", "--model-id", "x", "--rounds", "1", "--no-dp")
    # (command, token, exit code, fragments of the one line)
    cases = [
        (
            train,
            None,
            RUNTIME,
            ("needs a bearer token", "this needs an operator token", "WHEELFED_TOKEN", "--token-file"),
        ),
        (
            train,
            READER,
            RUNTIME,
            ("refused the token", "this needs an operator token", "this token may not change anything"),
        ),
        (("model", "list"), None, RUNTIME, ("needs a bearer token", "this needs a read or operator token")),
        (
            ("model", "deploy", "act:v1", "--clients", "gw-1"),
            READER,
            RUNTIME,
            ("refused the token", "this needs an operator token"),
        ),
        # a value the server refuses (422): a usage error, with the server's reason
        (
            ("train", "--algorithm", "fedforest", "--init-version", "act:v1"),
            OPERATOR,
            USAGE,
            ("the server refused the request", "fedforest cannot continue from a model"),
        ),
        (
            ("train", "--since", "yesterday"),
            OPERATOR,
            USAGE,
            ("the server refused the request", "since: 'yesterday' is neither Unix seconds nor an ISO-8601 time"),
        ),
        # a job the server cannot run: it fails there, and the command says why
        (("train", "--min-gateways", "99"), OPERATOR, RUNTIME, ("failed on the server", "the job needs 99")),
        # an unknown model (404), with the server's message
        (("model", "show", "nope:v3"), READER, RUNTIME, ("nope",)),
        # options of a local run, refused before anything is sent
        (("train", "--registry", "r.db"), OPERATOR, USAGE, ("--registry is for a local run",)),
        (
            ("model", "register", "act.cbor", "--model-id", "x"),
            OPERATOR,
            USAGE,
            ("model register works on a registry file",),
        ),
        (
            ("model", "deploy", "act:v1", "--key", key),
            OPERATOR,
            USAGE,
            ("--key is for a local registry", "the server signs with its own key"),
        ),
    ]
    local = [  # no server configured
        (
            ("train", "-o", "m.cbor", "--min-gateways", "3"),
            USAGE,
            ("--min-gateways is a participation rule of a server job",),
        ),
        (
            ("train", "--server", nowhere, "--rounds", "1"),
            RUNTIME,
            (f"cannot reach the server at {nowhere}: connection refused",),
        ),
    ]
    for args, token, code, fragments in cases:
        assert_one_line_failure(setup.main(capsys, *args, token=token), code, *fragments)
    for args, code, fragments in local:
        assert_one_line_failure(setup.main(capsys, *args, server=False), code, *fragments)
    # the token from a file, never the command line
    assert setup.main(capsys, "model", "list", "--token-file", "token", token=None).code == 0


def test_train_fedga_tree_through_the_server_downloads_each_gateway_s_simulated_tree(setup: Setup) -> None:
    """A FedGA-Tree job on the server: one tree per gateway, registered as MODEL_ID.GATEWAY, each
    downloaded to its gateway's file and equal to the simulation's tree for that gateway."""
    from aggregator.algorithms import FedGATree

    run = setup.cli(
        "train",
        "--algorithm",
        "fedga-tree",
        "--model-id",
        "own",
        "--generations",
        "3",
        "--max-depth",
        "4",
        "--seed",
        "2",
        # the gateways draw their count noise from the OS (the simulation from its seed): a budget
        # this large makes the noise (Laplace scale 1e-9) too small to change any ranking
        "--epsilon",
        "1e9",
        "-o",
        "trees.cbor",
    )
    assert run.code == 0, run.stderr
    lines = run.stdout.splitlines()
    assert [line.split(":")[0] for line in lines if line.startswith("fedga_tree ")] == [
        f"fedga_tree {g}/3" for g in range(1, 4)
    ], run.stdout
    assert lines[-1].endswith(
        "3 generations, one tree per gateway, each deployable to its own gateway only; "
        "participants gw-1, gw-2, gw-3, gw-4"
    ), lines[-1]
    simulated = aggregator.simulate(
        FedGATree(generations=3, d_max=4, epsilon=1e9, feature_set_version=FEATURE_SET),
        client_data(setup.stores, 0.2),
        seed=2,
    )
    for gateway in GATEWAYS:
        line = next(line for line in lines if line.startswith(f"{gateway}: its own tree -> "))
        assert f"trees.{gateway}.cbor and own.{gateway}:v1 on {setup.server.url}; held-out" in line, line
        assert TreeEnsemble.from_cbor((setup.folder / f"trees.{gateway}.cbor").read_bytes()) == simulated[gateway]
        assert _get(setup.server, f"/api/models/own.{gateway}/1")["target"] == gateway
