"""``wheelfed vertical``: the vertical Federated Forest over one person's gateways (aggregator side).

The gateways of one person hold different sensors' features of the same windows, so
``wheelfed train``'s survey of a fleet-wide feature set does not apply: the parties are named,
with the one whose windows are labelled.

* ``keygen`` writes the secret the person's gateways share (``wheelfed gateway
  --party-key-file``); the aggregator never needs it.
* ``train`` trains over the named parties, then signs the model's manifest with the aggregator's
  key and has every party keep its partial trees (signed, persistent: a restarted gateway reloads
  them); the master's part -- trees without thresholds, the signed manifest -- goes to ``-o``.
* ``predict`` runs live prediction with that file: every ``--every`` seconds (once without),
  the parties align the windows they stored since the last run, route them through their
  partial trees in one round, and every party stores the prediction.

A party that does not answer, refuses the deployment or lacks the model is one line naming it.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from typing import TYPE_CHECKING

from aggregator.cli.models import DEFAULT_KEY, signing_key
from edge_client.cli.arguments import (
    add_subcommand,
    existing_file,
    gateway_id,
    gateway_ids,
    int_at_least,
    model_id,
    non_negative_float,
    output_file,
    positive_float,
    positive_int,
)
from edge_client.cli.connection import add_broker_options, aggregator_transport
from edge_client.cli.errors import CliError, UsageError

if TYPE_CHECKING:
    from aggregator.algorithms.vertical_forest import VerticalFederatedForest

MODEL_SUFFIX = ".vfm"


def max_features(text: str) -> str | int | float:
    """``sqrt``/``log2``, a count (``3``) or a fraction (``0.5``), as scikit-learn takes them."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _keygen(args: argparse.Namespace) -> int:
    from shared.vertical_party_key import new_party_key

    if args.output.exists() and not args.force:
        raise CliError(
            f"{args.output} exists (use --force to replace it: every gateway of the person must then get "
            "the new key and the model be trained again)"
        )
    fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # --force over a file that was readable by others
    with os.fdopen(fd, "w") as fh:
        fh.write(new_party_key().hex() + "\n")
    print(
        f"wrote {args.output}: copy it to every gateway of this person (wheelfed gateway --party-key-file "
        f"{args.output}); keep it from the aggregator",
        flush=True,
    )
    return 0


def _connect(args: argparse.Namespace, parties: list[str]):
    """The aggregator's transport and round engine, once every party is online."""
    from aggregator.fleet import Presence, online_gateways
    from aggregator.jobs import TrainingError
    from aggregator.rounds import RoundEngine

    transport = aggregator_transport(args)
    try:
        engine = RoundEngine(transport)
        online_gateways(Presence(transport, engine.layout), parties, args.discover)
    except TrainingError as exc:
        transport.close()
        raise CliError(str(exc)) from None
    return transport, engine


def training_config(args: argparse.Namespace) -> VerticalFederatedForest:
    """The ``VerticalFederatedForest`` that ``wheelfed vertical train``'s arguments ask for (a bad
    combination is a ``UsageError``, one line)."""
    from aggregator.algorithms.vertical_forest import VerticalFederatedForest

    parties = args.parties
    if len(set(parties)) != len(parties):
        raise UsageError(f"--parties names a gateway twice: {','.join(parties)}")
    if args.label_holder not in parties:
        raise UsageError(f"--label-holder {args.label_holder} is not one of --parties {','.join(parties)}")
    if 2 * args.tolerance_ms > args.hop_ms:
        raise UsageError(f"--tolerance-ms {args.tolerance_ms:g} must be at most half of --hop-ms ({args.hop_ms:g})")
    try:
        config = VerticalFederatedForest(
            n_trees=args.trees,
            max_depth=args.max_depth,
            min_samples_split=args.min_samples_split,
            min_samples_leaf=args.min_samples_leaf,
            min_impurity_decrease=args.min_impurity_decrease,
            bootstrap=not args.no_bootstrap,
            max_features=args.max_features or "default",
            task=args.task,
            criterion=args.criterion,
            hop_us=round(args.hop_ms * 1000),
            tolerance_us=round(args.tolerance_ms * 1000),
            label_holder=args.label_holder,
            feature_set_version=args.feature_set or "",
        )
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return config


def _train(args: argparse.Namespace) -> int:
    from aggregator.algorithms.vertical_forest import deploy_to_parties
    from aggregator.jobs import FederatedJob, JobSettings, StepProgress, TrainingError
    from aggregator.rounds import QuorumNotReached

    parties = args.parties
    config = training_config(args)
    print(
        f"training vertical_forest on {', '.join(parties)} (labels on {args.label_holder}) via {args.host}:{args.port}",
        flush=True,
    )
    transport, engine = _connect(args, parties)
    settings = JobSettings(deadline_s=args.deadline)

    def progress(p: StepProgress) -> None:
        print(f"level {p.step}/{p.total}: {int(p.metrics.get('splits', 0))} splits ({p.elapsed_s:.1f} s)", flush=True)

    try:
        model = config.fit(FederatedJob(engine, parties, settings=settings, progress=progress), seed=args.seed)
        if model.alignment is not None:  # a fitted model's: how many windows every party aligned
            print(model.alignment.line(), flush=True)
        model = deploy_to_parties(
            FederatedJob(engine, parties, settings=settings),
            model,
            args.key,
            model_id=args.model_id,
            version=args.version,
        )
    except (TrainingError, QuorumNotReached) as exc:
        rerun = " (wheelfed vertical train ... --version N)" if str(exc).startswith("deploying") else ""
        raise CliError(f"{exc}{rerun}") from None
    finally:
        transport.close()
    args.output.write_bytes(model.to_bytes())
    print(
        f"{args.output}: {args.model_id}:v{args.version}, {len(model.trees)} trees, classes {list(model.classes)}; "
        f"deployed to {', '.join(parties)} (signed with key {args.key.key_id})",
        flush=True,
    )
    return 0


def _predict(args: argparse.Namespace) -> int:
    from aggregator.algorithms.vertical_forest import predict_on_parties
    from aggregator.algorithms.vertical_forest_model import VerticalForestModel
    from aggregator.jobs import FederatedJob, JobSettings, TrainingError
    from aggregator.rounds import QuorumNotReached
    from shared.signing import BadSignature, InvalidKey, load_verify_key

    try:
        keys = [load_verify_key(p) for p in args.trust]
        model = VerticalForestModel.from_bytes(args.model.read_bytes(), keys)
    except (InvalidKey, BadSignature, ValueError) as exc:
        raise UsageError(f"--model {args.model}: {exc}") from None
    if model.manifest is None:  # from_bytes reads and verifies it: a model file always has one
        raise UsageError(f"--model {args.model}: no signed manifest")
    label = f"{model.manifest.model_id}:v{model.manifest.version}"
    parties = list(model.parties)
    transport, engine = _connect(args, parties)
    try:
        while True:
            job = FederatedJob(
                engine,
                parties,
                job_id=f"vertical-predict-{uuid.uuid4().hex[:12]}",
                settings=JobSettings(deadline_s=args.deadline),
            )
            try:
                result = predict_on_parties(
                    job,
                    model,
                    hop_us=model.metadata.hop_us,
                    tolerance_us=model.metadata.tolerance_us,
                    feature_set_version=model.metadata.feature_set_version,
                    live=True,
                )
            except (TrainingError, QuorumNotReached) as exc:
                raise CliError(str(exc)) from None
            print(f"{label}: predicted {result.alignment.line()}; stored on {', '.join(parties)}", flush=True)
            if not args.every:
                return 0
            time.sleep(args.every)
    finally:
        transport.close()


def add(sub: argparse._SubParsersAction) -> None:
    group = add_subcommand(
        sub,
        "vertical",
        "vertical Federated Forest over one person's gateways: keygen, train, predict",
        description="Vertical Federated Forest over one person's gateways (each holds other "
        "sensors' features\nof the same windows; one holds the labels): keygen, train, "
        "predict.\nwheelfed vertical ACTION --help explains an action and shows its "
        "examples.",
        examples=["wheelfed vertical keygen -o person.key"],
    )
    actions = group.add_subparsers(dest="action", required=True, metavar="ACTION")

    p = add_subcommand(
        actions,
        "keygen",
        "write the secret a person's gateways share (wheelfed gateway --party-key-file)",
        examples=["wheelfed vertical keygen -o person.key"],
    )
    p.add_argument(
        "-o",
        "--output",
        type=output_file(".key", what="party key file"),
        required=True,
        help="the key file (mode 0600)",
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing key file")
    p.set_defaults(func=_keygen)

    p = add_subcommand(
        actions,
        "train",
        "train over the named parties, sign and deploy their partial trees",
        examples=[
            "wheelfed vertical train --parties gw-acc,gw-ecg,gw-gyro --label-holder gw-acc "
            "--model-id activity-vf -o activity-vf.vfm --trees 6 --max-depth 5 "
            "--hop-ms 2000 --tolerance-ms 250",
            "wheelfed vertical train --parties gw-acc,gw-ecg --label-holder gw-acc "
            "--model-id activity-vf --version 2 -o activity-vf-2.vfm --key aggregator.key",
            "wheelfed vertical train --parties gw-acc,gw-ecg --label-holder gw-acc "
            "--model-id activity-vf -o activity-vf.vfm --min-samples-split 20 "
            "--min-impurity-decrease 0.001 --no-bootstrap",
        ],
    )
    p.add_argument(
        "--parties",
        type=gateway_ids,
        required=True,
        help="comma-separated gateway ids of one person, each online, in feature-block order",
    )
    p.add_argument("--label-holder", type=gateway_id, required=True, help="the party whose windows are labelled")
    p.add_argument("--model-id", type=model_id, required=True, help="the deployed model's name")
    p.add_argument(
        "--version",
        type=positive_int,
        default=1,
        help="the deployed version; a party refuses one not above the last it accepted for the model id",
    )
    p.add_argument(
        "-o",
        "--output",
        type=output_file(MODEL_SUFFIX, what="model file"),
        required=True,
        help=f"the master's model file ({MODEL_SUFFIX}): trees without thresholds and the signed manifest",
    )
    p.add_argument("--key", type=signing_key, default=DEFAULT_KEY, help="the signing key (wheelfed keygen)")
    p.add_argument("--trees", type=positive_int, default=10, help="number of trees")
    p.add_argument("--max-depth", type=int_at_least(0), default=8, help="tree depth (at most 40)")
    p.add_argument("--min-samples-split", type=int_at_least(2), default=2, help="a node with fewer windows is a leaf")
    p.add_argument("--min-samples-leaf", type=positive_int, default=5, help="smallest leaf (windows)")
    p.add_argument(
        "--min-impurity-decrease",
        type=non_negative_float,
        default=0.0,
        help="a split must decrease the weighted impurity by at least this (scikit-learn's meaning)",
    )
    p.add_argument(
        "--no-bootstrap",
        action="store_true",
        help="every tree on every aligned window once (default: a bootstrap sample per tree)",
    )
    p.add_argument(
        "--max-features",
        type=max_features,
        help="features drawn per node: sqrt, log2, a count or a fraction (default: "
        "sqrt for classification, all for regression)",
    )
    p.add_argument("--task", choices=("classification", "regression"), default="classification", help="what to fit")
    p.add_argument(
        "--criterion", choices=("gini", "entropy", "mse"), help="split criterion (default: gini, or mse for regression)"
    )
    p.add_argument(
        "--hop-ms",
        type=non_negative_float,
        default=0.0,
        help="the window grid to align on, in ms (0: window ids as stored)",
    )
    p.add_argument(
        "--tolerance-ms",
        type=non_negative_float,
        default=0.0,
        help="clock offset between the gateways that still aligns, in ms (at most half the hop)",
    )
    p.add_argument("--feature-set", help="feature set version (default: the one each party stores)")
    p.add_argument("--seed", type=int, default=0, help="random seed (row and feature draws)")
    p.add_argument("--deadline", type=positive_float, default=120.0, help="seconds a round waits for replies")
    p.add_argument("--discover", type=positive_float, default=2.0, help="seconds to wait for the parties' presence")
    add_broker_options(p, username_help="broker user name (default: aggregator); password from $WHEELFED_MQTT_PASSWORD")
    p.set_defaults(func=_train)

    p = add_subcommand(
        actions,
        "predict",
        "live prediction on the parties: the windows stored since the last run, stored on every party",
        examples=[
            "wheelfed vertical predict --model activity-vf.vfm --trust aggregator.pub",
            "wheelfed vertical predict --model activity-vf.vfm --trust aggregator.pub --every 60",
        ],
    )
    p.add_argument(
        "--model", type=existing_file, required=True, help=f"the model file ({MODEL_SUFFIX}) of wheelfed vertical train"
    )
    p.add_argument(
        "--trust",
        action="append",
        type=existing_file,
        metavar="PUBKEY",
        required=True,
        help="the aggregator's public key file; the model file's manifest must verify under it",
    )
    p.add_argument(
        "--every", type=non_negative_float, default=0.0, help="seconds between runs until Ctrl-C (0: one run)"
    )
    p.add_argument("--deadline", type=positive_float, default=60.0, help="seconds a round waits for replies")
    p.add_argument("--discover", type=positive_float, default=2.0, help="seconds to wait for the parties' presence")
    add_broker_options(p, username_help="broker user name (default: aggregator); password from $WHEELFED_MQTT_PASSWORD")
    p.set_defaults(func=_predict)
