"""``keygen`` and ``model``: the signing key pair and the model registry.

``wheelfed model ACTION`` has one subcommand per action (list, show, register, export, deploy,
rollback) so that each one's ``--help`` lists only its own options, and its arguments -- a
model reference, a registry that must exist, a signing key -- are checked while they are
parsed, before a registry is opened or a broker is contacted.
"""

from __future__ import annotations

import argparse
import textwrap
import time
from pathlib import Path
from typing import NamedTuple

from edge_client.cli.arguments import (MODEL_ID_PATTERN, add_subcommand, existing_file, gateway_id, gateway_ids,
                                       model_id, output_file, positive_float)
from edge_client.cli.connection import add_broker_options, aggregator_transport
from edge_client.cli.errors import CliError, UsageError
from edge_client.cli.model_files import load_model_file, model_file, model_file_bytes

DEFAULT_REGISTRY = "wheelfed-registry.db"
DEFAULT_KEY = "aggregator.key"
#: Seconds deploy and rollback listen for the gateways' retained presence when --clients is not given.
DISCOVER_S = 2.0


# -- argument types (run while argparse reads the command line) ----------------------------------
class ModelRef(NamedTuple):
    """``MODEL_ID`` (the latest version) or ``MODEL_ID:vN``."""

    model_id: str
    version: int | None

    def __str__(self) -> str:
        return self.model_id if self.version is None else f"{self.model_id}:v{self.version}"


def model_ref(text: str) -> ModelRef:
    model_id, sep, version = text.rpartition(":v") if ":v" in text else (text, "", "")
    if not model_id or (sep and not version.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not MODEL_ID or MODEL_ID:vN (wheelfed model list shows them)")
    return ModelRef(model_id, int(version) if sep else None)


model_ref.__name__ = "model reference"



def existing_registry(text: str) -> Path:
    """A registry that is already there: reading one must never create an empty file by a typo."""
    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no registry at {text} (wheelfed train --registry or wheelfed model "
                                         "register creates one; or pass --registry PATH)")
    return existing_file(text)


existing_registry.__name__ = "registry"


def signing_key(text: str):
    """The aggregator's signing key, read now: a missing, unreadable or too open key file is a
    usage error before any broker connection (the gateways would refuse an unsigned push)."""
    from shared.signing import load_signing_key, load_verify_key

    path = Path(text)
    if not path.exists():
        raise argparse.ArgumentTypeError(f"no signing key at {text} (wheelfed keygen -o {text} makes one)")
    existing_file(text)
    try:
        load_verify_key(path)
    except ValueError:
        pass  # not a public key: read it as the private one below
    else:
        raise argparse.ArgumentTypeError(f"{text} is the public key (it goes to the gateways); --key takes the "
                                         f"private one, {path.with_suffix('.key')}")
    try:
        load_signing_key(path, check_permissions=False)  # what it is first: "chmod 600" fixes no CSV
        return load_signing_key(path)
    except PermissionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text} is not a signing key ({exc}); wheelfed keygen writes one, "
                                         "its .pub goes to the gateways") from None


signing_key.__name__ = "signing key"


# -- keygen --------------------------------------------------------------------------------------
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


# -- model ---------------------------------------------------------------------------------------
def _with_registry(action):
    """Run ``action(args, registry)`` with the registry open; its errors are one line."""
    def run(args: argparse.Namespace) -> int:
        from aggregator.registry import Registry, RegistryError

        try:
            with Registry(args.registry) as registry:
                return action(args, registry) or 0
        except RegistryError as exc:
            raise CliError(str(exc)) from None

    return run


def _gateway_states(registry, model_id: str | None = None) -> list:
    """The registry's deployment rows, an ``active`` row marked ``replaced`` when the gateway
    has since confirmed running another version (a later deploy or a rollback)."""
    running = registry.running()
    out = []
    for row in registry.deployments(model_id):
        now = running.get(row.client)
        if row.state == "active" and now is not None and now.label != row.label:
            row = row._replace(state="replaced", detail=f"now runs {now.label}")
        out.append(row)
    return sorted(out, key=lambda r: r.client)


def _headline(metrics: dict) -> str:
    for name in ("accuracy", "rmse"):
        if isinstance(metrics.get(name), (int, float)):
            return f"{name} {metrics[name]:.4g}"
    return "-"


def _list(args: argparse.Namespace, registry) -> None:
    records = registry.list()
    if not records:
        print(f"{args.registry} holds no models yet (wheelfed model register FILE or wheelfed train --registry "
              "adds one)")
        return
    states = _gateway_states(registry)
    rows = [("MODEL", "ALGORITHM", "KIND", "TREES", "HELD-OUT", "GATEWAYS")]
    for r in records:
        here = [f"{d.client}={d.state}" for d in states if (d.model_id, d.version) == (r.model_id, r.version)
                and d.state != "replaced"]
        rows.append((r.label, r.algorithm, r.kind, str(r.n_trees), _headline(r.metrics),
                     " ".join(here) or "not deployed"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])


def _format_metrics(metrics: dict) -> str:
    """``held-out metrics (120 windows): accuracy 0.9167, ...`` -- NaN (e.g. an AUC with one
    class present) as n/a."""
    n = metrics.get("n")
    values = ", ".join(f"{k} {v:.4g}" if v == v else f"{k} n/a" for k, v in metrics.items()
                       if k != "n" and isinstance(v, (int, float)))
    return f"held-out metrics{f' ({int(n)} windows)' if isinstance(n, (int, float)) else ''}: {values}"


def _show(args: argparse.Namespace, registry) -> None:
    record, model = registry.model(*args.ref)
    print(f"{record.label}: {record.algorithm} {record.kind} model, {model.n_trees} trees, {model.n_features} "
          f"inputs; registered {time.strftime('%Y-%m-%d %H:%M', time.localtime(record.created))}")
    print(f"  classes: {', '.join(map(str, record.classes)) or '- (regression)'}")
    print(f"  feature set: {record.feature_set_version or '- (not recorded in the model)'}; "
          f"for {f'gateway {record.target} only' if record.target else 'the whole fleet'}")
    if record.metrics:
        print("  " + _format_metrics(record.metrics))
    else:
        print("  no metrics (train with --evaluate to score it on the gateways' held-out windows, or "
              f"wheelfed model export {record.label} --registry {args.registry} -o m.cbor and wheelfed predict "
              "RECORDING --model m.cbor)")
    settings = ", ".join(f"{k}={v}" for k, v in model.metadata.items())
    print(textwrap.fill(f"training settings: {settings or 'none recorded'}", width=100, initial_indent="  ",
                        subsequent_indent="    ", break_on_hyphens=False))
    deployments = [d for d in _gateway_states(registry, record.model_id) if d.version == record.version]
    print("  gateways:" if deployments else "  gateways: not deployed")
    for d in deployments:
        print(f"    {d.client}: {d.state}{f' ({d.detail})' if d.detail else ''}")


def _register(args: argparse.Namespace, registry) -> None:
    if args.file and args.file_option:
        raise UsageError("give the model file once: wheelfed model register FILE (--file is the older spelling)")
    path = args.file or args.file_option
    if path is None:
        raise UsageError("model register needs a model file: wheelfed model register model.json --registry reg.db")
    name = args.model_id or path.stem
    if not args.model_id and not MODEL_ID_PATTERN.match(name):
        raise UsageError(f"the file name {name!r} is not a usable model id: add --model-id NAME")
    record = registry.add(name, load_model_file(path), target=args.target or "")
    print(f"registered {record.label} in {args.registry} ({record.algorithm}, {record.n_trees} trees"
          f"{f', for {record.target} only' if record.target else ''})")


def _export(args: argparse.Namespace, registry) -> None:
    xgboost = args.format == "xgboost-json"
    if xgboost and args.output.suffix.lower() != ".json":
        raise UsageError(f"--format xgboost-json writes JSON: name the file .json, not {args.output.name}")
    record, model = registry.model(*args.ref)
    try:
        data = model_file_bytes(model, args.output, xgboost=xgboost)
    except ValueError as exc:
        raise CliError(f"{record.label} cannot be written as XGBoost JSON: {str(exc).splitlines()[0]}") from None
    args.output.write_bytes(data)
    use = "xgboost.Booster().load_model(FILE)" if xgboost else f"wheelfed predict RECORDING --model {args.output}"
    print(f"wrote {record.label} ({record.algorithm}, {record.n_trees} trees) to {args.output}; {use}")


def _connect_and_find(args: argparse.Namespace, clients: list[str] | None):
    """The aggregator's connection and the gateways to address (given, or every one online)."""
    from aggregator.fleet import discover_gateways

    transport = aggregator_transport(args)
    try:
        clients = clients or discover_gateways(transport, wait_s=DISCOVER_S)
    except BaseException:
        transport.close()
        raise
    if not clients:
        transport.close()
        raise CliError(f"no gateway online at {args.host}:{args.port} (none announced itself within "
                       f"{DISCOVER_S:g} s); start the gateways, or name them with --clients to queue the "
                       "request for them")
    return transport, clients


def _print_answers(result) -> None:
    for client, status in sorted(result.statuses.items()):
        runs = f"{status.active_model_id}:v{status.active_version}" if status.active_model_id else "no model"
        print(f"  {client}: {status.state}, running {runs}{'; ' + status.reason if status.reason else ''}")
    for client in result.pending:
        print(f"  {client}: no answer yet (the broker keeps the request until the gateway is back)")
    for client, reason in sorted(result.skipped.items()):
        print(f"  {client}: not asked: {reason}")


def _deploy(args: argparse.Namespace, registry) -> None:
    from aggregator.deployment import deploy
    from aggregator.rounds import RoundEngine

    record = registry.record(*args.ref)  # an unknown model fails before any connection
    target = args.target or record.target
    if target and args.clients and args.clients != [target]:
        raise UsageError(f"{record.label} is personalised for {target}: deploy it to that gateway only, "
                         f"not --clients {','.join(args.clients)}")
    transport, clients = _connect_and_find(args, [target] if target else args.clients)
    try:
        result = deploy(RoundEngine(transport), registry, args.key, record.model_id, record.version, clients,
                        target=target, deadline_s=args.deadline)
    finally:
        transport.close()
    pending = f"; no answer yet from {', '.join(result.pending)}" if result.pending else ""
    print(f"{result.label}: active on {', '.join(result.active) or 'none'}{pending}")
    _print_answers(result)
    if result.rejected:
        client, reason = sorted(result.rejected.items())[0]
        more = f" (and {len(result.rejected) - 1} more, above)" if len(result.rejected) > 1 else ""
        raise CliError(f"{result.label} rejected by {client}: {reason}{more}")


def _rollback(args: argparse.Namespace, registry) -> None:
    from aggregator.deployment import rollback
    from aggregator.rounds import RoundEngine

    transport, clients = _connect_and_find(args, args.clients)
    try:
        result = rollback(RoundEngine(transport), registry, args.key, clients, reason=args.reason,
                          deadline_s=args.deadline)
    finally:
        transport.close()
    rolled_back = [c for c, status in sorted(result.statuses.items()) if status.state == "active"]
    print(f"rollback: rolled back {', '.join(rolled_back) or 'none'}")
    _print_answers(result)
    if result.rejected:
        client, reason = sorted(result.rejected.items())[0]
        raise CliError(f"rollback refused by {client}: {reason}")


def add(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(sub, "keygen", "create the aggregator's model-signing key pair (.key and .pub)",
                       examples=["wheelfed keygen -o aggregator.key"])
    p.add_argument("-o", "--output", type=output_file(".key", what="key file"), default=Path(DEFAULT_KEY),
                   help="the private key; the public key goes next to it as .pub")
    p.add_argument("--force", action="store_true", help="overwrite existing key files")
    p.set_defaults(func=_keygen)

    model = add_subcommand(sub, "model", "the model registry: list, show, register, export, deploy, rollback",
                           description="The model registry: list, show, register, export, deploy, rollback.\n"
                                       "wheelfed model ACTION --help explains an action and shows its examples.",
                           examples=["wheelfed model list --registry reg.db",
                                     "wheelfed model register model.cbor --registry reg.db",
                                     "wheelfed model show activity:v2 --registry reg.db",
                                     "wheelfed model export activity --registry reg.db -o activity.cbor",
                                     "wheelfed model deploy activity --registry reg.db --key aggregator.key "
                                     "--clients gw-1",
                                     "wheelfed model rollback --registry reg.db --clients gw-3"])
    actions = model.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help: str, examples: list[str], func, *, registry_must_exist: bool = True):
        p = add_subcommand(actions, name, help, examples=examples)
        if registry_must_exist:
            p.add_argument("--registry", type=existing_registry, default=DEFAULT_REGISTRY,
                           help="registry file (SQLite)")
        else:
            p.add_argument("--registry", type=Path, default=Path(DEFAULT_REGISTRY),
                           help="registry file (SQLite; created if missing)")
        p.set_defaults(func=_with_registry(func))
        return p

    def ref(p: argparse.ArgumentParser) -> None:
        p.add_argument("ref", type=model_ref, metavar="MODEL_ID[:vN]", help="a registered model; without :vN the "
                                                                            "latest version")

    def to_gateways(p: argparse.ArgumentParser) -> None:
        p.add_argument("--clients", type=gateway_ids,
                       help="comma-separated gateway ids (default: every gateway online)")
        p.add_argument("--deadline", type=positive_float, default=30.0,
                       help="seconds to wait for the gateways' answers")
        add_broker_options(p, username_help="broker user name (default: aggregator); password from "
                                            "$WHEELFED_MQTT_PASSWORD")

    action("list", "every registered version, its held-out accuracy and the gateways running it",
           ["wheelfed model list --registry reg.db"], _list)

    p = action("show", "one model version: classes, feature set, metrics, training settings, gateways",
               ["wheelfed model show activity --registry reg.db", "wheelfed model show activity:v2 --registry reg.db"],
               _show)
    ref(p)

    p = action("register", "add a model file to the registry as the next version of its model id",
               ["wheelfed model register model.json --registry reg.db",
                "wheelfed model register more.cbor --model-id activity --registry reg.db"],
               _register, registry_must_exist=False)
    p.add_argument("file", nargs="?", type=model_file, metavar="FILE", help="a model file (.json or CBOR), e.g. "
                                                                            "from wheelfed train -o")
    p.add_argument("--file", dest="file_option", type=model_file, metavar="FILE",
                   help="the same as FILE (the older spelling)")
    p.add_argument("--model-id", type=model_id, help="the model's name (default: the file's name without its "
                                                     "suffix: model.json registers model:v1, then model:v2, ...)")
    p.add_argument("--target", type=gateway_id,
                   help="a personalised model: the one gateway it is for")

    p = action("export", "write a registered model to a file for wheelfed predict, a gateway, or XGBoost",
               ["wheelfed model export activity --registry reg.db -o activity.cbor",
                "wheelfed model export activity:v2 --registry reg.db -o activity.json",
                "wheelfed model export activity --registry reg.db -o booster.json --format xgboost-json"], _export)
    ref(p)
    p.add_argument("-o", "--output", required=True, type=output_file(".json", ".cbor", what="model file"),
                   help="the file to write: .json (WheelFed JSON) or .cbor")
    p.add_argument("--format", choices=("wheelfed", "xgboost-json"), default="wheelfed",
                   help="wheelfed: what wheelfed predict and the gateways read; xgboost-json: XGBoost's model "
                        "JSON (boosted models)")

    p = action("deploy", "sign a model version and push it to gateways; they answer active or rejected",
               ["WHEELFED_MQTT_PASSWORD=SECRET wheelfed model deploy activity --registry reg.db --key aggregator.key",
                "wheelfed model deploy activity:v2 --registry reg.db --clients gw-1,gw-2"], _deploy)
    ref(p)
    p.add_argument("--key", type=signing_key, default=DEFAULT_KEY, help="the signing key (wheelfed keygen)")
    p.add_argument("--target", type=gateway_id,
                   help="a personalised model: the one gateway it is for (default: the one it was registered for)")
    to_gateways(p)

    p = action("rollback", "gateways go back to their previous model (a signed instruction per gateway, naming "
                           "the model it runs and the one before, from the registry); the registry records where "
                           "each ended up",
               ["WHEELFED_MQTT_PASSWORD=SECRET wheelfed model rollback --registry reg.db --clients gw-3",
                "wheelfed model rollback --registry reg.db --key aggregator.key --reason 'misses transfers'"],
               _rollback)
    p.add_argument("--key", type=signing_key, default=DEFAULT_KEY,
                   help="the signing key (wheelfed keygen): gateways refuse an unsigned rollback")
    p.add_argument("--reason", default="",
                   help="why (signed, logged on the gateways and kept in the registry; default: none)")
    to_gateways(p)
