"""``wheelfed train``: a training job over the online gateways (aggregator side).

What an operator can rely on:

* The feature set is asked of the fleet, not typed: without ``--feature-set`` the job trains on
  the version most gateways store, prints it and names every gateway left out and why; a
  ``--feature-set`` no gateway stores is one line listing the versions the fleet has.
* A model is never lost: the file is written and the model registered *before* evaluation.
  ``--evaluate`` with no held-out windows anywhere (gateways hold none unless started with
  ``--holdout-fraction``) is a warning naming the saved model, and the exit code stays 0: the
  training the command was run for succeeded.
* Ctrl-C or SIGTERM stops at the next round boundary and saves the rounds completed (a model
  of fewer boosting rounds; a forest cut at its last completed level), says so, and exits
  128 + the signal (130 for Ctrl-C, 143 for SIGTERM): scripts see that the run was cut short,
  the model is there. A second signal aborts at once without saving (exit 130).
* ``--clients`` naming a gateway that is not online fails within the presence wait (2 s).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edge_client.cli.arguments import (add_subcommand, fraction, gateway_ids, int_at_least, model_id,
                                       non_negative_float, non_negative_int, output_file, positive_float, positive_int)
from edge_client.cli.connection import add_broker_options, aggregator_transport
from edge_client.cli.errors import CliError, UsageError
from edge_client.cli.model_files import load_model_file, model_file
from edge_client.cli.progress import ProgressDisplay, unit_of

if TYPE_CHECKING:  # the registry is imported when a model is registered, not to parse arguments
    from aggregator.registry import ModelRecord


def _training_algorithm(args: argparse.Namespace, feature_set: str, init_model, privacy: dict):
    """The configured algorithm of ``wheelfed train`` (``ValueError`` names a bad option)."""
    from aggregator.algorithms import FedForest, FedSCSXGB

    if args.algorithm == "fedforest":
        if init_model is not None:
            raise UsageError("--init-model continues boosting; it does not apply to fedforest")
        if args.dp_noise_multiplier is not None:
            raise UsageError("--dp-noise-multiplier is implemented for fedscs-xgb only")
        if args.client_splits and not args.paper_protocol:
            raise UsageError("--client-splits needs per-gateway statistics: add --paper-protocol")
        if args.multi_strategy != "one_output_per_tree":
            raise UsageError("--multi-strategy is a fedscs-xgb option: a forest's leaves already hold every class")
        return FedForest(n_trees=args.trees, max_depth=args.max_depth or 8, n_bins=args.bins or 32,
                         min_samples_leaf=args.min_samples_leaf, client_splits=args.client_splits,
                         client_fraction=args.client_fraction, feature_set_version=feature_set,
                         protocol="sketches" if args.paper_protocol else "histogram", **privacy)
    return FedSCSXGB(n_rounds=args.rounds, max_depth=args.max_depth or 4, n_bins=args.bins or 256,
                     learning_rate=args.learning_rate, reg_lambda=args.reg_lambda, gamma=args.gamma,
                     sketch=args.sketch, client_fraction=args.client_fraction,
                     feature_set_version=feature_set, init_model=init_model,
                     protocol="atoms" if args.paper_protocol else "histogram",
                     dp_noise_multiplier=args.dp_noise_multiplier, multi_strategy=args.multi_strategy,
                     **privacy)


class StopSignals:
    """SIGINT (Ctrl-C) and SIGTERM while training: the first asks the job to stop at the next
    round boundary, so the rounds already paid for are saved; the second aborts at once
    (``KeyboardInterrupt``: ``main`` prints one line and exits 130, nothing saved).

    ``received`` is the first signal's number (0: none). Outside the main thread, where Python
    cannot install handlers, signals keep their default effect.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.event = threading.Event()
        self.received = 0
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum: int, _frame: object) -> None:
        if self.event.is_set():
            raise KeyboardInterrupt
        self.received = signum
        self.event.set()
        print(f"\n{signal.Signals(signum).name}: stopping after the current round and saving the model "
              "(Ctrl-C again aborts without saving)", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class SavedModel:
    """Where a trained model went: the file, and the registry record (with its registry)."""

    path: Path | None
    registry: Path | None = None
    record: ModelRecord | None = None

    @property
    def where(self) -> str:
        places = ([str(self.path)] if self.path else []) + (
            [f"{self.record.label} in {self.registry}"] if self.record is not None else [])
        return " and ".join(places)


def _save(args: argparse.Namespace, model, name: str) -> SavedModel:
    """Write the model file and register the model (without metrics: evaluation comes after,
    and may fail or be interrupted -- the model must be kept either way)."""
    if args.output:
        data = model.to_json(indent=1).encode() if args.output.suffix == ".json" else model.to_cbor()
        args.output.write_bytes(data)
    if not args.registry:
        return SavedModel(args.output)
    from aggregator.registry import Registry

    with Registry(args.registry) as registry:
        record = registry.add(args.model_id or name, model)
    print(f"registered {record.label} in {args.registry}", flush=True)
    return SavedModel(args.output, args.registry, record)


def _size(model, steps: int) -> str:
    """What a model stopped after ``steps`` steps is, in words."""
    if model.kind == "forest":
        return f"a forest of {model.n_trees} trees cut at depth {steps}"
    return f"a {steps}-round model"


def _interrupted(job, model, saved: SavedModel, unit: str, *, evaluation_skipped: bool) -> str:
    """The last line of an interrupted run: what was trained and where it is."""
    stopped = job.stopped
    note = " (not evaluated)" if evaluation_skipped else ""
    if stopped is None:  # the signal came during the last round: nothing was cut
        return f"interrupted: the model is complete and saved to {saved.where}{note}"
    return (f"interrupted after {stopped.step} of {stopped.total} {unit}: saved {_size(model, stopped.step)} "
            f"to {saved.where}{note}")


def _evaluate(job, model, saved: SavedModel) -> None:
    """Score the saved model on the gateways' held-out windows; store the metrics with its
    registry record. A failure is a warning: the model is already saved (exit code 0)."""
    from aggregator.evaluation import NoHeldOutData, evaluate_federated
    from aggregator.jobs import TrainingError
    from aggregator.rounds import QuorumNotReached

    try:
        evaluation = evaluate_federated(job, model, split="holdout")
    except NoHeldOutData as exc:
        print(f"warning: not evaluated: {exc}; the model is saved in {saved.where}", file=sys.stderr, flush=True)
        return
    except (TrainingError, QuorumNotReached) as exc:
        print(f"warning: evaluation failed: {exc}; the model is saved in {saved.where}", file=sys.stderr, flush=True)
        return
    print("held-out: " + " ".join(f"{k}={v:.4g}" for k, v in evaluation.metrics.items()), flush=True)
    for client, metrics in evaluation.per_client.items():
        print(f"  {client}: " + " ".join(f"{k}={v:.4g}" for k, v in metrics.items()), flush=True)
    for client, why in evaluation.left_out.items():
        print(f"  {client}: not evaluated: {why}", flush=True)
    if saved.record is not None:
        from aggregator.registry import Registry

        with Registry(saved.registry) as registry:
            registry.set_metrics(saved.record.model_id, saved.record.version, evaluation.metrics)


def run(args: argparse.Namespace) -> int:
    from aggregator.fleet import train_on_fleet
    from aggregator.jobs import JobSettings, TrainingError, TrainingFailed
    from aggregator.rounds import QuorumNotReached

    if not (args.output or args.registry):
        raise UsageError("give -o FILE and/or --registry DB so the model is kept somewhere")
    init_model = load_model_file(args.init_model) if args.init_model else None
    if args.paper_protocol and not args.no_secure_aggregation:
        print("warning: --paper-protocol sends per-window data (atoms) or per-gateway sketches of actual values "
              "to the aggregator; secure aggregation does not apply (see PRIVACY.md)", file=sys.stderr, flush=True)
    privacy = dict(min_crowd=args.min_crowd,
                   secure_aggregation=not (args.no_secure_aggregation or args.paper_protocol))
    try:
        algorithm = _training_algorithm(args, args.feature_set or "", init_model, privacy)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    clients = args.clients
    print(f"training {algorithm.name} on {'the online gateways' if clients is None else ', '.join(clients)} "
          f"via {args.host}:{args.port}", flush=True)
    transport = aggregator_transport(args)
    display = ProgressDisplay(sys.stdout, tty=sys.stdout.isatty())
    try:
        with StopSignals() as signals:
            model, job = train_on_fleet(algorithm, transport, clients=clients, seed=args.seed,
                                        settings=JobSettings(deadline_s=args.deadline, min_fraction=args.min_fraction),
                                        progress=display, stop=signals.event,
                                        on_feature_set=lambda choice: print("\n".join(choice.describe()), flush=True))
            display.finish()
            saved = _save(args, model, algorithm.name)
            evaluate = args.evaluate and not signals.received
            if evaluate:
                _evaluate(job, model, saved)
            if signals.received:
                line = _interrupted(job, model, saved, unit_of(algorithm.name),
                                    evaluation_skipped=args.evaluate and not evaluate)
                print(f"wheelfed train: {line}", file=sys.stderr, flush=True)
                return 128 + signals.received
    except TrainingFailed as exc:  # some rounds completed: keep them
        display.finish()
        done = exc.checkpoint.progress
        saved = _save(args, exc.checkpoint.model(), algorithm.name)
        raise CliError(f"{exc}; after {done.step} of {done.total} {unit_of(algorithm.name)} completed: saved "
                       f"{_size(exc.checkpoint.model(), done.step)} to {saved.where}") from None
    except (TrainingError, QuorumNotReached) as exc:
        display.finish()
        raise CliError(str(exc)) from None
    finally:
        transport.close()
    print(f"{saved.where}: {model.n_trees} trees, classes {list(model.classes)}, feature set "
          f"{model.feature_set_version}; job {job.job_id}, {job.rounds} protocol rounds, rejected replies "
          f"{job.rejected or 'none'}", flush=True)
    return 0


def add(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, "train", "train a model on the online gateways over MQTT (aggregator side)",
                       description="Train a model on the online gateways over MQTT (aggregator side).\n\n"
                                   "The feature set is the one most gateways store (asked of them) unless "
                                   "--feature-set names one;\ngateways left out are named with their reason. The "
                                   "model is written (and registered) before\n--evaluate runs. Ctrl-C or SIGTERM "
                                   "stops at the next round boundary and saves the rounds\ncompleted (exit 130 or "
                                   "143); a second Ctrl-C aborts at once without saving.",
                       examples=["WHEELFED_MQTT_PASSWORD=SECRET wheelfed train -o model.cbor --rounds 10 --bins 256",
                                 "wheelfed train --algorithm fedforest --registry reg.db --model-id activity "
                                 "--evaluate",
                                 "wheelfed train -o more.cbor --init-model model.cbor --clients gw-1,gw-2,gw-3"])
    p.add_argument("--algorithm", choices=("fedscs-xgb", "fedforest"), default="fedscs-xgb", help="what to grow")
    p.add_argument("--clients", type=gateway_ids,
                   help="comma-separated gateway ids, each online (default: every gateway online)")
    p.add_argument("-o", "--output", type=output_file(".json", ".cbor", what="model file"),
                   help="model file: .json or .cbor")
    p.add_argument("--registry", type=Path, help="also register the model (and its held-out metrics) in this registry")
    p.add_argument("--model-id", type=model_id, help="the registered model's name (default: the algorithm's)")
    p.add_argument("--rounds", type=positive_int, default=10, help="fedscs-xgb: boosting rounds")
    p.add_argument("--trees", type=positive_int, default=50, help="fedforest: number of trees")
    p.add_argument("--max-depth", type=positive_int, help="tree depth (default: 4 fedscs-xgb, 8 fedforest)")
    p.add_argument("--bins", type=int_at_least(2),
                   help="bins / candidates per feature (default: 256 fedscs-xgb, 32 fedforest)")
    p.add_argument("--min-samples-leaf", type=positive_int, default=5, help="fedforest: smallest leaf")
    p.add_argument("--client-splits", action="store_true", help="fedforest: also split on the gateway (H)")
    p.add_argument("--evaluate", action="store_true",
                   help="after saving the model, score it on the gateways' held-out windows (gateways started with "
                        "--holdout-fraction); if it cannot be scored a warning says why and the model stays saved")
    p.add_argument("--learning-rate", type=positive_float, default=0.2, help="fedscs-xgb: shrinkage (eta)")
    p.add_argument("--reg-lambda", type=non_negative_float, default=1.0, help="fedscs-xgb: L2 on leaf weights")
    p.add_argument("--gamma", type=non_negative_float, default=0.1,
                   help="minimum loss change to split: xgboost's gamma/min_split_loss (Eq. 1's penalty is half)")
    p.add_argument("--multi-strategy", choices=("one_output_per_tree", "multi_output_tree"),
                   default="one_output_per_tree",
                   help="fedscs-xgb with 3+ classes: one tree per class per round (xgboost's default), or one "
                        "tree with a leaf vector per round (the paper's; fewer bytes per round)")
    p.add_argument("--sketch", choices=("summary", "ddsketch"), default="summary",
                   help="fedscs-xgb with --paper-protocol: the per-gateway sketch")
    p.add_argument("--paper-protocol", action="store_true",
                   help="the papers' protocols (fedscs-xgb atoms, fedforest per-gateway sketches), for reproduction: "
                        "they reveal per-window data to the aggregator (PRIVACY.md)")
    p.add_argument("--no-secure-aggregation", action="store_true",
                   help="send the histogram protocol's sums in the clear (the aggregator then sees each gateway's)")
    p.add_argument("--min-crowd", type=non_negative_int, default=5,
                   help="no split leaves fewer windows than this fleet-wide (histogram protocol)")
    p.add_argument("--dp-noise-multiplier", type=positive_float,
                   help="fedscs-xgb: differential privacy, Gaussian noise of this many times each sum's "
                        "sensitivity (epsilon reported; off by default)")
    p.add_argument("--client-fraction", type=fraction, default=1.0, help="share of gateways sampled per round")
    p.add_argument("--feature-set", help="feature set version to train on (default: the one most online gateways "
                                         "store, asked of them)")
    p.add_argument("--init-model", type=model_file, help="continue boosting from this model file (periodic retraining)")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--deadline", type=positive_float, default=120.0, help="seconds a round waits for replies")
    p.add_argument("--min-fraction", type=fraction, default=0.5, help="share of selected gateways a round needs")
    add_broker_options(p, username_help="broker user name (default: aggregator); password from $WHEELFED_MQTT_PASSWORD")
    p.set_defaults(func=run)
