"""``keygen`` and ``model``: the signing key pair and the model registry (list, show, register, deploy, rollback)."""

from __future__ import annotations

import argparse
from pathlib import Path

from edge_client.cli.arguments import add_subcommand, existing_file, gateway_ids, output_file, positive_float
from edge_client.cli.connection import add_broker_options, aggregator_transport
from edge_client.cli.errors import CliError, UsageError
from edge_client.cli.model_files import load_model_file, model_file


def _keygen(args: argparse.Namespace) -> int:
    from shared.signing import SigningKey

    key = SigningKey.generate()
    secret, public = args.output, args.output.with_suffix(".pub")
    try:
        key.save(secret, overwrite=args.force)
        key.verify_key.save(public, overwrite=args.force)
    except FileExistsError as exc:
        raise CliError(f"{exc} (use --force to replace the key: gateways must then trust the new public key)") \
            from None
    print(f"signing key {secret} (keep it on the aggregator, mode 0600); public key {public} "
          f"(give it to every gateway: --trust {public}); key id {key.verify_key.key_id}", flush=True)
    return 0


def _split_ref(ref: str) -> tuple[str, int | None]:
    model_id, _, version = ref.partition(":v")
    if version and not version.isdigit():
        raise UsageError(f"{ref!r} is not MODEL_ID or MODEL_ID:vN")
    return model_id, int(version) if version else None


def _model(args: argparse.Namespace) -> int:
    from aggregator.registry import Registry, RegistryError

    if args.action in ("show", "deploy") and not args.ref:
        raise UsageError(f"model {args.action} needs MODEL_ID[:vN] (wheelfed model list shows them)")
    if args.action != "register" and not args.registry.exists():
        raise UsageError(f"no registry at {args.registry} (wheelfed train --registry creates one; "
                         "or pass --registry PATH)")
    try:
        with Registry(args.registry) as registry:
            if args.action == "list":
                _list(registry)
            elif args.action == "register":
                return _register(args, registry)
            elif args.action == "show":
                _show(args, registry)
            else:
                return _deploy_or_rollback(args, registry)
    except RegistryError as exc:
        raise CliError(str(exc)) from None
    return 0


def _list(registry) -> None:
    deployments = registry.deployments()
    for r in registry.list():
        states = [f"{c}={s}" for m, v, c, s, _ in deployments if (m, v) == (r.model_id, r.version)]
        metrics = " ".join(f"{k}={v:.4g}" for k, v in r.metrics.items() if isinstance(v, float))
        print(f"{r.label:24} {r.algorithm:12} {r.kind:8} trees={r.n_trees:<5} {metrics} "
              f"{' '.join(states) or 'not deployed'}")


def _register(args: argparse.Namespace, registry) -> int:
    path = args.file or (model_file(args.ref) if args.ref else None)
    if path is None:
        raise UsageError("model register needs a model file: wheelfed model register model.json --model-id NAME")
    model_id = args.model_id or Path(path).stem
    record = registry.add(model_id, load_model_file(path), target=args.target or "")
    print(f"registered {record.label} ({record.algorithm}, {record.n_trees} trees)")
    return 0


def _show(args: argparse.Namespace, registry) -> None:
    record, model = registry.model(*_split_ref(args.ref))
    print(f"{record.label}: {record.algorithm} {record.kind} model, {model.n_trees} trees, "
          f"{model.n_features} inputs, classes {record.classes}, feature set {record.feature_set_version}, "
          f"target {record.target or 'the fleet'}")
    print(f"metadata: {model.metadata}\nmetrics: {record.metrics}")
    for _m, _v, client, state, detail in registry.deployments(record.model_id):
        if _v == record.version:
            print(f"  {client}: {state} {detail}")


def _deploy_or_rollback(args: argparse.Namespace, registry) -> int:
    from aggregator.deployment import deploy, rollback
    from aggregator.fleet import discover_gateways
    from aggregator.rounds import RoundEngine
    from shared.signing import load_signing_key

    key = None
    if args.action == "deploy":
        if not args.key.is_file():
            raise UsageError(f"no signing key at {args.key} (wheelfed keygen -o {args.key} makes one)")
        try:
            key = load_signing_key(args.key)
        except PermissionError as exc:
            raise UsageError(str(exc)) from None
        except ValueError as exc:
            raise UsageError(f"{args.key} is not a signing key: {exc}") from None
    transport = aggregator_transport(args)
    try:
        clients = args.clients or discover_gateways(transport)
        if not clients:
            raise CliError("no gateway online; name them with --clients")
        engine = RoundEngine(transport)
        if args.action == "deploy":
            model_id, version = _split_ref(args.ref)
            result = deploy(engine, registry, key, model_id, version, clients,
                            target=args.target or "", deadline_s=args.deadline)
        else:
            result = rollback(engine, clients, reason=args.reason, deadline_s=args.deadline)
    finally:
        transport.close()
    print(f"{result.label}: active on {result.active or 'none'}; rejected {result.rejected or 'none'}; "
          f"pending {result.pending or 'none'}")
    for client, status in sorted(result.statuses.items()):
        print(f"  {client}: {status.state}, running {status.active_model_id}:v{status.active_version}"
              f"{'; ' + status.reason if status.reason else ''}")
    return 1 if result.rejected else 0


def add(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, "keygen", "create the aggregator's model-signing key pair (.key and .pub)",
                       examples=["wheelfed keygen -o aggregator.key"])
    p.add_argument("-o", "--output", type=output_file(".key", what="key file"), default=Path("aggregator.key"),
                   help="the private key; the public key goes next to it as .pub")
    p.add_argument("--force", action="store_true", help="overwrite existing key files")
    p.set_defaults(func=_keygen)

    p = add_subcommand(sub, "model", "the model registry: list, show, register, deploy, rollback",
                       examples=["wheelfed model list --registry reg.db",
                                 "wheelfed model register model.json --model-id activity --registry reg.db",
                                 "wheelfed model deploy activity --registry reg.db --key aggregator.key",
                                 "wheelfed model rollback --registry reg.db --clients gw-3"])
    p.add_argument("action", choices=("list", "show", "register", "deploy", "rollback"), help="what to do")
    p.add_argument("ref", nargs="?", help="MODEL_ID[:vN] (show, deploy), or a model file (register)")
    p.add_argument("--registry", type=Path, default=Path("wheelfed-registry.db"), help="registry file (SQLite)")
    p.add_argument("--model-id", help="register: the model's name (default: the file's name)")
    p.add_argument("--file", type=model_file, help="register: a model file (.json or CBOR)")
    p.add_argument("--key", type=Path, default=Path("aggregator.key"), help="deploy: the signing key (wheelfed keygen)")
    p.add_argument("--target", help="a personalised model: the one gateway it is for")
    p.add_argument("--clients", type=gateway_ids, help="comma-separated gateway ids (default: every gateway online)")
    p.add_argument("--reason", default="", help="rollback: why (logged on the gateways)")
    p.add_argument("--deadline", type=positive_float, default=30.0, help="seconds to wait for the gateways' answers")
    add_broker_options(p, username_help="broker user name (default: aggregator); password from $WHEELFED_MQTT_PASSWORD")
    p.set_defaults(func=_model)
