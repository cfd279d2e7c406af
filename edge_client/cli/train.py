"""``wheelfed train``: a training job over the online gateways (aggregator side)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from edge_client.cli.arguments import (add_subcommand, fraction, gateway_ids, int_at_least, non_negative_float,
                                       non_negative_int, output_file, positive_float, positive_int)
from edge_client.cli.connection import add_broker_options, aggregator_transport
from edge_client.cli.errors import CliError, UsageError
from edge_client.cli.model_files import load_model_file, model_file


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
        return FedForest(n_trees=args.trees, max_depth=args.max_depth or 8, n_bins=args.bins or 32,
                         min_samples_leaf=args.min_samples_leaf, client_splits=args.client_splits,
                         client_fraction=args.client_fraction, feature_set_version=feature_set,
                         protocol="sketches" if args.paper_protocol else "histogram", **privacy)
    return FedSCSXGB(n_rounds=args.rounds, max_depth=args.max_depth or 4, n_bins=args.bins or 256,
                     learning_rate=args.learning_rate, reg_lambda=args.reg_lambda, gamma=args.gamma,
                     sketch=args.sketch, client_fraction=args.client_fraction,
                     feature_set_version=feature_set, init_model=init_model,
                     protocol="atoms" if args.paper_protocol else "histogram",
                     dp_noise_multiplier=args.dp_noise_multiplier, **privacy)


def run(args: argparse.Namespace) -> int:
    from aggregator.evaluation import evaluate_federated
    from aggregator.fleet import train_on_fleet
    from aggregator.jobs import JobSettings, TrainingError
    from edge_client.features import FEATURE_SET_VERSION

    if not (args.output or args.registry):
        raise UsageError("give -o FILE and/or --registry DB so the model is kept somewhere")
    init_model = load_model_file(args.init_model) if args.init_model else None
    feature_set = args.feature_set or FEATURE_SET_VERSION
    if args.paper_protocol and not args.no_secure_aggregation:
        print("warning: --paper-protocol sends per-window data (atoms) or per-gateway sketches of actual values "
              "to the aggregator; secure aggregation does not apply (see PRIVACY.md)", file=sys.stderr, flush=True)
    privacy = dict(min_crowd=args.min_crowd,
                   secure_aggregation=not (args.no_secure_aggregation or args.paper_protocol))
    try:
        algorithm = _training_algorithm(args, feature_set, init_model, privacy)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    clients = args.clients
    print(f"training {algorithm.name} on {'the online gateways' if clients is None else ', '.join(clients)} "
          f"via {args.host}:{args.port}", flush=True)
    transport = aggregator_transport(args)
    try:
        model, job = train_on_fleet(algorithm, transport, clients=clients, seed=args.seed,
                                    settings=JobSettings(deadline_s=args.deadline, min_fraction=args.min_fraction),
                                    progress=lambda p: print(p.line(), flush=True))
        if args.evaluate:
            evaluation = evaluate_federated(job, model, split="holdout")
            print("held-out: " + " ".join(f"{k}={v:.4g}" for k, v in evaluation.metrics.items()), flush=True)
            for client, metrics in evaluation.per_client.items():
                print(f"  {client}: " + " ".join(f"{k}={v:.4g}" for k, v in metrics.items()), flush=True)
    except TrainingError as exc:
        raise CliError(str(exc)) from None
    finally:
        transport.close()
    if args.output:
        data = model.to_json(indent=1).encode() if args.output.suffix == ".json" else model.to_cbor()
        args.output.write_bytes(data)
    if args.registry:
        from aggregator.registry import Registry

        with Registry(args.registry) as registry:
            record = registry.add(args.model_id or algorithm.name, model,
                                  metrics=evaluation.metrics if args.evaluate else None)
        print(f"registered {record.label} in {args.registry}", flush=True)
    print(f"{args.output or 'model'}: {model.n_trees} trees, classes {list(model.classes)}; job {job.job_id}, "
          f"{job.rounds} protocol rounds, rejected replies {job.rejected or 'none'}", flush=True)
    return 0


def add(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, "train", "train a model on the online gateways over MQTT (aggregator side)",
                       examples=["WHEELFED_MQTT_PASSWORD=SECRET wheelfed train -o model.cbor --rounds 10 --bins 256",
                                 "wheelfed train --algorithm fedforest --registry reg.db --model-id activity --evaluate",
                                 "wheelfed train -o more.cbor --init-model model.cbor --clients gw-1,gw-2"])
    p.add_argument("--algorithm", choices=("fedscs-xgb", "fedforest"), default="fedscs-xgb", help="what to grow")
    p.add_argument("--clients", type=gateway_ids, help="comma-separated gateway ids (default: every gateway online)")
    p.add_argument("-o", "--output", type=output_file(".json", ".cbor", what="model file"),
                   help="model file: .json or .cbor")
    p.add_argument("--registry", type=Path, help="also register the model (and its held-out metrics) in this registry")
    p.add_argument("--model-id", help="the registered model's name (default: the algorithm's)")
    p.add_argument("--rounds", type=positive_int, default=10, help="fedscs-xgb: boosting rounds")
    p.add_argument("--trees", type=positive_int, default=50, help="fedforest: number of trees")
    p.add_argument("--max-depth", type=positive_int, help="tree depth (default: 4 fedscs-xgb, 8 fedforest)")
    p.add_argument("--bins", type=int_at_least(2),
                   help="bins / candidates per feature (default: 256 fedscs-xgb, 32 fedforest)")
    p.add_argument("--min-samples-leaf", type=positive_int, default=5, help="fedforest: smallest leaf")
    p.add_argument("--client-splits", action="store_true", help="fedforest: also split on the gateway (H)")
    p.add_argument("--evaluate", action="store_true", help="score the model on the gateways' held-out windows")
    p.add_argument("--learning-rate", type=positive_float, default=0.2, help="fedscs-xgb: shrinkage (eta)")
    p.add_argument("--reg-lambda", type=non_negative_float, default=1.0, help="fedscs-xgb: L2 on leaf weights")
    p.add_argument("--gamma", type=non_negative_float, default=0.1,
                   help="Eq. 1's split penalty (xgboost's gamma is twice it)")
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
    p.add_argument("--feature-set", help="feature set version to train on (default: this release's)")
    p.add_argument("--init-model", type=model_file, help="continue boosting from this model file (periodic retraining)")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--deadline", type=positive_float, default=120.0, help="seconds a round waits for replies")
    p.add_argument("--min-fraction", type=fraction, default=0.5, help="share of selected gateways a round needs")
    add_broker_options(p, username_help="broker user name (default: aggregator); password from $WHEELFED_MQTT_PASSWORD")
    p.set_defaults(func=run)
