"""Bounds on a job's algorithm settings (``config`` of ``POST /api/jobs`` and
``POST /api/schedules``), checked before the algorithm is built and shown in the OpenAPI schema.

The algorithms check what their settings mean (a depth is positive, a fraction lies in (0, 1]);
this module keeps them in sizes a server can run: the settings that multiply the work
(:data:`SETTING_BOUNDS`: rounds, trees, depth, bins, generations, ...) have their own ranges,
every other number lies in ``[-NUMBER_LIMIT, NUMBER_LIMIT]``, a text has at most
``TEXT_LIMIT`` characters, a list at most ``LIST_LIMIT`` items, a configuration at most
``MAX_SETTINGS`` settings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["LIST_LIMIT", "NUMBER_LIMIT", "SETTING_BOUNDS", "TEXT_LIMIT", "Bound", "check_config", "config_schema"]


@dataclass(frozen=True)
class Bound:
    """The range ``[low, high]`` of an integer setting."""

    low: int
    high: int


#: The settings that multiply a job's work, by name (every algorithm uses a name the same way).
SETTING_BOUNDS: dict[str, Bound] = {
    "n_rounds": Bound(1, 10_000),
    "n_trees": Bound(1, 10_000),
    "generations": Bound(1, 100_000),
    "population_size": Bound(1, 100_000),
    "max_depth": Bound(1, 32),
    "n_bins": Bound(2, 4096),
    "summary_size": Bound(1, 100_000),
    "sketch_size": Bound(1, 100_000),
    "top_l": Bound(1, 10_000),
    "dp_features": Bound(1, 10_000),
    "secagg_degree": Bound(1, 10_000),
    "min_crowd": Bound(0, 100_000),
    "n_categories": Bound(0, 100_000),
    "tournament_size": Bound(1, 100_000),
    "cv_folds": Bound(2, 100),
    "min_samples_split": Bound(1, 10**9),
    "min_samples_leaf": Bound(1, 10**9),
}
#: The largest magnitude of any other number in a configuration.
NUMBER_LIMIT = 1e9
TEXT_LIMIT = 200
MAX_SETTINGS = 100
LIST_LIMIT = 10_000


def check_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` if every value lies in its bounds; else a ``ValueError`` naming the first that
    does not (the API answers 422 with it).

    Examples
    --------
    >>> check_config({"n_rounds": 20, "learning_rate": 0.3})
    {'n_rounds': 20, 'learning_rate': 0.3}
    >>> check_config({"n_rounds": 10**12})
    Traceback (most recent call last):
    ValueError: config.n_rounds must be an integer in [1, 10000], got 1000000000000
    """
    if len(config) > MAX_SETTINGS:
        raise ValueError(f"config has {len(config)} settings, at most {MAX_SETTINGS} are allowed")
    for name, value in config.items():
        bound = SETTING_BOUNDS.get(name)
        if bound is not None and value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or not bound.low <= value <= bound.high:
                raise ValueError(
                    f"config.{name} must be an integer in [{bound.low}, {bound.high}], got {_shown(value)}"
                )
        else:
            _check_value(f"config.{name}", value)
    return dict(config)


def _check_value(where: str, value: Any) -> None:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int | float):
        if not (math.isfinite(value) and abs(value) <= NUMBER_LIMIT):
            raise ValueError(
                f"{where} must be a finite number of magnitude at most {NUMBER_LIMIT:.0e}, got {_shown(value)}"
            )
    elif isinstance(value, str):
        if len(value) > TEXT_LIMIT:
            raise ValueError(f"{where} must have at most {TEXT_LIMIT} characters, got {len(value)}")
    elif isinstance(value, list | tuple):
        if len(value) > LIST_LIMIT:
            raise ValueError(f"{where} must have at most {LIST_LIMIT} items, got {len(value)}")
        for k, item in enumerate(value):
            _check_value(f"{where}[{k}]", item)
    elif isinstance(value, Mapping):
        if len(value) > LIST_LIMIT:
            raise ValueError(f"{where} must have at most {LIST_LIMIT} entries, got {len(value)}")
        for key, item in value.items():
            _check_value(f"{where}.{str(key)[:40]}", item)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def config_schema() -> dict[str, Any]:
    """The bounds as JSON Schema, for the OpenAPI document's ``config`` objects.

    Examples
    --------
    >>> config_schema()["properties"]["n_rounds"]
    {'type': 'integer', 'minimum': 1, 'maximum': 10000}
    """
    return {
        "properties": {
            name: {"type": "integer", "minimum": b.low, "maximum": b.high} for name, b in SETTING_BOUNDS.items()
        },
        "maxProperties": MAX_SETTINGS,
        "additionalProperties": {
            "anyOf": [
                {"type": "number", "minimum": -NUMBER_LIMIT, "maximum": NUMBER_LIMIT},
                {"type": "string", "maxLength": TEXT_LIMIT},
                {"type": "array", "maxItems": LIST_LIMIT},
                {"type": "boolean"},
                {"type": "object"},
                {"type": "null"},
            ]
        },
    }
