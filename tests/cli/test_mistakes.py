"""Everyday mistakes, one row each: exit code, one line naming the problem, no traceback, nothing left behind.

Each row runs ``wheelfed`` as a separate process in a scratch folder holding a few files a user
might pass by mistake (a CSV, an empty file, random bytes, a registry, a real recording and a
real model). A row passes when the exit code is 2 (usage) or 1 (runtime), the last stderr line
starts with ``wheelfed`` and contains the expected fragments, stderr holds no traceback, no new
file appeared in the folder and no process started by the command is still running.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.cli.cli_support import assert_one_line_failure, files_under, wheelfed

USAGE, RUNTIME = 2, 1

# (arguments, exit code, fragments of the one line)
MISTAKES: list[tuple[str, int, tuple[str, ...]]] = [
    # no or unknown command, global options
    ("", USAGE, ("COMMAND",)),
    ("trian", USAGE, ("invalid choice", "trian")),
    ("--log-level loud features rec.wfrec -o f.npz", USAGE, ("--log-level", "LOUD")),
    # recordings
    ("features missing.wfrec -o f.npz", USAGE, ("no such file: missing.wfrec",)),
    ("features table.csv -o f.npz", USAGE, ("table.csv is not a WheelFed recording",)),
    ("features empty.wfrec -o f.npz", USAGE, ("empty.wfrec is not a WheelFed recording",)),
    ("features random.bin -o f.npz", USAGE, ("random.bin is not a WheelFed recording",)),
    ("features folder -o f.npz", USAGE, ("folder is a directory",)),
    ("features rec.wfrec -o out.txt", USAGE, ("must end in .npz or .csv", "out.txt")),
    ("features rec.wfrec -o nowhere/f.npz", USAGE, ("the folder nowhere does not exist",)),
    ("features rec.wfrec", USAGE, ("-o/--output",)),
    ("replay missing.wfrec --pty", USAGE, ("no such file: missing.wfrec",)),
    ("replay rec.wfrec", USAGE, ("exactly one of --to PORT and --pty",)),
    ("replay rec.wfrec --to /dev/ttyNOPE", USAGE, ("no such serial device: /dev/ttyNOPE",)),
    ("replay rec.wfrec --pty --speed -1", USAGE, ("--speed", "-1")),
    ("replay table.csv --pty", USAGE, ("not a WheelFed recording",)),
    ("replay rec.wfrec --pty --wait-for-reader 0.5", RUNTIME, ("no reader opened the pty within 0.5 s",)),
    ("replay rec.wfrec --to socket://127.0.0.1:{closed}", RUNTIME, ("cannot open", "Connection refused")),
    ("record --serial /dev/ttyNOPE -o new.wfrec", USAGE, ("no such serial device: /dev/ttyNOPE",)),
    ("record --serial loop:// -o new.txt", USAGE, ("must end in .wfrec",)),
    ("record --serial loop:// -o rec.wfrec", USAGE, ("rec.wfrec exists",)),
    ("record --serial loop:// -o new.wfrec --duration 0", USAGE, ("--duration",)),
    ("import seglern -o recs", USAGE, ("invalid choice", "seglern")),
    ("import seglearn -o nowhere/recs", USAGE, ("the folder nowhere does not exist",)),
    ("predict missing.wfrec --model model.cbor", USAGE, ("no such file: missing.wfrec",)),
    ("predict rec.wfrec --model nope.cbor", USAGE, ("no such file: nope.cbor",)),
    ("predict rec.wfrec --model registry.db", USAGE, ("is a database", "wheelfed model export")),
    ("predict rec.wfrec --model random.bin", USAGE, ("random.bin is not a WheelFed model",)),
    ("predict rec.wfrec --model table.csv", USAGE, ("table.csv is not a WheelFed model",)),
    ("predict rec.wfrec --model model.cbor -o out.txt", USAGE, ("must end in .csv",)),
    ("predict rec.wfrec --model other-model.cbor", RUNTIME, ("the model expects feature set",)),
    # keys and the registry
    ("keygen -o /nonexistent/k.key", USAGE, ("the folder /nonexistent does not exist",)),
    ("keygen -o k.txt", USAGE, ("must end in .key",)),
    ("keygen -o existing.key", RUNTIME, ("exists", "--force")),
    ("model list --registry nope.db", USAGE, ("no registry at nope.db",)),
    ("model show --registry registry.db", USAGE, ("MODEL_ID",)),
    ("model show x:vq --registry registry.db", USAGE, ("MODEL_ID:vN",)),
    ("model deploy activity --registry registry.db --key nope.key", USAGE, ("no signing key at nope.key",)),
    ("model deploy activity --registry registry.db --key open.key", USAGE, ("chmod 600",)),
    ("model frobnicate", USAGE, ("invalid choice", "frobnicate")),
    # broker
    ("broker", USAGE, ("--user NAME:PASSWORD",)),
    ("broker --user aggregator", USAGE, ("NAME:PASSWORD",)),
    ("broker --user bad/id:pw", USAGE, ("invalid client id",)),
    ("broker --user aggregator:pw --port 70000", USAGE, ("0-65535",)),
    ("broker --tls-cert-dir nowhere", USAGE, ("no such directory: nowhere",)),
    ("broker --tls-cert-dir folder", USAGE, ("lacks ca.crt",)),
    # train: values are checked before any network
    ("train -o m.cbor --rounds -1", USAGE, ("--rounds", "at least 1", "-1")),
    ("train -o m.cbor --rounds 0", USAGE, ("--rounds", "at least 1")),
    ("train -o m.cbor --max-depth -3", USAGE, ("--max-depth", "at least 1")),
    ("train -o m.cbor --multi-strategy vector", USAGE, ("--multi-strategy", "invalid choice", "multi_output_tree")),
    ("train -o m.cbor --max-depth 0", USAGE, ("--max-depth", "at least 1")),
    ("train -o m.cbor --bins 1", USAGE, ("--bins", "at least 2")),
    ("train -o m.cbor --algorithm fedforest --trees 0", USAGE, ("--trees",)),
    ("train -o m.cbor --learning-rate -1", USAGE, ("--learning-rate",)),
    ("train -o m.cbor --learning-rate nan", USAGE, ("--learning-rate",)),
    ("train -o m.cbor --client-fraction 2", USAGE, ("--client-fraction", "(0, 1]")),
    ("train -o m.cbor --min-fraction 0", USAGE, ("--min-fraction",)),
    ("train -o m.cbor --deadline 0", USAGE, ("--deadline",)),
    ("train -o m.cbor --rounds ten", USAGE, ("--rounds", "whole number")),
    ("train", USAGE, ("-o FILE and/or --registry",)),
    ("train -o out.txt", USAGE, ("must end in .json or .cbor",)),
    ("train -o m.cbor --init-model nope.cbor", USAGE, ("no such file: nope.cbor",)),
    ("train -o m.cbor --init-model random.bin", USAGE, ("not a WheelFed model",)),
    ("train -o m.cbor --clients gw-1,,gw-2", USAGE, ("comma-separated gateway ids",)),
    ("train -o m.cbor --clients bad/id", USAGE, ("invalid client id",)),
    ("train -o m.cbor --registry r.db --model-id activity:v2", USAGE, ("not a usable model id",)),
    ("train -o m.cbor --tls-ca nope.crt", USAGE, ("no such file: nope.crt",)),
    ("train -o m.cbor --tls-cert table.csv", USAGE, ("--tls-cert/--tls-key need --tls-ca",)),
    ("train -o m.cbor --port {closed}", RUNTIME, ("connection refused", "is the broker running")),
    ("train -o m.cbor --host no-such-host.invalid", RUNTIME, ("unknown host",)),
    # gateway: values checked before it opens anything
    ("gateway --client-id bad/id --no-broker", USAGE, ("invalid client id",)),
    ("gateway --client-id aggregator --no-broker", USAGE, ("the aggregator's id",)),
    ("gateway --client-id gw-1 --trust nope.pub --no-broker", USAGE, ("no such file: nope.pub",)),
    ("gateway --client-id gw-1 --alerts nope.json --no-broker", USAGE, ("no such file: nope.json",)),
    ("gateway --client-id gw-1 --holdout-fraction 1.5 --no-broker", USAGE, ("--holdout-fraction", "[0, 1)")),
    ("gateway --client-id gw-1 --serial /dev/ttyNOPE --no-broker", USAGE, ("no such serial device",)),
    ("gateway --client-id gw-1 --max-windows 0 --no-broker", USAGE, ("--max-windows",)),
    ("gateway --client-id gw-1 --port 0", USAGE, ("--port",)),
    ("gateway --client-id gw-1 --party-key-file nope.key --no-broker", USAGE, ("no such file: nope.key",)),
    (
        "gateway --client-id gw-1 --party-key-file table.csv --no-broker",
        RUNTIME,
        ("--party-key-file", "table.csv: not a hex key"),
    ),
    # vertical: one person's gateways
    ("vertical", USAGE, ("ACTION",)),
    ("vertical keygen -o k.txt", USAGE, ("must end in .key",)),
    ("vertical keygen -o existing.key", RUNTIME, ("existing.key exists", "--force")),
    (
        "vertical train --parties gw-a,gw-b --label-holder gw-c --model-id vf -o m.vfm --key existing.key",
        USAGE,
        ("--label-holder gw-c is not one of --parties gw-a,gw-b",),
    ),
    (
        "vertical train --parties gw-a,gw-a --label-holder gw-a --model-id vf -o m.vfm --key existing.key",
        USAGE,
        ("--parties names a gateway twice",),
    ),
    (
        "vertical train --parties gw-a,gw-b --label-holder gw-a --model-id vf -o m.cbor --key existing.key",
        USAGE,
        ("must end in .vfm",),
    ),
    (
        "vertical train --parties gw-a,gw-b --label-holder gw-a --model-id vf -o m.vfm",
        USAGE,
        ("no signing key at aggregator.key",),
    ),
    (
        "vertical train --parties gw-a,gw-b --label-holder gw-a --model-id vf -o m.vfm --key existing.key --hop-ms "
        "2000 --tolerance-ms 1500",
        USAGE,
        ("--tolerance-ms 1500 must be at most half of --hop-ms",),
    ),
    (
        "vertical train --parties gw-a,gw-b --label-holder gw-a --model-id vf -o m.vfm --key existing.key "
        "--max-features lots",
        USAGE,
        ("max_features", "lots"),
    ),
    (
        "vertical train --parties gw-a,gw-b --label-holder gw-a --model-id vf -o m.vfm --key existing.key "
        "--min-samples-split 1",
        USAGE,
        ("--min-samples-split", "at least 2"),
    ),
    (
        "vertical train --parties gw-a,gw-b --label-holder gw-a --model-id vf -o m.vfm --key existing.key "
        "--min-impurity-decrease -0.1",
        USAGE,
        ("--min-impurity-decrease", "-0.1"),
    ),
    (
        "vertical train --parties gw-a,gw-b --label-holder gw-a --model-id vf -o m.vfm --key existing.key "
        "--no-bootstrap yes",
        USAGE,
        ("unrecognized arguments", "yes"),
    ),
    (
        "vertical train --parties gw-a,gw-b --label-holder gw-a --model-id vf -o m.vfm --key existing.key --trees 0",
        USAGE,
        ("--trees", "at least 1"),
    ),
    (
        "vertical train --parties gw-a,gw-b --label-holder gw-a --model-id vf -o m.vfm --key existing.key --port "
        "{closed}",
        RUNTIME,
        ("connection refused", "is the broker running"),
    ),
    ("vertical predict --model nope.vfm --trust existing.pub", USAGE, ("no such file: nope.vfm",)),
    ("vertical predict --model random.bin", USAGE, ("required", "--trust")),
    (
        "vertical predict --model random.bin --trust existing.pub",
        USAGE,
        ("--model random.bin", "not a vertical forest model file"),
    ),
    (
        "vertical predict --model model.cbor --trust existing.pub",
        USAGE,
        ("--model model.cbor", "not a vertical forest model file"),
    ),
    # demo
    ("demo --subjects 11", USAGE, ("10 subjects",)),
    ("demo --report out.txt", USAGE, ("must end in .json",)),
]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of things a user might pass by mistake, and a few real ones."""
    from aggregator import simulate
    from aggregator.algorithms import FedSCSXGB
    from aggregator.registry import Registry
    from edge_client.processing import extract_recording
    from firmware_bridge.importers import seglearn_watch
    from shared.signing import SigningKey

    folder = tmp_path_factory.mktemp("scratch")
    recordings = seglearn_watch.import_all(tmp_path_factory.mktemp("recordings"))
    (folder / "rec.wfrec").write_bytes(recordings[0].read_bytes())
    (folder / "table.csv").write_text("a,b\n1,2\n")
    (folder / "empty.wfrec").write_bytes(b"")
    (folder / "random.bin").write_bytes(np.random.default_rng(0).bytes(4096))
    (folder / "folder").mkdir()
    table, _ = extract_recording(folder / "rec.wfrec")
    labelled = np.array([y is not None for y in table.labels])
    X, y = table.X[labelled], np.array([str(v) for v in table.labels[labelled]])
    model = simulate(
        FedSCSXGB(n_rounds=1, max_depth=2, secure_aggregation=False, feature_set_version=table.feature_set_version),
        [(X, y)],
    )
    (folder / "model.cbor").write_bytes(model.to_cbor())
    other = simulate(
        FedSCSXGB(n_rounds=1, max_depth=2, secure_aggregation=False, feature_set_version="wheelfed-tifex-2+0000"),
        [(X, y)],
    )
    (folder / "other-model.cbor").write_bytes(other.to_cbor())
    with Registry(folder / "registry.db") as registry:
        registry.add("activity", model)
    key = SigningKey.generate()
    key.save(folder / "existing.key")
    key.verify_key.save(folder / "existing.pub")
    key.save(folder / "open.key")
    os.chmod(folder / "open.key", 0o644)
    return folder


def _closed_port() -> int:
    from aggregator.broker.mosquitto import find_free_port

    return find_free_port()


@pytest.mark.parametrize("line, code, fragments", MISTAKES, ids=[m[0] or "(nothing)" for m in MISTAKES])
def test_mistake_is_one_clear_line(scratch: Path, line: str, code: int, fragments: tuple[str, ...]) -> None:
    before = files_under(scratch)
    run = wheelfed(*line.format(closed=_closed_port()).split(), cwd=scratch, timeout=60)
    assert_one_line_failure(run, code, *fragments)
    assert files_under(scratch) == before, "the command left a file behind"
    leftover = subprocess.run(["pgrep", "-f", str(scratch)], capture_output=True, text=True).stdout.split()
    assert not leftover, f"processes still running: {leftover}"


def test_debug_shows_the_traceback(scratch: Path) -> None:
    run = wheelfed("--debug", "train", "-o", "m.cbor", "--port", str(_closed_port()), cwd=scratch)
    assert run.code != 0 and "Traceback" in run.stderr and "connection refused" in run.stderr


def test_every_help_shows_defaults_and_examples(scratch: Path) -> None:
    from edge_client.cli import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name, sub in commands.items():
        text = sub.format_help()
        assert "examples:" in text, f"wheelfed {name} --help has no examples"
        for action in sub._actions:
            if (
                action.option_strings
                and action.default not in (None, False, [], "==SUPPRESS==")
                and action.help
                and "--help" not in action.option_strings
            ):
                assert (
                    "default"
                    in (
                        action.help % {"default": action.default}
                        if "%(" in action.help
                        else sub._get_formatter()._get_help_string(action)
                    ).lower()
                ), f"wheelfed {name} {action.option_strings[0]}: default not shown"
