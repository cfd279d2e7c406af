"""The demo's training plan as the server takes it (``aggregator.demo.training``): the configs it
sends through the API are ones the server's own ``build_algorithm`` accepts, with the privacy
settings the summary reports."""

from __future__ import annotations

import dataclasses

from aggregator.demo.training import XGB_BINS, TrainingPlan
from aggregator.server.service import build_algorithm


def plan(secure: bool = True) -> TrainingPlan:
    return TrainingPlan(["gw-01", "gw-02", "gw-03"], ["fedscs-xgb", "fedforest"], ["PEN", "ROW"], secure,
                        rounds=10, retrain_rounds=5, trees=30)


def test_the_server_builds_every_config_the_demo_sends() -> None:
    p = plan()
    xgb = build_algorithm("fedscs-xgb", p.config("fedscs-xgb"))
    assert (xgb.n_rounds, xgb.n_bins, list(xgb.classes)) == (10, XGB_BINS, ["PEN", "ROW"])
    assert build_algorithm("fedscs-xgb", p.config("fedscs-xgb", continuing=True)).n_rounds == 5
    forest = build_algorithm("fedforest", p.config("fedforest"))
    assert (forest.n_trees, forest.max_depth, forest.secure_aggregation) == (30, 8, True)


def test_the_local_only_baseline_is_the_fleets_forest_for_one_gateway_in_the_clear() -> None:
    p = plan()
    local = build_algorithm("fedforest", p.local_config())
    fleet = build_algorithm("fedforest", p.config("fedforest"))
    assert not local.secure_aggregation and not local.client_splits
    differing = {f.name for f in dataclasses.fields(local) if getattr(local, f.name) != getattr(fleet, f.name)}
    assert differing == {"secure_aggregation"}  # client_splits is off in both (as in LocalLearning)


def test_privacy_settings_as_the_server_resolves_them() -> None:
    on = build_algorithm("fedscs-xgb", plan(True).config("fedscs-xgb"))
    assert (on.protocol, bool(on.secure_aggregation), on.min_crowd) == ("histogram", True, 5)
    assert not build_algorithm("fedscs-xgb", plan(False).config("fedscs-xgb")).secure_aggregation
