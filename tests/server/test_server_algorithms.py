"""The algorithm table (``aggregator.algorithm_table``) is the one place a new algorithm is named
for ``wheelfed server``: the API offers exactly its names, schedules exactly the ones that end
with one model for the fleet, and every row builds its configuration, whose ``name`` is the row's
wire spelling."""

from __future__ import annotations

import typing

import pytest

import aggregator.algorithms as algorithms
from aggregator.algorithm_table import ALGORITHM_TABLE, algorithm_row
from aggregator.server.api import JobIn, ScheduleIn
from aggregator.server.service import ALGORITHMS, FLEET_ALGORITHMS, build_algorithm


@pytest.mark.parametrize("row", ALGORITHM_TABLE, ids=lambda a: a.name)
def test_every_row_builds_its_configuration_class(row) -> None:
    built = build_algorithm(row.name, {}, feature_set="fs-1")
    assert type(built) is getattr(algorithms, row.config_class)
    assert built.feature_set_version == "fs-1"
    assert built.name == row.wire and algorithm_row(row.wire) is row
    assert row.total_steps(built) >= 1


def test_steps_and_what_continues() -> None:
    steps = {
        r.name: r.total_steps(build_algorithm(r.name, {"max_depth": 3} if r.name == "fedforest" else {}))
        for r in ALGORITHM_TABLE
    }
    assert steps["fedforest"] == 4  # levels 0..3
    assert steps["fedscs-xgb"] == build_algorithm("fedscs-xgb", {}).n_rounds
    assert [r.name for r in ALGORITHM_TABLE if r.continues_from_model()] == ["fedscs-xgb"]
    assert [r.name for r in ALGORITHM_TABLE if r.resumes_itself()] == ["fedforest"]


def test_the_api_offers_exactly_the_table() -> None:
    assert JobIn.model_json_schema()["properties"]["algorithm"]["enum"] == list(ALGORITHMS)
    assert ScheduleIn.model_json_schema()["properties"]["algorithm"]["enum"] == list(FLEET_ALGORITHMS)
    assert ALGORITHMS == ("fedscs-xgb", "fedforest", "fedga-tree")
    assert FLEET_ALGORITHMS == ("fedscs-xgb", "fedforest")  # FedGA-Tree ends with one tree per gateway


def test_an_unknown_algorithm_is_one_line_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="algorithm must be one of fedscs-xgb, fedforest, fedga-tree, got 'xgb'"):
        build_algorithm("xgb", {})


@pytest.mark.parametrize("row", ALGORITHM_TABLE, ids=lambda r: r.name)
def test_every_train_option_of_a_row_sets_a_field_of_its_configuration(row) -> None:
    import dataclasses

    fields = {f.name for f in dataclasses.fields(row.config_type())}
    assert row.options and {o.field for o in row.options} <= fields
    if row.paper_protocol is not None:
        protocols = typing.get_args(typing.get_args(typing.get_type_hints(row.config_type())["protocol"])[0])
        assert row.paper_protocol in protocols


def test_wheelfed_train_reads_the_table() -> None:
    """Each row's options reach its configuration (given ones as given, the row's defaults
    otherwise), and an option of another row is one line naming the row's own."""
    from aggregator.cli import train
    from edge_client.cli.errors import UsageError

    parser = __import__("argparse").ArgumentParser()
    train.add(parser.add_subparsers())
    base = ["train", "-o", "m.cbor"]
    forest = train._configured(parser.parse_args([*base, "--algorithm", "fedforest", "--trees", "7"]), "", None)
    assert (forest.n_trees, forest.min_samples_leaf, forest.max_depth) == (7, 5, 8)
    tree = train._configured(parser.parse_args([*base, "--algorithm", "fedga-tree", "--max-depth", "4"]), "", None)
    assert (tree.d_max, tree.generations, tree.epsilon) == (4, 100, 1.0)
    xgb = train._configured(parser.parse_args([*base, "--gamma", "0.5", "--rounds", "3"]), "", None)
    assert (xgb.gamma, xgb.n_rounds, xgb.reg_lambda) == (0.5, 3, 1.0)
    with pytest.raises(UsageError, match=r"--trees does not apply to fedscs-xgb \(its options: --rounds, "):
        train._configured(parser.parse_args([*base, "--trees", "7"]), "", None)
    with pytest.raises(UsageError, match="--multi-strategy does not apply to fedforest"):
        train._configured(
            parser.parse_args([*base, "--algorithm", "fedforest", "--multi-strategy", "multi_output_tree"]), "", None
        )
