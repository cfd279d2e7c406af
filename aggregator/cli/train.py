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
* ``--algorithm fedga-tree`` ends with one tree per gateway (FedGA-Tree): each is written to its
  own file (``-o trees.cbor`` -> ``trees.gw-1.cbor``, ...) and registered as
  ``MODEL_ID.GATEWAY`` for that gateway only, so ``wheelfed model deploy`` signs it for it alone.
* With a server configured (``--server URL`` or ``$WHEELFED_SERVER``; ``server_client.py``) the
  job is submitted to it (``POST /api/jobs``) and followed round by round with the same display;
  the server trains, registers and evaluates the model, ``-o`` downloads it. Ctrl-C asks the
  server to cancel the job (no model is registered: the server keeps no partial model of a
  cancelled job), waits for it to stop and exits 130.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Literal

from aggregator.algorithm_table import ALGORITHM_TABLE, TRAIN_OPTIONS, algorithm_row
from aggregator.cli.models import ModelRef, model_ref
from aggregator.cli.progress import ProgressDisplay, unit_of
from aggregator.cli.server_client import ServerClient, ServerRefused, add_server_options, server_client
from edge_client.cli.arguments import (
    add_subcommand,
    fraction,
    gateway_ids,
    int_at_least,
    model_id,
    non_negative_float,
    non_negative_int,
    output_file,
    positive_float,
    positive_int,
)
from edge_client.cli.connection import add_broker_options, aggregator_transport
from edge_client.cli.errors import CliError, UsageError
from edge_client.cli.model_files import load_model_file, model_file

if TYPE_CHECKING:  # the registry is imported when a model is registered, not to parse arguments
    from types import FrameType

    from aggregator.registry import ModelRecord

    _SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None

#: Defaults of the options that only a local run uses (a server has its own settings).
DEADLINE_S, MIN_FRACTION = 120.0, 0.5
#: Seconds between two looks at a server job's progress.
POLL_S = 0.5


def _training_algorithm(args: argparse.Namespace, feature_set: str, init_model, privacy: dict):
    """The configured algorithm of ``wheelfed train`` (``ValueError`` names a bad option): the
    algorithm table's row says which options set which of its fields."""
    row = algorithm_row(args.algorithm)
    own = {o.dest for o in row.options}
    stray = [dest for dest in TRAIN_OPTIONS if dest not in own and getattr(args, dest) is not None]
    if stray:
        flags = ", ".join(o.flag for o in row.options)
        raise UsageError(f"--{stray[0].replace('_', '-')} does not apply to {row.name} (its options: {flags})")
    if row.personal:
        given = [
            name
            for name, on in (
                ("--init-model", init_model is not None),
                ("--paper-protocol", args.paper_protocol),
                ("--no-dp", args.no_dp),
                ("--dp-epsilon", args.dp_epsilon is not None),
                ("--no-secure-aggregation", args.no_secure_aggregation),
            )
            if on
        ]
        if given:
            raise UsageError(
                f"{given[0]} does not apply to {row.name}: its gateways send fitness scores only, "
                "no sums (its privacy knob is --epsilon)"
            )
        return row.configured(args, feature_set_version=feature_set)
    if not row.continues_from_model() and init_model is not None:
        raise UsageError(f"--init-model continues boosting; it does not apply to {row.name}")
    if args.client_splits and not args.paper_protocol:
        raise UsageError("--client-splits needs per-gateway statistics: add --paper-protocol")
    extra = {"init_model": init_model} if row.continues_from_model() else {}
    return row.configured(
        args,
        feature_set_version=feature_set,
        protocol=row.paper_protocol if args.paper_protocol else _private_protocol(args),
        **extra,
        **privacy,
    )


def _private_protocol(args: argparse.Namespace) -> Literal["histogram"] | None:
    """``"histogram"`` (secure sums without differential privacy) when asked for, else the
    algorithm's default (differential privacy)."""
    return "histogram" if args.no_dp or args.no_secure_aggregation else None


def model_version(text: str) -> ModelRef:
    """``MODEL_ID:vN``: one version (a server job continues from a version it names exactly)."""
    ref = model_ref(text)
    if ref.version is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} names no version: give MODEL_ID:vN (wheelfed model list shows them)"
        )
    return ref


model_version.__name__ = "model version"


class StopSignals:
    """SIGINT (Ctrl-C) and SIGTERM while training: the first asks the job to stop at the next
    round boundary, so the rounds already paid for are saved; the second aborts at once
    (``KeyboardInterrupt``: ``main`` prints one line and exits 130, nothing saved).

    ``received`` is the first signal's number (0: none). Outside the main thread, where Python
    cannot install handlers, signals keep their default effect.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)
    LOCAL = "stopping after the current round and saving the model (Ctrl-C again aborts without saving)"

    def __init__(self, announce: str = LOCAL) -> None:
        self.event = threading.Event()
        self.received = 0
        self.announce = announce
        self._previous: dict[int, _SignalHandler] = {}

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
        print(f"\n{signal.Signals(signum).name}: {self.announce}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class SavedModel:
    """Where a trained model went: the file, and the registry record (with its registry)."""

    path: Path | None
    registry: Path | None = None
    record: ModelRecord | None = None

    @property
    def where(self) -> str:
        places = ([str(self.path)] if self.path else []) + (
            [f"{self.record.label} in {self.registry}"] if self.record is not None else []
        )
        return " and ".join(places)


def _write(path: Path, model) -> None:
    path.write_bytes(model.to_json(indent=1).encode() if path.suffix == ".json" else model.to_cbor())


def gateway_file(output: Path, client: str) -> Path:
    """Where ``-o`` puts one gateway's personal model: ``trees.cbor`` -> ``trees.gw-1.cbor``."""
    return output.with_name(f"{output.stem}.{client}{output.suffix}")


def _save(args: argparse.Namespace, model, name: str) -> SavedModel | dict[str, SavedModel]:
    """Write the model file and register the model (without metrics: evaluation comes after,
    and may fail or be interrupted -- the model must be kept either way).

    A personalised job's ``{gateway: model}`` is saved per gateway: its own file, and its own
    registry entry ``MODEL_ID.GATEWAY`` targeted at that gateway (``register_models``)."""
    personal = isinstance(model, dict)
    paths = {c: gateway_file(args.output, c) for c in model} if personal and args.output else {}
    for client, path in paths.items():
        _write(path, model[client])
    if args.output and not personal:
        _write(args.output, model)
    if not args.registry:
        return {c: SavedModel(paths.get(c)) for c in sorted(model)} if personal else SavedModel(args.output)
    from aggregator.registry import Registry

    with Registry(args.registry) as registry:
        if personal:
            from aggregator.algorithms.fedga_tree import register_models

            records = register_models(registry, args.model_id or name, model)
        else:
            record = registry.add(args.model_id or name, model)
    if personal:
        print(
            f"registered {', '.join(r.label for r in records.values())} in {args.registry}, each for its gateway only",
            flush=True,
        )
        return {c: SavedModel(paths.get(c), args.registry, r) for c, r in records.items()}
    print(f"registered {record.label} in {args.registry}", flush=True)
    return SavedModel(args.output, args.registry, record)


def _where(saved: SavedModel | dict[str, SavedModel]) -> str:
    if isinstance(saved, dict):
        return "; ".join(f"{client}: {one.where}" for client, one in saved.items())
    return saved.where


def _size(model, steps: int) -> str:
    """What a model stopped after ``steps`` steps is, in words."""
    if isinstance(model, dict):
        return f"{len(model)} per-gateway trees from generation {steps}'s population"
    if model.kind == "forest":
        return f"a forest of {model.n_trees} trees cut at depth {steps}"
    return f"a {steps}-round model"


def _interrupted(job, model, saved: SavedModel | dict[str, SavedModel], unit: str, *, evaluation_skipped: bool) -> str:
    """The last line of an interrupted run: what was trained and where it is."""
    stopped = job.stopped
    note = " (not evaluated)" if evaluation_skipped else ""
    if stopped is None:  # the signal came during the last round: nothing was cut
        return f"interrupted: the model is complete and saved to {_where(saved)}{note}"
    return (
        f"interrupted after {stopped.step} of {stopped.total} {unit}: saved {_size(model, stopped.step)} "
        f"to {_where(saved)}{note}"
    )


def _metrics_text(metrics: dict) -> str:
    """``accuracy=0.9167 f1=0.9`` (a metric JSON carried as null -- NaN -- as n/a)."""
    return " ".join(f"{k}={v:.4g}" if isinstance(v, (int, float)) else f"{k}=n/a" for k, v in metrics.items())


def _score(job, model, saved: SavedModel, clients: list[str] | None = None):
    """Federated evaluation of ``model`` on ``clients``' held-out windows; None (after a warning
    naming where the model is) when it cannot be scored."""
    from aggregator.evaluation import NoHeldOutData, evaluate_federated
    from aggregator.jobs import TrainingError
    from aggregator.rounds import QuorumNotReached

    try:
        return evaluate_federated(job, model, split="holdout", clients=clients)
    except NoHeldOutData as exc:
        print(f"warning: not evaluated: {exc}; the model is saved in {saved.where}", file=sys.stderr, flush=True)
    except (TrainingError, QuorumNotReached) as exc:
        print(f"warning: evaluation failed: {exc}; the model is saved in {saved.where}", file=sys.stderr, flush=True)
    return None


def _store_metrics(saved: SavedModel, metrics: dict) -> None:
    if saved.record is not None and saved.registry is not None:  # a record is in a registry
        from aggregator.registry import Registry

        with Registry(saved.registry) as registry:
            registry.set_metrics(saved.record.model_id, saved.record.version, metrics)


def _evaluate(job, model, saved: SavedModel | dict[str, SavedModel]) -> None:
    """Score the saved model on the gateways' held-out windows -- a personalised job's trees
    each on its own gateway's -- and store the metrics with its registry record. A failure is a
    warning: the model is already saved (exit code 0)."""
    if isinstance(saved, dict):  # a personalised job's {gateway: model}, saved per gateway
        for client in sorted(model):
            evaluation = _score(job, model[client], saved[client], [client])
            if evaluation is not None:
                print(f"held-out {client} (its own tree): {_metrics_text(evaluation.metrics)}", flush=True)
                _store_metrics(saved[client], evaluation.metrics)
        return
    evaluation = _score(job, model, saved)
    if evaluation is None:
        return
    print(f"held-out: {_metrics_text(evaluation.metrics)}", flush=True)
    for client, metrics in evaluation.per_client.items():
        print(f"  {client}: {_metrics_text(metrics)}", flush=True)
    for client, why in evaluation.left_out.items():
        print(f"  {client}: not evaluated: {why}", flush=True)
    _store_metrics(saved, evaluation.metrics)


def _summary(model, saved: SavedModel | dict[str, SavedModel], job) -> None:
    """The last lines of a successful run: what was trained, where it went, the job."""
    rejected = job.rejected or "none"
    if not isinstance(saved, dict):  # else a personalised job's {gateway: model}, saved per gateway
        print(
            f"{saved.where}: {model.n_trees} trees, classes {list(model.classes)}, feature set "
            f"{model.feature_set_version}; job {job.job_id}, {job.rounds} protocol rounds, rejected replies "
            f"{rejected}",
            flush=True,
        )
        return
    for client, one in saved.items():
        where = one.where or "not saved"
        print(
            f"{client}: its own tree ({model[client].kind}, feature set {model[client].feature_set_version}) -> "
            f"{where}",
            flush=True,
        )
    deployable = [one.record.label for one in saved.values() if one.record is not None]
    hint = (
        f"; wheelfed model deploy {deployable[0]} --registry {next(iter(saved.values())).registry} deploys "
        f"it to {next(iter(saved))} only"
        if deployable
        else ""
    )
    print(
        f"job {job.job_id}: {len(model)} personal trees, {job.rounds} protocol rounds, rejected replies "
        f"{rejected}{hint}",
        flush=True,
    )


def run(args: argparse.Namespace) -> int:
    client = server_client(args)
    if client is not None:
        return _run_on_server(args, client)
    if args.init_version is not None:
        raise UsageError(
            "--init-version names a version in a server's registry: add --server URL (or continue "
            "from a file with --init-model FILE)"
        )
    for option in SERVER_RULES:
        if getattr(args, option) is not None:
            raise UsageError(
                f"--{option.replace('_', '-')} is a participation rule of a server job: add --server "
                "URL (a local run trains on the gateways it names with --clients, or every one online)"
            )
    from aggregator.fleet import train_on_fleet
    from aggregator.jobs import JobSettings, TrainingError, TrainingFailed
    from aggregator.rounds import QuorumNotReached

    if not (args.output or args.registry):
        raise UsageError("give -o FILE and/or --registry DB so the model is kept somewhere")
    algorithm = _configured(args, args.feature_set or "", load_model_file(args.init_model) if args.init_model else None)
    clients = args.clients
    print(f"training {algorithm.name} on {_who(clients)} via {args.host}:{args.port}", flush=True)
    transport = aggregator_transport(args)
    display = ProgressDisplay(sys.stdout, tty=sys.stdout.isatty())
    settings = JobSettings(deadline_s=args.deadline or DEADLINE_S, min_fraction=args.min_fraction or MIN_FRACTION)
    try:
        with StopSignals() as signals:
            model, job = train_on_fleet(
                algorithm,
                transport,
                clients=clients,
                seed=args.seed,
                settings=settings,
                progress=display,
                stop=signals.event,
                on_feature_set=lambda choice: print("\n".join(choice.describe()), flush=True),
            )
            display.finish()
            saved = _save(args, model, algorithm.name)
            evaluate = args.evaluate and not signals.received
            if evaluate:
                _evaluate(job, model, saved)
            if signals.received:
                line = _interrupted(
                    job, model, saved, unit_of(algorithm.name), evaluation_skipped=args.evaluate and not evaluate
                )
                print(f"wheelfed train: {line}", file=sys.stderr, flush=True)
                return 128 + signals.received
    except TrainingFailed as exc:  # some rounds completed: keep them
        display.finish()
        done = exc.checkpoint.progress
        steps = f"after {done.step} of {done.total} {unit_of(algorithm.name)} completed"
        if exc.checkpoint.model is None:  # the algorithm's steps form no model
            raise CliError(f"{exc}; {steps}: they form no model, nothing saved") from None
        partial = exc.checkpoint.model()
        saved = _save(args, partial, algorithm.name)
        raise CliError(f"{exc}; {steps}: saved {_size(partial, done.step)} to {_where(saved)}") from None
    except (TrainingError, QuorumNotReached) as exc:
        display.finish()
        raise CliError(str(exc)) from None
    finally:
        transport.close()
    _summary(model, saved, job)
    return 0


def _who(clients: list[str] | None) -> str:
    return "the online gateways" if clients is None else ", ".join(clients)


def _configured(args: argparse.Namespace, feature_set: str, init_model):
    """The algorithm the options describe, with the paper-protocol warning; bad values are usage errors."""
    if args.paper_protocol and not args.no_secure_aggregation:
        print(
            "warning: --paper-protocol sends per-window data (atoms) or per-gateway sketches of actual values "
            "to the aggregator; secure aggregation does not apply (see PRIVACY.md)",
            file=sys.stderr,
            flush=True,
        )
    privacy = dict(min_crowd=args.min_crowd, secure_aggregation=not (args.no_secure_aggregation or args.paper_protocol))
    if args.dp_epsilon is not None:
        privacy["dp_epsilon"] = args.dp_epsilon
    if args.dp_delta is not None:
        privacy["dp_delta"] = args.dp_delta
    try:
        return _training_algorithm(args, feature_set, init_model, privacy)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


# -- through a running server ---------------------------------------------------------------------
#: Options of a local run, and why a server job does without them.
LOCAL_ONLY = {
    "registry": "the server registers the model in its own registry (-o FILE also downloads it)",
    "feature_set": "the server trains on the feature set most participants store",
    "init_model": "the server continues from a version in its registry: --init-version MODEL_ID:vN",
    "deadline": "the server's own setting applies (wheelfed server --deadline)",
    "min_fraction": "the server's own setting applies (wheelfed server --min-fraction)",
}
FINAL_STATES = ("completed", "failed", "cancelled")
#: Participation rules a server job takes as they are (the server checks them: a bad one is its 422).
SERVER_RULES = ("min_gateways", "min_labelled", "since", "until")


def job_config(algorithm) -> dict[str, Any]:
    """The algorithm's parameters that differ from its defaults, as the server's ``config``
    (the feature set and the model to continue from travel separately)."""
    config = {}
    for f in dataclasses.fields(algorithm):
        if not f.init or f.name in ("feature_set_version", "init_model"):
            continue
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
        )
        value = getattr(algorithm, f.name)
        if value != default:
            config[f.name] = list(value) if isinstance(value, tuple) else value
    return config


def _server_job(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The configured algorithm (checked here, as a local run checks it) and the job to submit."""
    for option, why in LOCAL_ONLY.items():
        if getattr(args, option) is not None:
            raise UsageError(f"--{option.replace('_', '-')} is for a local run: {why}")
    algorithm = _configured(args, "", None)
    body: dict[str, Any] = {
        "algorithm": args.algorithm,
        "model_id": args.model_id or algorithm.name,
        "config": job_config(algorithm),
        "seed": args.seed,
    }
    if args.clients:
        body["clients"] = args.clients
    if args.init_version is not None:
        body["init_model"] = str(args.init_version)
    body.update({rule: getattr(args, rule) for rule in SERVER_RULES if getattr(args, rule) is not None})
    return algorithm, body


def _follow(
    client: ServerClient, job_id: str, algorithm: str, display: ProgressDisplay, signals: StopSignals
) -> tuple[dict[str, Any], bool]:
    """Show the job's rounds as the server stores them until it ends; on the first signal ask
    the server to cancel it. Returns the final job and whether a cancel was asked for."""
    from aggregator.jobs import StepProgress

    shown, announced, cancelling = 0, False, False
    while True:
        if signals.event.is_set() and not cancelling:
            cancelling = True
            try:
                client.post(f"/api/jobs/{job_id}/cancel", {})
            except ServerRefused as exc:
                if exc.status != 409:  # 409: it ended meanwhile; its state says how
                    raise
        job = client.get(f"/api/jobs/{job_id}")
        if job["feature_set"] and not announced:
            announced = True
            display.finish()
            print(
                f"job {job_id}: feature set {job['feature_set']}: {len(job['participants'])} gateways "
                f"({', '.join(job['participants'])})",
                flush=True,
            )
        for r in job["rounds"]:
            if r["step"] > shown:
                display(
                    StepProgress(
                        job_id,
                        algorithm,
                        r["step"],
                        r["total"],
                        r["selected"],
                        r["answered"],
                        r["metrics"],
                        r["elapsed_s"],
                    )
                )
                shown = r["step"]
        if job["state"] in FINAL_STATES:
            display.finish()
            return job, cancelling
        if cancelling:
            time.sleep(POLL_S)  # a second signal interrupts the sleep (StopSignals raises KeyboardInterrupt)
        else:
            signals.event.wait(POLL_S)


def _server_evaluation(evaluation: dict[str, Any], label: str) -> None:
    """The server's federated evaluation of the job's model, as a local --evaluate prints it."""
    if "metrics" in evaluation:
        print(f"held-out: {_metrics_text(evaluation['metrics'])}", flush=True)
        for gateway, metrics in evaluation.get("per_client", {}).items():
            print(f"  {gateway}: {_metrics_text(metrics)}", flush=True)
        for gateway, why in evaluation.get("left_out", {}).items():
            print(f"  {gateway}: not evaluated: {why}", flush=True)
    else:
        why = evaluation.get("skipped") or evaluation.get("failed") or "the server recorded no evaluation"
        print(f"warning: not evaluated: {why}; the model is registered as {label}", file=sys.stderr, flush=True)


def _run_on_server(args: argparse.Namespace, client: ServerClient) -> int:
    algorithm, body = _server_job(args)
    display = ProgressDisplay(sys.stdout, tty=sys.stdout.isatty())
    announce = "asking the server to cancel the job (Ctrl-C again stops waiting; the job is cancelled either way)"
    with StopSignals(announce) as signals:
        job = client.post("/api/jobs", body)
        job_id = job["job_id"]
        print(
            f"training {algorithm.name} on {_who(args.clients)} via the server {client.url}: job {job_id}", flush=True
        )
        job, cancelling = _follow(client, job_id, algorithm.name, display, signals)
    unit = unit_of(algorithm.name)
    if job["state"] == "failed":
        raise CliError(f"job {job_id} failed on the server: {job['error']}")
    if job["state"] == "cancelled":
        if not cancelling:
            raise CliError(f"job {job_id} was cancelled on the server ({job['error']}); no model was registered")
        print(
            f"wheelfed train: interrupted: job {job_id} cancelled on the server after {job['completed']} of "
            f"{job['total']} {unit}; the server registered no model",
            file=sys.stderr,
            flush=True,
        )
        return 128 + signals.received
    if args.algorithm == "fedga-tree":
        _personal_result(args, client, job, unit)
        return 0
    label = job["result"]
    model_id, _, version = label.rpartition(":v")
    record = client.get(f"/api/models/{model_id}/{version}")
    where = f"{label} on {client.url}"
    if args.output:
        from shared.model import TreeEnsemble

        _write(args.output, TreeEnsemble.from_cbor(client.download(f"/api/models/{model_id}/{version}/download")))
        where = f"{args.output} and {where}"
    _server_evaluation(job["evaluation"], label)
    print(
        f"{where}: {record['n_trees']} trees, classes {record['classes']}, feature set "
        f"{record['feature_set_version']}; job {job_id}, {job['completed']} {unit}, participants "
        f"{', '.join(job['participants'])}",
        flush=True,
    )
    if cancelling:
        print(
            f"wheelfed train: interrupted: job {job_id} had completed before the cancel reached it; {label} is "
            "registered",
            file=sys.stderr,
            flush=True,
        )
        return 128 + signals.received
    return 0


def _personal_result(args: argparse.Namespace, client: ServerClient, job: dict[str, Any], unit: str) -> None:
    """A FedGA-Tree job's trees, one per gateway, as the server registered them
    (``MODEL_ID.GATEWAY``, each deployable to its own gateway only): with ``-o`` each is
    downloaded to its gateway's file (``gateway_file``), as a local run writes them."""
    from shared.model import TreeEnsemble

    evaluation = job["evaluation"]
    for gateway, label in sorted(evaluation.get("models", {}).items()):
        model_id, _, version = label.rpartition(":v")
        where = f"{label} on {client.url}"
        if args.output:
            path = gateway_file(args.output, gateway)
            _write(path, TreeEnsemble.from_cbor(client.download(f"/api/models/{model_id}/{version}/download")))
            where = f"{path} and {where}"
        metrics = evaluation.get("per_client", {}).get(gateway)
        held_out = f"; held-out (its own windows): {_metrics_text(metrics)}" if metrics else ""
        print(f"{gateway}: its own tree -> {where}{held_out}", flush=True)
    for gateway, why in evaluation.get("skipped", {}).items():
        print(f"warning: {gateway}'s tree not evaluated: {why}", file=sys.stderr, flush=True)
    print(
        f"job {job['job_id']}: {job['completed']} {unit}, one tree per gateway, each deployable to its own gateway "
        f"only; participants {', '.join(job['participants'])}",
        flush=True,
    )


def add(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(
        sub,
        "train",
        "train a model on the online gateways over MQTT, or as a job of a wheelfed server (aggregator side)",
        description="Train a model on the online gateways over MQTT (aggregator side).\n\n"
        "The feature set is the one most gateways store (asked of them) unless "
        "--feature-set names one;\ngateways left out are named with their reason. The "
        "model is written (and registered) before\n--evaluate runs. Ctrl-C or SIGTERM "
        "stops at the next round boundary and saves the rounds\ncompleted (exit 130 or "
        "143); a second Ctrl-C aborts at once without saving.\n\n"
        "--algorithm fedga-tree grows one tree per gateway: -o trees.cbor writes "
        "trees.GATEWAY.cbor,\n--registry registers MODEL_ID.GATEWAY, deployable to "
        "that gateway only.\n\n"
        "With --server URL (or $WHEELFED_SERVER) the job runs on that wheelfed server: "
        "this command\nsubmits it, shows its rounds as they complete and prints the "
        "registered version (-o also\ndownloads it); the token comes from "
        "$WHEELFED_TOKEN or --token-file. Ctrl-C asks the server to\ncancel the job "
        "(no model is registered) and exits 130:\n"
        "  WHEELFED_TOKEN=TOKEN wheelfed train --server http://127.0.0.1:8080 "
        "--model-id activity --rounds 10",
        examples=[
            "WHEELFED_MQTT_PASSWORD=SECRET wheelfed train -o model.cbor --rounds 10",
            "wheelfed train --algorithm fedforest --registry reg.db --model-id activity --evaluate",
            "wheelfed train -o more.cbor --init-model model.cbor --clients gw-1,gw-2,gw-3",
            "wheelfed train --algorithm fedga-tree --generations 5 -o trees.cbor --registry reg.db",
        ],
    )
    p.add_argument(
        "--algorithm",
        choices=[row.name for row in ALGORITHM_TABLE],
        default="fedscs-xgb",
        help="what to grow (fedga-tree: one personal tree per gateway)",
    )
    p.add_argument(
        "--clients", type=gateway_ids, help="comma-separated gateway ids, each online (default: every gateway online)"
    )
    p.add_argument(
        "-o", "--output", type=output_file(".json", ".cbor", what="model file"), help="model file: .json or .cbor"
    )
    p.add_argument("--registry", type=Path, help="also register the model (and its held-out metrics) in this registry")
    p.add_argument("--model-id", type=model_id, help="the registered model's name (default: the algorithm's)")
    p.add_argument(
        "--init-version",
        type=model_version,
        metavar="MODEL_ID:vN",
        help="with --server: continue boosting from this version in the server's registry",
    )
    p.add_argument(
        "--min-gateways",
        type=positive_int,
        help="with --server: the job needs at least this many eligible gateways (default: 1)",
    )
    p.add_argument(
        "--min-labelled",
        type=non_negative_int,
        help="with --server: labelled windows each participant needs (default: 0)",
    )
    p.add_argument(
        "--since",
        metavar="TIME",
        help="with --server: train only on windows starting at or after TIME (Unix seconds, or "
        "ISO-8601 with its offset, e.g. 2026-11-01T00:00:00Z)",
    )
    p.add_argument("--until", metavar="TIME", help="with --server: ... and before TIME")
    p.add_argument(
        "--rounds",
        type=positive_int,
        help="fedscs-xgb: boosting rounds (default: 40 with differential privacy, 20 for regression; else 10)",
    )
    p.add_argument("--trees", type=positive_int, help="fedforest: number of trees (default 50)")
    p.add_argument(
        "--max-depth",
        type=positive_int,
        help="tree depth (default: fedscs-xgb 6 with differential privacy, else 4; fedforest 8; "
        "fedga-tree: the deepest a gateway may propose, 15)",
    )
    p.add_argument("--generations", type=non_negative_int, help="fedga-tree: generations (G; default 100)")
    p.add_argument(
        "--population",
        type=int_at_least(2),
        help="fedga-tree: population size P (default: 20 classification, 40 regression)",
    )
    p.add_argument(
        "--epsilon",
        type=positive_float,
        help="fedga-tree: differential privacy of each gateway's sample count (Laplace noise; default 1)",
    )
    p.add_argument(
        "--task",
        choices=("classification", "regression"),
        help="fedga-tree: classification (fitness F1) or regression (MSE) (default: classification)",
    )
    p.add_argument(
        "--bins",
        type=int_at_least(2),
        help="bins / candidates per feature (default: fedscs-xgb 8 with differential privacy, else 256; "
        "fedforest 16 with differential privacy, else 32)",
    )
    p.add_argument("--min-samples-leaf", type=positive_int, help="fedforest: smallest leaf (default 5)")
    p.add_argument(
        "--client-splits", action="store_true", default=None, help="fedforest: also split on the gateway (H)"
    )
    p.add_argument(
        "--evaluate",
        action="store_true",
        help="after saving the model, score it on the gateways' held-out windows (gateways started with "
        "--holdout-fraction); if it cannot be scored a warning says why and the model stays saved",
    )
    p.add_argument(
        "--learning-rate",
        type=positive_float,
        help="fedscs-xgb: shrinkage (eta; default 0.3 with differential privacy, 0.5 for regression; else 0.2)",
    )
    p.add_argument("--reg-lambda", type=non_negative_float, help="fedscs-xgb: L2 on leaf weights (default 1)")
    p.add_argument(
        "--gamma",
        type=non_negative_float,
        help="fedscs-xgb: minimum loss change to split: xgboost's gamma/min_split_loss (Eq. 1's penalty is "
        "half; default 0.1)",
    )
    p.add_argument(
        "--multi-strategy",
        choices=("one_output_per_tree", "multi_output_tree"),
        help="fedscs-xgb with 3+ classes: one tree per class per round (xgboost's default without "
        "differential privacy), or one tree with a leaf vector per round (the paper's; the private "
        "default)",
    )
    p.add_argument(
        "--sketch",
        choices=("summary", "ddsketch"),
        help="fedscs-xgb with --paper-protocol: the per-gateway sketch (default summary)",
    )
    p.add_argument(
        "--paper-protocol",
        action="store_true",
        help="the papers' protocols (fedscs-xgb atoms, fedforest per-gateway sketches), for reproduction: "
        "they reveal per-window data to the aggregator (PRIVACY.md)",
    )
    p.add_argument(
        "--no-secure-aggregation",
        action="store_true",
        help="send the histogram protocol's sums in the clear (the aggregator then sees each gateway's)",
    )
    p.add_argument(
        "--min-crowd",
        type=non_negative_int,
        default=5,
        help="no split leaves fewer windows than this fleet-wide (histogram protocol)",
    )
    p.add_argument(
        "--dp-epsilon",
        type=positive_float,
        help="differential privacy budget per window of this training (default: the algorithm's, "
        "see PRIVACY.md); the gateways add the noise under secure aggregation",
    )
    p.add_argument("--dp-delta", type=positive_float, help="differential privacy delta (default 1e-6)")
    p.add_argument(
        "--no-dp",
        action="store_true",
        help="secure sums without differential privacy (research): single-window sums reveal windows",
    )
    p.add_argument("--client-fraction", type=fraction, help="share of gateways sampled per round (default 1: all)")
    p.add_argument(
        "--feature-set",
        help="feature set version to train on (default: the one most online gateways store, asked of them)",
    )
    p.add_argument("--init-model", type=model_file, help="continue boosting from this model file (periodic retraining)")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument(
        "--deadline",
        type=positive_float,
        help=f"seconds a round waits for replies (default: {DEADLINE_S:g}; a server uses its own)",
    )
    p.add_argument(
        "--min-fraction",
        type=fraction,
        help=f"share of selected gateways a round needs (default: {MIN_FRACTION:g}; a server uses its own)",
    )
    add_broker_options(p, username_help="broker user name (default: aggregator); password from $WHEELFED_MQTT_PASSWORD")
    add_server_options(p)
    p.set_defaults(func=run)
