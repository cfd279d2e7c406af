"""Coverage-guided fuzzing of WheelFed's decoders with atheris (libFuzzer).

    .venv/bin/python -m tests.fuzz.run                     # every target, 60 s each
    .venv/bin/python -m tests.fuzz.run --seconds 600 frames bundle
    .venv/bin/python -m tests.fuzz.run --grow-corpus       # keep new interesting inputs in the repo
    .venv/bin/python -m tests.fuzz.run --write-seeds       # (re)write the seed inputs

Each target runs in its own process (libFuzzer ends the process when it is done), on a copy of
``corpus/<target>/`` unless ``--grow-corpus``. A finding -- an exception outside the target's
own error family -- stops that target, prints its traceback and leaves the input as
``findings/<target>/crash-*``; the exit code is then 1. One summary line per target.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
FINDINGS = HERE / "findings"


def fuzz_one(name: str, corpus: Path, seconds: float, artifacts: Path) -> None:
    """Run inside the child process: atheris on ``name`` until ``seconds`` pass (never returns)."""
    import atheris

    with atheris.instrument_imports(include=["shared", "firmware_bridge", "edge_client", "tests.fuzz", "tomllib"]):
        from tests.fuzz import targets  # noqa: F401  (instrumented with the decoders it imports)
        import edge_client.alerts, edge_client.gateway_config  # noqa: E401,F401
        import firmware_bridge.frames, firmware_bridge.recording  # noqa: E401,F401
        import shared.model.bundle, shared.protocol.chunking, shared.protocol.envelope  # noqa: E401,F401
    target = targets.CANARY if name == "canary" else targets.TARGETS[name]
    artifacts.mkdir(parents=True, exist_ok=True)
    atheris.Setup(
        [
            sys.argv[0],
            str(corpus),
            f"-max_total_time={int(seconds)}",
            "-rss_limit_mb=2048",
            "-max_len=65536",
            f"-artifact_prefix={artifacts}/",
            "-print_final_stats=1",
        ],
        target,
    )
    atheris.Fuzz()


def write_seeds() -> None:
    from tests.fuzz.seeds import seed_inputs

    with tempfile.TemporaryDirectory() as scratch:
        for name, inputs in seed_inputs(Path(scratch)).items():
            folder = CORPUS / name
            folder.mkdir(parents=True, exist_ok=True)
            for i, data in enumerate(inputs):
                (folder / f"seed-{i}").write_bytes(data)
            print(f"{folder.relative_to(HERE.parent.parent)}: {len(inputs)} seeds")


def run_target(name: str, seconds: float, grow: bool, findings: Path = FINDINGS) -> tuple[bool, str]:
    """One child process; (passed, summary line). A finding's input goes to ``findings/<name>/``."""
    with tempfile.TemporaryDirectory(prefix=f"wheelfed-fuzz-{name}-") as scratch:
        corpus = CORPUS / name
        if not grow:
            corpus = Path(scratch) / "corpus"
            shutil.copytree(CORPUS / name, corpus) if (CORPUS / name).is_dir() else corpus.mkdir()
        started = time.monotonic()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.fuzz.run",
                "--child",
                name,
                "--seconds",
                str(seconds),
                "--corpus",
                str(corpus),
                "--findings",
                str(findings / name),
            ],
            cwd=HERE.parent.parent,
            capture_output=True,
            text=True,
        )
        took = time.monotonic() - started
        stats = dict(line.partition(": ")[::2] for line in proc.stderr.splitlines() if line.startswith("stat::"))
        runs = stats.get("stat::number_of_executed_units", "?")
        if proc.returncode == 0:
            return True, f"{name:12} ok       {runs:>9} inputs in {took:5.0f} s, corpus {len(list(corpus.iterdir()))}"
        sys.stderr.write(proc.stderr[-6000:])
        return False, f"{name:12} FINDING  after {runs} inputs ({took:.0f} s): input kept in {findings / name}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.fuzz.run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("targets", nargs="*", help="targets to run (default: all)")
    parser.add_argument("--seconds", type=float, default=60.0, help="per target (default: 60)")
    parser.add_argument("--grow-corpus", action="store_true", help="fuzz in corpus/ itself, keeping new inputs")
    parser.add_argument("--write-seeds", action="store_true", help="write the seed inputs into corpus/ and stop")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", help=argparse.SUPPRESS)
    parser.add_argument("--findings", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        fuzz_one(args.child, Path(args.corpus), args.seconds, Path(args.findings))
    if args.write_seeds:
        write_seeds()
        return 0
    from tests.fuzz.targets import TARGETS

    unknown = sorted(set(args.targets) - set(TARGETS) - {"canary"})
    if unknown:
        parser.error(f"unknown targets {unknown}; choose from {sorted(TARGETS)}")
    results = [run_target(name, args.seconds, args.grow_corpus) for name in args.targets or TARGETS]
    for _, line in results:
        print(line, flush=True)
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
