"""``keygen`` and ``model``: the signing key pair and the model registry.

``wheelfed model ACTION`` has one subcommand per action (list, show, compare, register, export,
deploy, rollback) so that each one's ``--help`` lists only its own options, and its arguments --
a model reference, a registry that must exist, a signing key -- are checked before a registry is
opened or a broker is contacted.

With a server configured (``--server URL`` or ``$WHEELFED_SERVER``, ``server_client.py``) the
actions go through its REST API instead of a registry file and the broker: list, show, compare
and export read the server's registry (:class:`ServerModels` answers the reading methods of
``aggregator.registry.Registry``, so the same code prints both), deploy and rollback ask the
server, which signs with its own key and waits for the gateways. ``register`` has no API: it
works on a registry file only.
"""

from __future__ import annotations

import argparse
import builtins
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from aggregator.algorithm_table import user_name
from aggregator.cli.server_client import ServerClient, add_server_options, server_client
from edge_client.cli.arguments import (
    MODEL_ID_PATTERN,
    add_subcommand,
    existing_file,
    gateway_id,
    gateway_ids,
    model_id,
    output_file,
    positive_float,
)
from edge_client.cli.connection import add_broker_options, aggregator_transport
from edge_client.cli.errors import CliError, UsageError
from edge_client.cli.model_files import load_model_file, model_file, model_file_bytes

if TYPE_CHECKING:  # the registry is imported when it is used, not to parse arguments
    from aggregator.registry import Deployment, ModelRecord

DEFAULT_REGISTRY = "wheelfed-registry.db"
DEFAULT_KEY = "aggregator.key"
#: Seconds deploy and rollback listen for the gateways' retained presence when --clients is not given.
DISCOVER_S = 2.0
#: Seconds deploy and rollback wait for the gateways' answers (a server uses its own deadline).
DEADLINE_S = 30.0
#: Seconds a deploy or rollback through a server may take: the server waits for the gateways.
SERVER_PUSH_S = 600.0


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
        raise argparse.ArgumentTypeError(
            f"no registry at {text} (wheelfed train --registry or wheelfed model "
            "register creates one; or pass --registry PATH)"
        )
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
        raise argparse.ArgumentTypeError(
            f"{text} is the public key (it goes to the gateways); --key takes the "
            f"private one, {path.with_suffix('.key')}"
        )
    try:
        load_signing_key(path, check_permissions=False)  # what it is first: "chmod 600" fixes no CSV
        return load_signing_key(path)
    except PermissionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{text} is not a signing key ({exc}); wheelfed keygen writes one, its .pub goes to the gateways"
        ) from None


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
        raise CliError(f"{exc} (use --force to replace the key: gateways must then trust the new public key)") from None
    print(
        f"signing key {secret} (keep it on the aggregator, mode 0600); public key {public} "
        f"(give it to every gateway: --trust {public}); key id {key.verify_key.key_id}",
        flush=True,
    )
    return 0


# -- model ---------------------------------------------------------------------------------------
def _with_registry(action, remote=None):
    """Run ``action(args, registry)`` with the registry open -- or, with a server configured,
    ``remote(args, client)`` (default: ``action`` on :class:`ServerModels`); errors are one line."""

    def run(args: argparse.Namespace) -> int:
        from aggregator.registry import Registry, RegistryError

        client = server_client(args)
        if client is not None:
            if args.registry is not None:
                raise UsageError(
                    f"--registry and a server ({client.url}) are two registries: give one (unset "
                    "$WHEELFED_SERVER to use a registry file)"
                )
            if remote is False:
                raise UsageError(
                    f"wheelfed model {args.action} works on a registry file: the server has no API "
                    "for it (run it with --registry on the server's registry, without --server)"
                )
            return (remote(args, client) if remote else action(args, ServerModels(client))) or 0
        path = args.registry or _default_registry(args.must_exist)
        try:
            with Registry(path) as registry:
                return action(args, registry) or 0
        except RegistryError as exc:
            raise CliError(str(exc)) from None

    return run


def _default_registry(must_exist: bool) -> Path:
    """``wheelfed-registry.db`` here, checked as ``--registry`` is (when read, it must exist)."""
    try:
        return existing_registry(DEFAULT_REGISTRY) if must_exist else Path(DEFAULT_REGISTRY)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(str(exc)) from None


def _option(registry) -> str:
    """How a hint names the registry: ``--registry FILE`` or ``--server URL``."""
    return getattr(registry, "option", None) or f"--registry {registry.where}"


class ServerModels:
    """A server's registry through its API, with the reading methods of
    ``aggregator.registry.Registry`` that ``model list/show/compare/export`` use.

    Parameters
    ----------
    client : ServerClient
        The configured server.
    """

    def __init__(self, client: ServerClient) -> None:
        self.client = client
        self.where = f"the server {client.url}"
        self.option = f"--server {client.url}"

    def list(self) -> builtins.list[ModelRecord]:  # named as Registry's
        return [_model_record(row) for row in self.client.pages("/api/models")]

    def record(self, model_id: str, version: int | None = None):
        if version is None:
            versions = [r.version for r in self.list() if r.model_id == model_id]
            if not versions:
                raise CliError(f"no model {model_id!r} on {self.where} (wheelfed model list {self.option} shows them)")
            version = max(versions)
        return _model_record(self.client.get(f"/api/models/{model_id}/{version}"))

    def model(self, model_id: str, version: int | None = None):
        from shared.model import TreeEnsemble

        record = self.record(model_id, version)
        data = self.client.download(f"/api/models/{record.model_id}/{record.version}/download")
        return record, TreeEnsemble.from_cbor(data)

    def deployments(self, model_id: str | None = None) -> builtins.list[Deployment]:
        from aggregator.registry import Deployment

        return [Deployment(**row) for row in self.client.pages("/api/deployments", model_id=model_id)]

    def running(self) -> dict:
        """Per gateway, its newest ``active`` row (the deployments come newest first)."""
        out: dict = {}
        for row in self.deployments():
            if row.state == "active":
                out.setdefault(row.client, row)
        return out


def _model_record(row: dict[str, Any]) -> ModelRecord:
    """A ``ModelRecord`` from the API's JSON (which adds ``label`` and ``running_on``)."""
    import dataclasses

    from aggregator.registry import ModelRecord

    return ModelRecord(**{f.name: row[f.name] for f in dataclasses.fields(ModelRecord) if f.name in row})


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
        print(
            f"{registry.where} holds no models yet (wheelfed model register FILE or wheelfed train --registry adds one)"
        )
        return
    states = _gateway_states(registry)
    rows = [("MODEL", "ALGORITHM", "KIND", "TREES", "HELD-OUT", "GATEWAYS")]
    for r in records:
        here = [
            f"{d.client}={d.state}"
            for d in states
            if (d.model_id, d.version) == (r.model_id, r.version) and d.state != "replaced"
        ]
        rows.append(
            (
                r.label,
                user_name(r.algorithm),
                r.kind,
                str(r.n_trees),
                _headline(r.metrics),
                " ".join(here) or "not deployed",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])


def _format_metrics(metrics: dict) -> str:
    """``held-out metrics (120 windows): accuracy 0.9167, ...`` -- NaN (e.g. an AUC with one
    class present) as n/a."""
    n = metrics.get("n")
    values = ", ".join(
        f"{k} {v:.4g}" if v == v else f"{k} n/a" for k, v in metrics.items() if k != "n" and isinstance(v, (int, float))
    )
    return f"held-out metrics{f' ({int(n)} windows)' if isinstance(n, (int, float)) else ''}: {values}"


def _show(args: argparse.Namespace, registry) -> None:
    record, model = registry.model(*args.ref)
    print(
        f"{record.label}: {user_name(record.algorithm)} {record.kind} model, {model.n_trees} trees, "
        f"{model.n_features} inputs; registered {time.strftime('%Y-%m-%d %H:%M', time.localtime(record.created))}"
    )
    print(f"  classes: {', '.join(map(str, record.classes)) or '- (regression)'}")
    print(
        f"  feature set: {record.feature_set_version or '- (not recorded in the model)'}; "
        f"for {f'gateway {record.target} only' if record.target else 'the whole fleet'}"
    )
    if record.metrics:
        print("  " + _format_metrics(record.metrics))
    else:
        print(
            "  no metrics (train with --evaluate to score it on the gateways' held-out windows, or "
            f"wheelfed model export {record.label} {_option(registry)} -o m.cbor and wheelfed predict "
            "RECORDING --model m.cbor)"
        )
    settings = ", ".join(f"{k}={v}" for k, v in model.metadata.items())
    print(
        textwrap.fill(
            f"training settings: {settings or 'none recorded'}",
            width=100,
            initial_indent="  ",
            subsequent_indent="    ",
            break_on_hyphens=False,
        )
    )
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
    print(
        f"registered {record.label} in {registry.where} ({user_name(record.algorithm)}, {record.n_trees} trees"
        f"{f', for {record.target} only' if record.target else ''})"
    )


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
    print(f"wrote {record.label} ({user_name(record.algorithm)}, {record.n_trees} trees) to {args.output}; {use}")


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
        raise CliError(
            f"no gateway online at {args.host}:{args.port} (none announced itself within "
            f"{DISCOVER_S:g} s); start the gateways, or name them with --clients to queue the "
            "request for them"
        )
    return transport, clients


def _key(args: argparse.Namespace):
    """``--key``, or the default key file checked as ``--key`` is."""
    if args.key is not None:
        return args.key
    try:
        return signing_key(DEFAULT_KEY)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"argument --key: {exc}") from None


def _deploy_target(args: argparse.Namespace, registry):
    """The version to deploy and the one gateway it is personalised for ("" for the fleet)."""
    record = registry.record(*args.ref)
    target = args.target or record.target
    if target and args.clients and args.clients != [target]:
        raise UsageError(
            f"{record.label} is personalised for {target}: deploy it to that gateway only, "
            f"not --clients {','.join(args.clients)}"
        )
    return record, target


def _local_only(args: argparse.Namespace, **why: str) -> None:
    """Options that have no meaning through a server: one usage line naming the first given."""
    for name, reason in why.items():
        if getattr(args, name) not in (None, ""):
            raise UsageError(f"--{name} is for a local registry: {reason}")


def _print_remote_answers(answer: dict[str, Any]) -> None:
    for client, reason in sorted(answer["rejected"].items()):
        print(f"  {client}: rejected; {reason}")
    for client in answer["pending"]:
        print(f"  {client}: no answer yet (the broker keeps the request until the gateway is back)")
    for client, reason in sorted(answer.get("skipped", {}).items()):
        print(f"  {client}: not asked: {reason}")


def _refused(what: str, rejected: dict[str, str]) -> CliError:
    client, reason = sorted(rejected.items())[0]
    more = f" (and {len(rejected) - 1} more, above)" if len(rejected) > 1 else ""
    return CliError(f"{what} by {client}: {reason}{more}")


SERVER_SIGNS = "the server signs with its own key (wheelfed server --key)"
SERVER_WAITS = "the server waits for the gateways as long as its --deadline says"


def _deploy_remote(args: argparse.Namespace, client: ServerClient) -> None:
    _local_only(args, key=SERVER_SIGNS, deadline=SERVER_WAITS)
    record, target = _deploy_target(args, ServerModels(client))
    answer = client.post(
        f"/api/models/{record.model_id}/{record.version}/deploy",
        {"clients": [target] if target else args.clients},
        timeout_s=SERVER_PUSH_S,
    )
    pending = f"; no answer yet from {', '.join(answer['pending'])}" if answer["pending"] else ""
    print(f"{answer['label']}: active on {', '.join(answer['active']) or 'none'}{pending}")
    _print_remote_answers(answer)
    if answer["rejected"]:
        raise _refused(f"{answer['label']} rejected", answer["rejected"])


def _rollback_remote(args: argparse.Namespace, client: ServerClient) -> None:
    _local_only(
        args, key=SERVER_SIGNS, deadline=SERVER_WAITS, reason="the server records its rollbacks as 'operator rollback'"
    )
    clients = args.clients or [row["gateway"] for row in client.pages("/api/gateways") if row["online"]]
    if not clients:
        raise CliError(f"no gateway is online at the server {client.url}; name them with --clients")
    answer = client.post("/api/rollback", {"clients": clients}, timeout_s=SERVER_PUSH_S)
    print(f"rollback: rolled back {', '.join(answer['active']) or 'none'}")
    _print_remote_answers(answer)
    if answer["rejected"]:
        raise _refused("rollback refused", answer["rejected"])


def _compare(args: argparse.Namespace, registry) -> None:
    """Two versions side by side: what they are and their held-out metrics, with the change."""
    first, second = registry.record(*args.first), registry.record(*args.second)
    rows = [
        ("", first.label, second.label, ""),
        ("algorithm", user_name(first.algorithm), user_name(second.algorithm), ""),
        ("trees", str(first.n_trees), str(second.n_trees), ""),
        ("feature set", first.feature_set_version or "-", second.feature_set_version or "-", ""),
    ]
    for name in sorted(set(first.metrics) | set(second.metrics)):
        a, b = first.metrics.get(name), second.metrics.get(name)
        numbers = all(isinstance(v, (int, float)) and v == v for v in (a, b))
        rows.append(
            (
                name,
                "-" if a is None else f"{a:.4g}",
                "-" if b is None else f"{b:.4g}",
                f"{b - a:+.4g}" if numbers else "",
            )
        )
    if not (first.metrics or second.metrics):
        rows.append(("metrics", "none", "none", "(train with --evaluate to score them)"))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print(("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[3]).rstrip())


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

    record, target = _deploy_target(args, registry)  # an unknown model fails before any connection
    key = _key(args)
    transport, clients = _connect_and_find(args, [target] if target else args.clients)
    try:
        result = deploy(
            RoundEngine(transport),
            registry,
            key,
            record.model_id,
            record.version,
            clients,
            target=target,
            deadline_s=args.deadline or DEADLINE_S,
        )
    finally:
        transport.close()
    pending = f"; no answer yet from {', '.join(result.pending)}" if result.pending else ""
    print(f"{result.label}: active on {', '.join(result.active) or 'none'}{pending}")
    _print_answers(result)
    if result.rejected:
        raise _refused(f"{result.label} rejected", result.rejected)


def _rollback(args: argparse.Namespace, registry) -> None:
    from aggregator.deployment import rollback
    from aggregator.rounds import RoundEngine

    key = _key(args)
    transport, clients = _connect_and_find(args, args.clients)
    try:
        result = rollback(
            RoundEngine(transport), registry, key, clients, reason=args.reason, deadline_s=args.deadline or DEADLINE_S
        )
    finally:
        transport.close()
    rolled_back = [c for c, status in sorted(result.statuses.items()) if status.state == "active"]
    print(f"rollback: rolled back {', '.join(rolled_back) or 'none'}")
    _print_answers(result)
    if result.rejected:
        raise _refused("rollback refused", result.rejected)


def add(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(
        sub,
        "keygen",
        "create the aggregator's model-signing key pair (.key and .pub)",
        examples=["wheelfed keygen -o aggregator.key"],
    )
    p.add_argument(
        "-o",
        "--output",
        type=output_file(".key", what="key file"),
        default=Path(DEFAULT_KEY),
        help="the private key; the public key goes next to it as .pub",
    )
    p.add_argument("--force", action="store_true", help="overwrite existing key files")
    p.set_defaults(func=_keygen)

    model = add_subcommand(
        sub,
        "model",
        "the model registry: list, show, compare, register, export, deploy, rollback",
        description="The model registry: list, show, compare, register, export, deploy, "
        "rollback.\n"
        "wheelfed model ACTION --help explains an action and shows its examples.\n\n"
        "With --server URL (or $WHEELFED_SERVER) every action but register goes "
        "through that wheelfed\nserver's API (token from $WHEELFED_TOKEN or "
        "--token-file); the server signs deploys and rollbacks:\n"
        "  WHEELFED_TOKEN=TOKEN wheelfed model deploy activity:v2 --server "
        "http://127.0.0.1:8080",
        examples=[
            "wheelfed model list --registry reg.db",
            "wheelfed model register model.cbor --registry reg.db",
            "wheelfed model show activity:v2 --registry reg.db",
            "wheelfed model compare activity:v1 activity:v2 --registry reg.db",
            "wheelfed model export activity --registry reg.db -o activity.cbor",
            "wheelfed model deploy activity --registry reg.db --key aggregator.key --clients gw-1",
            "wheelfed model rollback --registry reg.db --clients gw-3",
        ],
    )
    actions = model.add_subparsers(dest="action", required=True, metavar="ACTION")

    def action(name: str, help: str, examples: list[str], func, *, registry_must_exist: bool = True, remote=None):
        p = add_subcommand(actions, name, help, examples=examples)
        if registry_must_exist:
            p.add_argument(
                "--registry", type=existing_registry, help=f"registry file (SQLite; default: {DEFAULT_REGISTRY})"
            )
        else:
            p.add_argument(
                "--registry", type=Path, help=f"registry file (SQLite; created if missing; default: {DEFAULT_REGISTRY})"
            )
        add_server_options(p)
        p.set_defaults(func=_with_registry(func, remote), must_exist=registry_must_exist)
        return p

    def ref(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "ref", type=model_ref, metavar="MODEL_ID[:vN]", help="a registered model; without :vN the latest version"
        )

    def to_gateways(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--clients", type=gateway_ids, help="comma-separated gateway ids (default: every gateway online)"
        )
        p.add_argument(
            "--deadline",
            type=positive_float,
            help=f"seconds to wait for the gateways' answers (default: {DEADLINE_S:g}; a server waits "
            "as its own setting says)",
        )
        add_broker_options(
            p, username_help="broker user name (default: aggregator); password from $WHEELFED_MQTT_PASSWORD"
        )

    action(
        "list",
        "every registered version, its held-out accuracy and the gateways running it",
        ["wheelfed model list --registry reg.db"],
        _list,
    )

    p = action(
        "show",
        "one model version: classes, feature set, metrics, training settings, gateways",
        ["wheelfed model show activity --registry reg.db", "wheelfed model show activity:v2 --registry reg.db"],
        _show,
    )
    ref(p)

    p = action(
        "compare",
        "two model versions side by side: algorithm, trees, feature set, held-out metrics and their change",
        ["wheelfed model compare activity:v1 activity:v2 --registry reg.db"],
        _compare,
    )
    p.add_argument("first", type=model_ref, metavar="MODEL_ID[:vN]", help="the version to compare from")
    p.add_argument("second", type=model_ref, metavar="MODEL_ID[:vN]", help="the version to compare with")

    p = action(
        "register",
        "add a model file to the registry as the next version of its model id",
        [
            "wheelfed model register model.json --registry reg.db",
            "wheelfed model register more.cbor --model-id activity --registry reg.db",
        ],
        _register,
        registry_must_exist=False,
        remote=False,
    )
    p.add_argument(
        "file",
        nargs="?",
        type=model_file,
        metavar="FILE",
        help="a model file (.json or CBOR), e.g. from wheelfed train -o",
    )
    p.add_argument(
        "--file", dest="file_option", type=model_file, metavar="FILE", help="the same as FILE (the older spelling)"
    )
    p.add_argument(
        "--model-id",
        type=model_id,
        help="the model's name (default: the file's name without its "
        "suffix: model.json registers model:v1, then model:v2, ...)",
    )
    p.add_argument("--target", type=gateway_id, help="a personalised model: the one gateway it is for")

    p = action(
        "export",
        "write a registered model to a file for wheelfed predict, a gateway, or XGBoost",
        [
            "wheelfed model export activity --registry reg.db -o activity.cbor",
            "wheelfed model export activity:v2 --registry reg.db -o activity.json",
            "wheelfed model export activity --registry reg.db -o booster.json --format xgboost-json",
        ],
        _export,
    )
    ref(p)
    p.add_argument(
        "-o",
        "--output",
        required=True,
        type=output_file(".json", ".cbor", what="model file"),
        help="the file to write: .json (WheelFed JSON) or .cbor",
    )
    p.add_argument(
        "--format",
        choices=("wheelfed", "xgboost-json"),
        default="wheelfed",
        help="wheelfed: what wheelfed predict and the gateways read; xgboost-json: XGBoost's model "
        "JSON (boosted models)",
    )

    p = action(
        "deploy",
        "sign a model version and push it to gateways; they answer active or rejected",
        [
            "WHEELFED_MQTT_PASSWORD=SECRET wheelfed model deploy activity --registry reg.db --key aggregator.key",
            "wheelfed model deploy activity:v2 --registry reg.db --clients gw-1,gw-2",
        ],
        _deploy,
        remote=_deploy_remote,
    )
    ref(p)
    p.add_argument("--key", type=signing_key, help=f"the signing key (wheelfed keygen; default: {DEFAULT_KEY})")
    p.add_argument(
        "--target",
        type=gateway_id,
        help="a personalised model: the one gateway it is for (default: the one it was registered for)",
    )
    to_gateways(p)

    p = action(
        "rollback",
        "gateways go back to their previous model (a signed instruction per gateway, naming "
        "the model it runs and the one before, from the registry); the registry records where "
        "each ended up",
        [
            "WHEELFED_MQTT_PASSWORD=SECRET wheelfed model rollback --registry reg.db --clients gw-3",
            "wheelfed model rollback --registry reg.db --key aggregator.key --reason 'misses transfers'",
        ],
        _rollback,
        remote=_rollback_remote,
    )
    p.add_argument(
        "--key",
        type=signing_key,
        help=f"the signing key (wheelfed keygen; default: {DEFAULT_KEY}): gateways refuse an unsigned rollback",
    )
    p.add_argument(
        "--reason", default="", help="why (signed, logged on the gateways and kept in the registry; default: none)"
    )
    to_gateways(p)
