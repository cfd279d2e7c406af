"""The aggregator's one table of trainable algorithms: a row per algorithm, read by the server's API
and jobs, the CLI's choices and progress display, and the load test.

A row names the algorithm as users spell it (``fedscs-xgb``: API, CLI, dashboard, demo) and as the
wire and the model metadata spell it (``fedscs_xgb``), its configuration class in
``aggregator.algorithms`` (by name: that package loads only when a job is built), what one step of
its progress is, whether a job ends with one model per gateway, and which ``wheelfed train``
options set which of its fields. Adding an algorithm means its message module, client half,
server half -- and one row here. The gateway side has its own list of
client halves (``edge_client.algorithms.CLIENT_HALVES``): it never imports the aggregator.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

__all__ = ["ALGORITHM_TABLE", "TRAIN_OPTIONS", "AlgorithmRow", "TrainOption", "algorithm_row", "user_name"]


@dataclass(frozen=True)
class TrainOption:
    """A ``wheelfed train`` option (``dest``: argparse's name, ``--max-depth`` is ``max_depth``)
    that sets the configuration field ``field``; ``default`` when the option is not given (None:
    the configuration's own default)."""

    dest: str
    field: str
    default: Any = None

    @property
    def flag(self) -> str:
        return "--" + self.dest.replace("_", "-")


@dataclass(frozen=True)
class AlgorithmRow:
    """One trainable algorithm.

    ``name``: as users spell it; ``wire``: as messages and model metadata spell it (the
    configuration class's ``name``); ``config_class``: its class in ``aggregator.algorithms``;
    ``step_unit``: what one reported step is ("4/10 boosting rounds"); ``steps_from``: the
    configuration field that gives the number of steps, plus ``extra_steps`` (a forest reports
    ``max_depth + 1`` levels, the root's to the leaves'); ``personal``: a job ends with one model per gateway
    (``{client: model}``, registered as MODEL_ID.GATEWAY; no schedule retrains it);
    ``options``: the ``wheelfed train`` options that set its fields (its privacy and protocol
    options are the CLI's own); ``paper_protocol``: its ``protocol`` under ``--paper-protocol``
    (the papers' own, for reproduction).
    """

    name: str
    wire: str
    config_class: str
    step_unit: str
    steps_from: str
    personal: bool = False
    extra_steps: int = 0
    options: tuple[TrainOption, ...] = ()
    paper_protocol: str | None = None

    def config_type(self) -> type:
        """The configuration class (imports ``aggregator.algorithms``)."""
        from . import algorithms

        return getattr(algorithms, self.config_class)

    def resumes_itself(self) -> bool:
        """Whether a job resumes from a state of the algorithm's own (``resume_state``: the bytes it
        reported with its last step), rather than from the model of its completed rounds."""
        return "resume_state" in {f.name for f in fields(self.config_type())}

    def continues_from_model(self) -> bool:
        """Whether a job can continue training a registered model (``init_model``: boosting)."""
        return "init_model" in {f.name for f in fields(self.config_type())}

    def total_steps(self, config: Any) -> int:
        """The steps a job of the configured algorithm reports."""
        value = int(getattr(config, self.steps_from) or 0)
        return value + self.extra_steps if value else 0

    def configured(self, given: Any, **fields: Any) -> Any:
        """The configuration from ``wheelfed train``'s parsed options ``given`` (an option not
        given takes the row's default, else the configuration's) plus ``fields``."""
        values = {o.field: getattr(given, o.dest) for o in self.options if getattr(given, o.dest) is not None}
        defaults = {o.field: o.default for o in self.options if o.default is not None and o.field not in values}
        return self.config_type()(**defaults, **values, **fields)


#: Every algorithm ``wheelfed train`` and ``wheelfed server`` can train, one row each.
ALGORITHM_TABLE: tuple[AlgorithmRow, ...] = (
    AlgorithmRow(
        "fedscs-xgb",
        "fedscs_xgb",
        "FedSCSXGB",
        "boosting rounds",
        "n_rounds",
        options=(
            TrainOption("rounds", "n_rounds"),
            TrainOption("max_depth", "max_depth"),
            TrainOption("bins", "n_bins"),
            TrainOption("learning_rate", "learning_rate"),
            TrainOption("reg_lambda", "reg_lambda"),
            TrainOption("gamma", "gamma"),
            TrainOption("sketch", "sketch"),
            TrainOption("multi_strategy", "multi_strategy"),
            TrainOption("client_fraction", "client_fraction"),
        ),
        paper_protocol="atoms",
    ),
    AlgorithmRow(
        "fedforest",
        "fedforest",
        "FedForest",
        "levels",
        "max_depth",
        extra_steps=1,
        options=(
            TrainOption("trees", "n_trees"),
            TrainOption("max_depth", "max_depth"),
            TrainOption("bins", "n_bins"),
            TrainOption("min_samples_leaf", "min_samples_leaf", 5),
            TrainOption("client_splits", "client_splits"),
            TrainOption("client_fraction", "client_fraction"),
        ),
        paper_protocol="sketches",
    ),
    AlgorithmRow(
        "fedga-tree",
        "fedga_tree",
        "FedGATree",
        "generations",
        "generations",
        personal=True,
        options=(
            TrainOption("task", "task"),
            TrainOption("population", "population_size"),
            TrainOption("generations", "generations"),
            TrainOption("epsilon", "epsilon"),
            TrainOption("max_depth", "d_max"),
            TrainOption("client_fraction", "active_fraction"),
        ),
    ),
)

#: Every option some row's ``options`` list, by ``dest``.
TRAIN_OPTIONS: tuple[str, ...] = tuple(dict.fromkeys(o.dest for row in ALGORITHM_TABLE for o in row.options))


def algorithm_row(name: str) -> AlgorithmRow:
    """The row of ``name`` in either spelling; a ``ValueError`` names the choices.

    Examples
    --------
    >>> algorithm_row("fedscs_xgb").name, algorithm_row("fedga-tree").step_unit
    ('fedscs-xgb', 'generations')
    >>> algorithm_row("xgb")
    Traceback (most recent call last):
    ...
    ValueError: algorithm must be one of fedscs-xgb, fedforest, fedga-tree, got 'xgb'
    """
    for row in ALGORITHM_TABLE:
        if name in (row.name, row.wire):
            return row
    raise ValueError(f"algorithm must be one of {', '.join(r.name for r in ALGORITHM_TABLE)}, got {name!r}")


def user_name(name: str) -> str:
    """An algorithm's name as users see it, from either spelling (a name outside the table, such
    as the vertical forest's, with the same hyphens for underscores).

    Examples
    --------
    >>> user_name("fedscs_xgb"), user_name("fedforest"), user_name("vertical_forest")
    ('fedscs-xgb', 'fedforest', 'vertical-forest')
    """
    try:
        return algorithm_row(name).name
    except ValueError:
        return name.replace("_", "-")
