"""The demo's epsilon (``aggregator.demo.epsilon``): it is the one the measured curve picks, the
curve is the one BENCHMARKS.md publishes, both private algorithms train at it, the demo server's
cap fits the demo's private trainings, and the summary states the epsilon and why."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from aggregator.demo import epsilon as eps
from aggregator.demo.epsilon import (
    CURVE,
    DEMO_EPSILON,
    SEEDS,
    chosen_epsilon,
    lifetime_epsilon,
    private_trainings,
)
from aggregator.demo.summary import epsilon_lines, privacy_line
from aggregator.demo.service import DEMO_EPSILON_CAP
from aggregator.demo.training import TrainingPlan, privacy_settings
from aggregator.server.service import build_algorithm

BENCHMARKS = Path(__file__).resolve().parents[2] / "BENCHMARKS.md"
SECTION = "## Differential privacy at the demo's scale: the epsilon-accuracy curve"
BETTER = "demo's federated model (the better of the two), epsilon "


def plan() -> TrainingPlan:
    return TrainingPlan(
        [f"gw-{i:02d}" for i in range(1, 11)],
        ["fedscs-xgb", "fedforest"],
        ["PEN", "ABD", "FEL", "IR", "ER", "TRAP", "ROW"],
        True,
    )


def published_per_seed() -> dict[str, list[float]]:
    """The per-seed accuracy table of BENCHMARKS.md's curve section: row name -> one value per seed."""
    text = BENCHMARKS.read_text()
    section = text[text.index(SECTION) :]
    section = section[: section.find("\n## ", 1)]
    table = section[section.index("per seed (accuracy):") :]
    rows = {}
    for line in table.splitlines()[3:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = [float(c) for c in cells[1:]]
    return rows


def test_the_demo_epsilon_is_the_smallest_that_beats_both_bars_on_nearly_every_seed() -> None:
    assert DEMO_EPSILON == chosen_epsilon()
    beats, _ = CURVE[DEMO_EPSILON]
    assert beats >= SEEDS - eps.ALLOWED_MISSES
    assert all(b < SEEDS - eps.ALLOWED_MISSES for e, (b, _) in CURVE.items() if e < DEMO_EPSILON)


def test_the_curve_is_the_one_benchmarks_md_publishes() -> None:
    rows = published_per_seed()
    local = rows["local-only (each gateway its own forest)"]
    chance = rows["majority class (chance)"]
    assert len(local) == SEEDS
    measured = {}
    for name, values in rows.items():
        if name.startswith(BETTER):
            beats = sum(v > a and v > c for v, a, c in zip(values, local, chance))
            measured[float(name[len(BETTER) :])] = (beats, sum(values) / len(values))
    assert set(measured) == set(CURVE)
    for e, (beats, mean) in CURVE.items():
        assert measured[e][0] == beats, e
        assert measured[e][1] == pytest.approx(mean, abs=0.0051), e
    assert sum(local) / SEEDS == pytest.approx(eps.LOCAL_ONLY_MEAN, abs=0.0051)
    assert sum(chance) / SEEDS == pytest.approx(eps.CHANCE_MEAN, abs=0.0051)


def test_both_private_algorithms_train_at_the_demo_epsilon() -> None:
    p = plan()
    for algorithm in ("fedscs-xgb", "fedforest"):
        built = build_algorithm(algorithm, p.config(algorithm))
        assert (built.protocol, built.dp_epsilon, built.dp_delta) == ("private", DEMO_EPSILON, eps.DEMO_DELTA)
    assert build_algorithm("fedscs-xgb", p.config("fedscs-xgb", continuing=True)).dp_epsilon == DEMO_EPSILON
    assert privacy_settings(p).epsilons == {"fedscs-xgb": DEMO_EPSILON, "fedforest": DEMO_EPSILON}
    local = build_algorithm("fedforest", p.local_config())  # every gateway alone: no DP, nothing in the ledger
    assert (local.protocol, local.secure_aggregation) == ("histogram", False)


def test_the_demo_servers_cap_fits_the_demos_private_trainings_and_no_more() -> None:
    # first training: FedSCS-XGB and FedForest over the fleet; then the retraining on every labelled window
    trainings = private_trainings(len(plan().algorithms))
    assert trainings == 3
    assert lifetime_epsilon(DEMO_EPSILON, trainings) <= DEMO_EPSILON_CAP < lifetime_epsilon(DEMO_EPSILON, trainings + 1)
    assert DEMO_EPSILON_CAP == math.ceil(lifetime_epsilon(DEMO_EPSILON, trainings))


def test_the_summary_states_the_epsilon_and_why() -> None:
    settings = privacy_settings(plan())
    assert f"differential privacy at epsilon {DEMO_EPSILON:g} per window per training" in privacy_line(settings, "")
    [line] = epsilon_lines(settings)
    beats, mean = CURVE[DEMO_EPSILON]
    assert line.startswith(f"the demo's epsilon {DEMO_EPSILON:g} per window per training (delta 1e-06)")
    assert f"by at most a factor e^{DEMO_EPSILON:g}" in line and "k windows of a person" in line
    assert "its fleet is tiny (10 gateways" in line
    assert (
        f"{DEMO_EPSILON:g} is the smallest epsilon at which its federated model beat the local-only baseline and "
        f"chance on nearly every split seed ({beats} of {SEEDS}; mean accuracy {mean:.2f} vs local-only "
        f"{eps.LOCAL_ONLY_MEAN:.2f} and chance {eps.CHANCE_MEAN:.2f}" in line
    )
    smaller = max(e for e in CURVE if e < DEMO_EPSILON)
    assert f"at epsilon {smaller:g}: {CURVE[smaller][0]} of {SEEDS}" in line
    assert "the same noise weighs less" in line and "0.83 at epsilon 1" in line  # the fleet-scale measurement
    assert "its fleet is tiny (this run has 3; the curve was measured on the default 10 gateways" in eps.statement(
        DEMO_EPSILON, 3
    )


def test_the_one_screen_summary_says_why_that_epsilon_in_a_sentence() -> None:
    beats, _ = CURVE[DEMO_EPSILON]
    smaller = max(e for e in CURVE if e < DEMO_EPSILON)
    assert eps.reason(DEMO_EPSILON) == (
        f"why epsilon {DEMO_EPSILON:g}: the smallest at which the demo's model beat local-only and chance on "
        f"{beats} of {SEEDS} split seeds (at epsilon {smaller:g}: {CURVE[smaller][0]} of {SEEDS}) on its tiny fleet "
        f"({eps.CURVE_GATEWAYS} gateways; BENCHMARKS.md)"
    )
    assert eps.reason(smaller).startswith(f"epsilon {smaller:g} is not the measured choice")


def test_an_epsilon_that_is_not_the_curves_choice_is_not_called_it() -> None:
    other = max(e for e in CURVE if e < DEMO_EPSILON)
    assert f"not the measured choice for the demo's fleet (epsilon {DEMO_EPSILON:g})" in eps.statement(other, 10)
    assert "was not measured" in eps.statement(3.0, 10)
    settings = replace(privacy_settings(plan()), dp_epsilon={"fedscs-xgb": DEMO_EPSILON, "fedforest": other})
    xgb, forest = epsilon_lines(settings)
    assert xgb.startswith(f"fedscs-xgb's epsilon {DEMO_EPSILON:g} ") and "is the smallest epsilon" in xgb
    assert forest.startswith(f"fedforest's epsilon {other:g} ") and "not the measured choice" in forest
    assert epsilon_lines(privacy_settings(TrainingPlan(["gw-01", "gw-02"], ["fedscs-xgb"], ["PEN"], False))) == []
