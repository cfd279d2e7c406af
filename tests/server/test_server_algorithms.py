"""The server's table of algorithms (``aggregator.server.service.SERVER_ALGORITHMS``) is the one
place a new algorithm is named for ``wheelfed server``: the API offers exactly its names, schedules
exactly the ones that end with one model for the fleet, and every entry builds its configuration."""

from __future__ import annotations

import pytest

import aggregator.algorithms as algorithms
from aggregator.server.api import JobIn, ScheduleIn
from aggregator.server.service import ALGORITHMS, FLEET_ALGORITHMS, SERVER_ALGORITHMS, build_algorithm


@pytest.mark.parametrize("entry", SERVER_ALGORITHMS, ids=lambda a: a.name)
def test_every_entry_builds_its_configuration_class(entry) -> None:
    built = build_algorithm(entry.name, {}, feature_set="fs-1")
    assert type(built) is getattr(algorithms, entry.config_class)
    assert built.feature_set_version == "fs-1"


def test_the_api_offers_exactly_the_table() -> None:
    assert JobIn.model_json_schema()["properties"]["algorithm"]["enum"] == list(ALGORITHMS)
    assert ScheduleIn.model_json_schema()["properties"]["algorithm"]["enum"] == list(FLEET_ALGORITHMS)
    assert ALGORITHMS == ("fedscs-xgb", "fedforest", "fedga-tree")
    assert FLEET_ALGORITHMS == ("fedscs-xgb", "fedforest")  # FedGA-Tree ends with one tree per gateway


def test_an_unknown_algorithm_is_one_line_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="algorithm must be one of fedscs-xgb, fedforest, fedga-tree, got 'xgb'"):
        build_algorithm("xgb", {})
