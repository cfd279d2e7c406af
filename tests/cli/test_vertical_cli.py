"""``wheelfed vertical train``'s options reach the forest's settings."""

from __future__ import annotations

from aggregator.algorithms.vertical_forest import VerticalFederatedForest
from edge_client.cli import build_parser
from aggregator.cli.vertical import training_config
from shared.signing import SigningKey

BASE = "vertical train --parties gw-a,gw-b --label-holder gw-a --model-id vf -o m.vfm --key {key}"


def _config(tmp_path, extra: str) -> VerticalFederatedForest:
    key = tmp_path / "agg.key"
    if not key.exists():
        SigningKey.generate().save(key)
    return training_config(build_parser().parse_args((BASE.format(key=key) + " " + extra).split()))


def test_the_pre_pruning_and_bootstrap_options_reach_the_settings(tmp_path):
    default = _config(tmp_path, "")
    assert (default.min_samples_split, default.min_impurity_decrease, default.bootstrap) == (2, 0.0, True)
    given = _config(
        tmp_path,
        "--min-samples-split 20 --min-impurity-decrease 0.001 --no-bootstrap --trees 3 "
        "--max-depth 4 --min-samples-leaf 2 --max-features 0.5 --task regression",
    )
    assert (given.min_samples_split, given.min_impurity_decrease, given.bootstrap) == (20, 0.001, False)
    assert (given.n_trees, given.max_depth, given.min_samples_leaf, given.max_features, given.task) == (
        3,
        4,
        2,
        0.5,
        "regression",
    )
