"""Fuzzing in CI: every decoder that takes outside bytes runs under atheris for a bounded time
(``WHEELFED_FUZZ_SECONDS``, default 10 per target) from the corpus kept in ``corpus/``; where
atheris does not install, hypothesis feeds the same targets random and mutated bytes. A longer
run is one command: ``python -m tests.fuzz.run --seconds 600``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.run import CORPUS, run_target
from tests.fuzz.seeds import seed_inputs
from tests.fuzz.targets import TARGETS

SECONDS = float(os.environ.get("WHEELFED_FUZZ_SECONDS", "10"))

try:
    import atheris  # noqa: F401

    # WHEELFED_FUZZ_ENGINE=hypothesis runs the fallback where atheris is installed too
    HAVE_ATHERIS = os.environ.get("WHEELFED_FUZZ_ENGINE", "atheris") == "atheris"
except ImportError:  # e.g. aarch64 or Python > 3.11: no wheel
    HAVE_ATHERIS = False


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_the_seed_corpus_is_valid_input(name: str) -> None:
    """The seeds are real, well-formed inputs (fresh from the writers) and the kept corpus holds them."""
    with tempfile.TemporaryDirectory() as scratch:
        fresh = seed_inputs(Path(scratch))[name]
    kept = {p.read_bytes() for p in (CORPUS / name).glob("seed-*")}
    assert len(kept) == len(fresh)
    for data in fresh:
        TARGETS[name].run(data)  # accepted: not even the target's own refusal


@pytest.mark.skipif(not HAVE_ATHERIS, reason="atheris is not installed (hypothesis runs the targets instead)")
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_coverage_guided_fuzzing_finds_nothing(name: str) -> None:
    ok, line = run_target(name, SECONDS, grow=False)
    assert ok, line


@pytest.mark.skipif(not HAVE_ATHERIS, reason="atheris is not installed")
def test_the_fuzzer_finds_a_planted_bug(tmp_path: Path) -> None:
    ok, line = run_target("canary", 30, grow=False, findings=tmp_path)
    assert not ok and "FINDING" in line and list((tmp_path / "canary").glob("crash-*"))


@pytest.mark.skipif(HAVE_ATHERIS, reason="atheris runs the targets")
@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=4096), flips=st.lists(st.integers(0, 1 << 20), max_size=8))
def test_random_and_mutated_bytes_find_nothing(name: str, data: bytes, flips: list[int]) -> None:
    TARGETS[name](data)
    for seed in (CORPUS / name).glob("seed-*"):
        mutated = bytearray(seed.read_bytes())
        for flip in flips:
            mutated[flip % len(mutated)] ^= 1 << (flip % 8)
        TARGETS[name](bytes(mutated))
