"""The ``wheelfed`` command. Subcommands import their modules lazily, so the gateway's
commands work with the edge dependencies alone. It lives with the gateway's package because the
gateway is where it must stay lightest (``tests/edge_client/test_edge_dependencies.py``);
``shared/`` imports nothing from the packages above it."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

from shared import __version__


def _cmd_broker(args: argparse.Namespace) -> int:
    import signal
    import tempfile
    import threading
    from pathlib import Path

    from aggregator.broker import BrokerUser, MosquittoBroker, mosquitto_available

    users = [BrokerUser.parse(spec) for spec in args.user]
    if not users and not args.tls_cert_dir:
        raise SystemExit("wheelfed broker: give at least one --user NAME:PASSWORD (the aggregator and each gateway)")
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="wheelfed-broker-"))
    if args.embedded or not mosquitto_available():
        if not args.embedded:
            print("mosquitto is not installed; starting the embedded broker (MQTT 3.1.1 only)", file=sys.stderr)
        from aggregator.broker import EmbeddedBroker

        broker = EmbeddedBroker(run_dir, users=users, port=args.port, bind_address=args.bind)
    else:
        broker = MosquittoBroker(run_dir, users=users, port=args.port, bind_address=args.bind,
                                 tls_cert_dir=args.tls_cert_dir)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with broker:
        print(f"broker listening on {broker.host}:{broker.port} (state in {run_dir}); Ctrl-C stops it", flush=True)
        stop.wait()
    return 0


def _exit_on_sigterm() -> None:
    """Turn SIGTERM into SystemExit so ``with``/``finally`` blocks stop what the command started."""
    import signal

    def stop(*_: object) -> None:
        raise SystemExit(143)

    signal.signal(signal.SIGTERM, stop)


def _mqtt_config(args: argparse.Namespace):
    """The broker connection from the gateway flags, or None with --no-broker."""
    from shared.transport.mqtt import MqttConfig, TlsConfig

    if args.no_broker:
        return None
    if (args.tls_cert or args.tls_key) and not args.tls_ca:
        raise SystemExit("wheelfed gateway: --tls-cert/--tls-key need --tls-ca")
    tls = TlsConfig(args.tls_ca, args.tls_cert, args.tls_key) if args.tls_ca else None
    password = None if tls else os.environ.get("WHEELFED_MQTT_PASSWORD")
    return MqttConfig(host=args.host, port=args.port, username=None if tls else (args.username or args.client_id),
                      password=password, protocol=args.protocol, tls=tls)


def _print_stats(stats: dict[str, object]) -> None:
    print(" ".join(f"{k}={v}" for k, v in stats.items()), flush=True)


def _cmd_gateway(args: argparse.Namespace) -> int:
    from pathlib import Path

    from edge_client.gateway import Gateway, GatewayConfig
    from edge_client.store import RetentionPolicy

    store = Path(args.store or f"{args.client_id}-windows.db")
    retention = RetentionPolicy(max_windows=args.max_windows, max_age_s=args.max_age_days * 86400 if args.max_age_days else None)
    from edge_client.alerts import DEFAULT_RULES, load_rules
    from edge_client.live import LiveConfig

    rules = load_rules(args.alerts) if args.alerts else DEFAULT_RULES
    gateway = Gateway(GatewayConfig(client_id=args.client_id, store_path=store, serial_port=args.serial,
                                    baudrate=args.baud, mqtt=_mqtt_config(args), session_id=args.session,
                                    retention=retention, holdout_fraction=args.holdout_fraction,
                                    model_dir=Path(args.model_dir) if args.model_dir else None,
                                    trusted_keys=tuple(Path(k) for k in args.trust), engine=args.engine,
                                    alert_rules=rules, live=LiveConfig(publish_every_s=args.publish_every)))
    gateway.install_signal_handlers()
    print(f"gateway {args.client_id}: session {gateway.session_id}, store {store}, serial {args.serial or '-'}, "
          f"broker {'-' if args.no_broker else f'{args.host}:{args.port}'}", flush=True)
    gateway.run(stats_every_s=args.stats_every, on_stats=_print_stats if args.stats_every else None)
    _print_stats(gateway.final_stats)
    return 0


def _cmd_features(args: argparse.Namespace) -> int:
    from edge_client.processing import extract_recording

    table, stats = extract_recording(args.recording)
    table.save(args.output)
    labelled = sum(y is not None for y in table.labels)
    print(f"{args.output}: {len(table.X)} windows x {len(table.names)} features ({labelled} labelled), "
          f"feature set {table.feature_set_version}; {stats.frames} frames", flush=True)
    return 0


def _cmd_record(args: argparse.Namespace) -> int:
    import threading

    from firmware_bridge.recorder import record
    from firmware_bridge.recording import RecordingMetadata

    stop = threading.Event()
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if args.duration:
        threading.Timer(args.duration, stop.set).start()
    metadata = RecordingMetadata(session_id=args.session or os.path.basename(args.output).split(".")[0],
                                 subject=args.subject, source=f"serial:{args.serial}")
    print(f"recording {args.serial} -> {args.output}; Ctrl-C stops", flush=True)
    stats = record(args.serial, args.output, metadata, stop, baudrate=args.baud)
    print(f"recorded: {stats}", flush=True)
    return 0


def _cmd_replay(args: argparse.Namespace) -> int:
    import threading

    from firmware_bridge.replay import open_pty, replay

    _exit_on_sigterm()
    if args.pty:
        master, slave = open_pty()
        print(f"pty: {slave}", flush=True)
        port: str | int = master
        wait = 60.0
    elif args.to:
        port, wait = args.to, None
    else:
        raise SystemExit("wheelfed replay: give --to PORT or --pty")
    stats = replay(args.recording, port, speed=args.speed, baudrate=args.baud, stop_event=threading.Event(),
                   wait_for_reader_s=wait)
    print(f"replayed: {stats}", flush=True)
    return 0


def _cmd_import(args: argparse.Namespace) -> int:
    from firmware_bridge.importers import ecg, seglearn_watch

    importer = {"seglearn": seglearn_watch.import_all, "ecg": ecg.import_all}[args.dataset]
    paths = importer(args.output)
    for path in paths:
        print(path)
    return 0


def _training_algorithm(args: argparse.Namespace, feature_set: str, init_model, privacy: dict):
    """The configured algorithm of ``wheelfed train`` (``ValueError`` names a bad option)."""
    from aggregator.algorithms import FedForest, FedSCSXGB

    if args.algorithm == "fedforest":
        if init_model is not None:
            raise SystemExit("wheelfed train: --init-model continues boosting; it does not apply to fedforest")
        if args.dp_noise_multiplier is not None:
            raise SystemExit("wheelfed train: --dp-noise-multiplier is implemented for fedscs-xgb only")
        if args.client_splits and not args.paper_protocol:
            raise SystemExit("wheelfed train: --client-splits needs per-gateway statistics: add --paper-protocol")
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


def _cmd_train(args: argparse.Namespace) -> int:
    from pathlib import Path

    from aggregator.evaluation import evaluate_federated
    from aggregator.fleet import train_on_fleet
    from aggregator.jobs import JobSettings, TrainingError
    from edge_client.features import FEATURE_SET_VERSION

    _exit_on_sigterm()
    if not (args.output or args.registry):
        raise SystemExit("wheelfed train: give -o FILE and/or --registry DB so the model is kept somewhere")
    init_model = _load_model_file(args.init_model) if args.init_model else None
    feature_set = args.feature_set or FEATURE_SET_VERSION
    if args.paper_protocol and not args.no_secure_aggregation:
        print("warning: --paper-protocol sends per-window data (atoms) or per-gateway sketches of actual values "
              "to the aggregator; secure aggregation does not apply (see PRIVACY.md)", file=sys.stderr, flush=True)
    privacy = dict(min_crowd=args.min_crowd,
                   secure_aggregation=not (args.no_secure_aggregation or args.paper_protocol))
    try:
        algorithm = _training_algorithm(args, feature_set, init_model, privacy)
    except ValueError as exc:
        raise SystemExit(f"wheelfed train: {exc}") from None
    clients = [c for c in args.clients.split(",") if c] if args.clients else None
    print(f"training {algorithm.name} on {'the online gateways' if clients is None else ', '.join(clients)} "
          f"via {args.host}:{args.port}", flush=True)
    transport = _aggregator_transport(args)
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
        raise SystemExit(f"wheelfed train: {exc}") from None
    finally:
        transport.close()
    if args.output:
        data = model.to_json(indent=1).encode() if args.output.endswith(".json") else model.to_cbor()
        Path(args.output).write_bytes(data)
    if args.registry:
        from aggregator.registry import Registry

        with Registry(args.registry) as registry:
            record = registry.add(args.model_id or algorithm.name, model,
                                  metrics=evaluation.metrics if args.evaluate else None)
        print(f"registered {record.label} in {args.registry}", flush=True)
    print(f"{args.output or 'model'}: {model.n_trees} trees, classes {list(model.classes)}; job {job.job_id}, "
          f"{job.rounds} protocol rounds, rejected replies {job.rejected or 'none'}", flush=True)
    return 0


def _aggregator_transport(args: argparse.Namespace):
    """The aggregator's MQTT connection from the common broker flags (connected)."""
    from shared.protocol.topics import AGGREGATOR_ID
    from shared.transport.mqtt import MqttConfig, MqttTransport, TlsConfig

    tls = TlsConfig(args.tls_ca, args.tls_cert, args.tls_key) if args.tls_ca else None
    mqtt = MqttConfig(host=args.host, port=args.port, username=None if tls else args.username,
                      password=None if tls else os.environ.get("WHEELFED_MQTT_PASSWORD"), protocol=args.protocol, tls=tls)
    transport = MqttTransport(AGGREGATOR_ID, mqtt, presence=False)
    try:
        transport.connect(wait=True, timeout_s=30.0)
    except (ConnectionError, TimeoutError) as exc:
        raise SystemExit(f"wheelfed: cannot reach the broker at {args.host}:{args.port}: {exc}") from None
    return transport


def _cmd_keygen(args: argparse.Namespace) -> int:
    from pathlib import Path

    from shared.signing import SigningKey

    key = SigningKey.generate()
    secret, public = Path(args.output), Path(args.output).with_suffix(".pub")
    try:
        key.save(secret, overwrite=args.force)
        key.verify_key.save(public, overwrite=args.force)
    except FileExistsError as exc:
        raise SystemExit(f"wheelfed keygen: {exc} (use --force to replace the key: gateways must then trust the "
                         "new public key)") from None
    print(f"signing key {secret} (keep it on the aggregator, mode 0600); public key {public} "
          f"(give it to every gateway: --trust {public}); key id {key.verify_key.key_id}", flush=True)
    return 0


def _load_model_file(path: str):
    from pathlib import Path

    from shared.model import TreeEnsemble

    raw = Path(path).read_bytes()
    return TreeEnsemble.from_json(raw) if path.endswith(".json") else TreeEnsemble.from_cbor(raw)


def _split_ref(ref: str) -> tuple[str, int | None]:
    model_id, _, version = ref.partition(":v")
    return model_id, int(version) if version else None


def _cmd_model(args: argparse.Namespace) -> int:
    from aggregator.registry import Registry, RegistryError

    try:
        with Registry(args.registry) as registry:
            if args.action == "list":
                deployments = registry.deployments()
                for r in registry.list():
                    states = [f"{c}={s}" for m, v, c, s, _ in deployments if (m, v) == (r.model_id, r.version)]
                    metrics = " ".join(f"{k}={v:.4g}" for k, v in r.metrics.items() if isinstance(v, float))
                    print(f"{r.label:24} {r.algorithm:12} {r.kind:8} trees={r.n_trees:<5} {metrics} "
                          f"{' '.join(states) or 'not deployed'}")
            elif args.action == "register":
                record = registry.add(args.model_id, _load_model_file(args.file), target=args.target or "")
                print(f"registered {record.label} ({record.algorithm}, {record.n_trees} trees)")
            elif args.action == "show":
                record, model = registry.model(*_split_ref(args.ref))
                print(f"{record.label}: {record.algorithm} {record.kind} model, {model.n_trees} trees, "
                      f"{model.n_features} inputs, classes {record.classes}, feature set {record.feature_set_version}, "
                      f"target {record.target or 'the fleet'}")
                print(f"metadata: {model.metadata}\nmetrics: {record.metrics}")
                for _m, _v, client, state, detail in registry.deployments(record.model_id):
                    if _v == record.version:
                        print(f"  {client}: {state} {detail}")
            else:
                return _deploy_or_rollback(args, registry)
    except RegistryError as exc:
        raise SystemExit(f"wheelfed model: {exc}") from None
    return 0


def _deploy_or_rollback(args: argparse.Namespace, registry) -> int:
    from aggregator.deployment import deploy, rollback
    from aggregator.fleet import discover_gateways
    from aggregator.rounds import RoundEngine
    from shared.signing import load_signing_key

    transport = _aggregator_transport(args)
    try:
        clients = [c for c in args.clients.split(",") if c] if args.clients else discover_gateways(transport)
        if not clients:
            raise SystemExit("wheelfed model: no gateway online; name them with --clients")
        engine = RoundEngine(transport)
        if args.action == "deploy":
            model_id, version = _split_ref(args.ref)
            result = deploy(engine, registry, load_signing_key(args.key), model_id, version, clients,
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


def _cmd_predict(args: argparse.Namespace) -> int:
    import numpy as np

    from edge_client.processing import extract_recording
    from shared.model import client_index, model_inputs

    model = _load_model_file(args.model)
    table, _ = extract_recording(args.recording)
    if model.feature_set_version and model.feature_set_version != table.feature_set_version:
        raise SystemExit(f"wheelfed predict: the model expects feature set {model.feature_set_version!r}, the "
                         f"recording gives {table.feature_set_version!r}")
    X = model_inputs(model, table.X.astype(np.float32), client_index(model, args.client or ""))
    predicted = model.predict(X)
    labels = table.labels
    if args.output:
        with open(args.output, "w") as fh:
            fh.write("start_us,end_us,label,predicted\n")
            for a, b, y, p in zip(table.start_us, table.end_us, labels, predicted):
                fh.write(f"{a},{b},{'' if y is None else y},{p}\n")
    known = np.array([y is not None for y in labels])
    print(f"{args.recording}: {len(predicted)} windows predicted with {args.model}")
    if known.any():
        truth = np.array([str(y) for y in labels[known]])
        guess = np.array([str(p) for p in predicted[known]])
        print(f"accuracy on {int(known.sum())} labelled windows: {(truth == guess).mean():.4f}")
        for label in sorted(set(truth)):
            rows = truth == label
            print(f"  {label:24} {int(rows.sum()):6} windows  recall {(guess[rows] == label).mean():.4f}")
    return 0


def _cmd_smoke(args: argparse.Namespace) -> int:
    from aggregator.smoke import SmokeConfig, run_smoke

    _exit_on_sigterm()
    print("WheelFed foundation smoke run: broker, aggregator round engine and gateway processes over MQTT.\n",
          flush=True)
    try:
        report = run_smoke(SmokeConfig(n_gateways=args.gateways, broker=args.broker))
    except KeyboardInterrupt:
        print("interrupted: everything the smoke run started has been stopped", file=sys.stderr)
        return 130
    return 0 if report.rejoined else 1


DEMO_HELP = """\
The WheelFed fleet on real recorded sessions, end to end, on this machine.

One `wheelfed gateway` process per subject of the bundled seglearn smartwatch recordings (10
subjects doing 7 shoulder exercises), each fed its session through a pseudo-terminal exactly as
a wheelchair's sensor link would (serial framing -> filtering -> resampling -> windows ->
features -> labelled store). The sessions are labelled only at the start (as when a carer
annotates the first minutes). An aggregator process trains FedSCS-XGB and FedForest over the
fleet from sketches and statistics alone (no raw data leaves a gateway), scores them on every
gateway's held-out windows, compares them with gateways learning alone, and deploys the better
model, signed; every gateway then recognises its live stream. Midway one gateway is killed and
restarted; later labels trigger a retraining that is deployed only if it does not regress.
The summary compares federated, local-only and centralized training, and counts the bytes.
"""


def _cmd_demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from aggregator.demo.orchestrator import DemoConfig, run_demo

    _exit_on_sigterm()
    config = DemoConfig(subjects=args.subjects, speed=args.speed, rounds=args.rounds, trees=args.trees,
                        algorithm=args.algorithm, kill_gateway=not args.no_kill, keep_running=args.keep_running,
                        broker=args.broker, run_dir=Path(args.run_dir) if args.run_dir else None,
                        report_path=Path(args.report) if args.report else None)
    print(DEMO_HELP.splitlines()[0] + f" ({config.subjects} gateways; details: wheelfed demo --help)\n", flush=True)
    try:
        report = run_demo(config)
    except KeyboardInterrupt:
        print("\ninterrupted: everything the demo started has been stopped", file=sys.stderr)
        return 130
    except (TimeoutError, RuntimeError) as exc:
        print(f"\nwheelfed demo failed: {exc} (logs in the run directory; --run-dir keeps them)", file=sys.stderr)
        return 1
    return 0 if report.all_received_model else 1


def _add_aggregator_broker_args(p: argparse.ArgumentParser) -> None:
    """How the aggregator-side commands reach the broker (``_aggregator_transport``)."""
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=1883)
    p.add_argument("--username", default="aggregator", help="password from $WHEELFED_MQTT_PASSWORD")
    p.add_argument("--protocol", type=int, choices=(4, 5), default=5)
    p.add_argument("--tls-ca", help="CA certificate: connect with TLS")
    p.add_argument("--tls-cert", help="the aggregator's certificate (CN = aggregator)")
    p.add_argument("--tls-key", help="the aggregator's private key")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wheelfed", description="Federated tree learning for wheelchair sensor gateways.")
    parser.add_argument("--version", action="version", version=f"wheelfed {__version__}")
    parser.add_argument("--log-level", default="WARNING", help="DEBUG, INFO, WARNING (default), ERROR")
    parser.add_argument("--log-json", action="store_true", help="one JSON object per log line")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("broker", help="run an MQTT broker configured for WheelFed (mosquitto, else embedded)")
    p.add_argument("--user", action="append", default=[], metavar="NAME:PASSWORD",
                   help="a broker account; the name is the client id (repeat for the aggregator and every gateway)")
    p.add_argument("--port", type=int, default=1883)
    p.add_argument("--bind", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--run-dir", help="where the rendered config, password file and persistence go")
    p.add_argument("--tls-cert-dir", help="directory with ca.crt, broker.crt, broker.key: mutual TLS, CN = client id")
    p.add_argument("--embedded", action="store_true", help="use the embedded amqtt broker even if mosquitto exists")
    p.set_defaults(func=_cmd_broker)

    p = sub.add_parser("gateway", help="run a gateway: serial -> pipeline -> window store, and answer the aggregator")
    p.add_argument("--client-id", required=True)
    p.add_argument("--serial", help="sensor link: device path, pty path or pyserial URL (none: no sensors)")
    p.add_argument("--baud", type=int, default=115200)
    p.add_argument("--store", help="window store (SQLite); default CLIENT_ID-windows.db")
    p.add_argument("--session", help="session id for the stored windows (default: client id + start time)")
    p.add_argument("--max-windows", type=int, help="retention: keep at most this many windows")
    p.add_argument("--max-age-days", type=float, help="retention: drop windows stored longer ago")
    p.add_argument("--holdout-fraction", type=float, default=0.0,
                   help="keep the last share of each session's labelled windows out of training, for evaluation")
    p.add_argument("--model-dir", help="where the active and previous model live (default: CLIENT_ID-models/)")
    p.add_argument("--trust", action="append", default=[], metavar="PUBKEY",
                   help="the aggregator's public key file (wheelfed keygen); repeat during a key rotation")
    p.add_argument("--engine", choices=("auto", "numpy", "tflite"), default="auto",
                   help="inference engine (auto: TFLite when installed and faster)")
    p.add_argument("--alerts", help="JSON file of alert rules (default: pressure relief 30 min, lying 2 h)")
    p.add_argument("--publish-every", type=float, default=10.0, help="seconds between prediction batches")
    p.add_argument("--stats-every", type=float, default=10.0, help="seconds between status lines (0: none)")
    p.add_argument("--no-broker", action="store_true", help="collect only; do not connect to an MQTT broker")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=1883)
    p.add_argument("--username", help="broker username (default: the client id); password from $WHEELFED_MQTT_PASSWORD")
    p.add_argument("--protocol", type=int, choices=(4, 5), default=5, help="MQTT 5 (default) or 4 = 3.1.1")
    p.add_argument("--tls-ca", help="CA certificate: connect with TLS (then the client certificate's CN is the identity)")
    p.add_argument("--tls-cert", help="this gateway's certificate (CN = client id)")
    p.add_argument("--tls-key", help="this gateway's private key")
    p.set_defaults(func=_cmd_gateway)

    p = sub.add_parser("features", help="batch features of a recording (the gateway's own data path)")
    p.add_argument("recording")
    p.add_argument("-o", "--output", required=True, help="output file: .npz or .csv")
    p.set_defaults(func=_cmd_features)

    p = sub.add_parser("record", help="record a serial sensor link into a recording file")
    p.add_argument("--serial", required=True)
    p.add_argument("--baud", type=int, default=115200)
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--session", help="session id (default: the output file's name)")
    p.add_argument("--subject")
    p.add_argument("--duration", type=float, help="stop after this many seconds (default: Ctrl-C)")
    p.set_defaults(func=_cmd_record)

    p = sub.add_parser("replay", help="play a recording into a serial port or a new pty")
    p.add_argument("recording")
    p.add_argument("--to", help="serial device or pty path to write to")
    p.add_argument("--pty", action="store_true", help="create a pty, print its path, wait for a reader")
    p.add_argument("--speed", type=float, default=1.0, help="1 = real time, N = N times faster, 0 = as fast as possible")
    p.add_argument("--baud", type=int, default=115200)
    p.set_defaults(func=_cmd_replay)

    p = sub.add_parser("import", help="turn bundled real datasets into recordings (seglearn watch IMU, ECG)")
    p.add_argument("dataset", choices=("seglearn", "ecg"))
    p.add_argument("-o", "--output", required=True, help="directory for the recordings")
    p.set_defaults(func=_cmd_import)

    p = sub.add_parser("train", help="train a model on the online gateways over MQTT (aggregator side)")
    p.add_argument("--algorithm", choices=("fedscs-xgb", "fedforest"), default="fedscs-xgb")
    p.add_argument("--clients", help="comma-separated gateway ids (default: every gateway online)")
    p.add_argument("-o", "--output", help="model file: .json, else CBOR")
    p.add_argument("--registry", help="also register the model (and its held-out metrics) in this registry")
    p.add_argument("--model-id", help="the registered model's name (default: the algorithm's)")
    p.add_argument("--rounds", type=int, default=10, help="fedscs-xgb: boosting rounds")
    p.add_argument("--trees", type=int, default=50, help="fedforest: number of trees")
    p.add_argument("--max-depth", type=int, help="tree depth (default: 4 fedscs-xgb, 8 fedforest)")
    p.add_argument("--bins", type=int, help="bins / candidates per feature (default: 256 fedscs-xgb, 32 fedforest)")
    p.add_argument("--min-samples-leaf", type=int, default=5, help="fedforest: smallest leaf")
    p.add_argument("--client-splits", action="store_true", help="fedforest: also split on the gateway (H)")
    p.add_argument("--evaluate", action="store_true", help="score the model on the gateways' held-out windows")
    p.add_argument("--learning-rate", type=float, default=0.2)
    p.add_argument("--reg-lambda", type=float, default=1.0)
    p.add_argument("--gamma", type=float, default=0.1, help="Eq. 1's split penalty (xgboost's gamma is twice it)")
    p.add_argument("--sketch", choices=("summary", "ddsketch"), default="summary",
                   help="fedscs-xgb with --paper-protocol: the per-gateway sketch")
    p.add_argument("--paper-protocol", action="store_true",
                   help="the papers' protocols (fedscs-xgb atoms, fedforest per-gateway sketches), for reproduction: "
                        "they reveal per-window data to the aggregator (PRIVACY.md)")
    p.add_argument("--no-secure-aggregation", action="store_true",
                   help="send the histogram protocol's sums in the clear (the aggregator then sees each gateway's)")
    p.add_argument("--min-crowd", type=int, default=5,
                   help="no split leaves fewer windows than this fleet-wide (histogram protocol)")
    p.add_argument("--dp-noise-multiplier", type=float,
                   help="fedscs-xgb: differential privacy, Gaussian noise of this many times each sum's "
                        "sensitivity (epsilon reported; off by default)")
    p.add_argument("--client-fraction", type=float, default=1.0, help="share of gateways sampled per round")
    p.add_argument("--feature-set", help="feature set version to train on (default: this release's)")
    p.add_argument("--init-model", help="continue boosting from this model file (periodic retraining)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--deadline", type=float, default=120.0, help="seconds a round waits for replies")
    p.add_argument("--min-fraction", type=float, default=0.5, help="share of selected gateways a round needs")
    _add_aggregator_broker_args(p)
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("keygen", help="create the aggregator's model-signing key pair (.key and .pub)")
    p.add_argument("-o", "--output", default="aggregator.key")
    p.add_argument("--force", action="store_true", help="overwrite existing key files")
    p.set_defaults(func=_cmd_keygen)

    p = sub.add_parser("model", help="the model registry: list, show, register, deploy, rollback")
    p.add_argument("action", choices=("list", "show", "register", "deploy", "rollback"))
    p.add_argument("ref", nargs="?", help="MODEL_ID[:vN] (show, deploy), or a model file (register)")
    p.add_argument("--registry", default="wheelfed-registry.db", help="registry file (SQLite)")
    p.add_argument("--model-id", help="register: the model's name")
    p.add_argument("--file", help="register: a model file (.json or CBOR)")
    p.add_argument("--key", default="aggregator.key", help="deploy: the signing key (wheelfed keygen)")
    p.add_argument("--target", help="a personalised model: the one gateway it is for")
    p.add_argument("--clients", help="comma-separated gateway ids (default: every gateway online)")
    p.add_argument("--reason", default="", help="rollback: why (logged on the gateways)")
    p.add_argument("--deadline", type=float, default=30.0, help="seconds to wait for the gateways' answers")
    _add_aggregator_broker_args(p)
    p.set_defaults(func=_cmd_model)

    p = sub.add_parser("predict", help="offline batch prediction of a recording (per-label accuracy if labelled)")
    p.add_argument("recording")
    p.add_argument("--model", required=True, help="model file (.json or CBOR)")
    p.add_argument("--client", help="the gateway id, for models that split on the client")
    p.add_argument("-o", "--output", help="CSV of per-window predictions")
    p.set_defaults(func=_cmd_predict)

    p = sub.add_parser("demo", help="the fleet on real recorded sessions: train, deploy, recognise live",
                       description=DEMO_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--subjects", type=int, default=10, help="gateways, one per recorded subject (1-10, default 10)")
    p.add_argument("--speed", type=float, default=20.0, help="replay speed of the live part, x real time (default 20)")
    p.add_argument("--rounds", type=int, default=10, help="FedSCS-XGB boosting rounds (default 10)")
    p.add_argument("--trees", type=int, default=30, help="FedForest trees (default 30)")
    p.add_argument("--algorithm", choices=("both", "fedscs-xgb", "fedforest"), default="both",
                   help="train both and deploy the better (default), or one")
    p.add_argument("--keep-running", action="store_true", help="keep the fleet running after the summary")
    p.add_argument("--no-kill", action="store_true", help="do not kill and restart a gateway midway")
    p.add_argument("--broker", choices=("auto", "mosquitto", "embedded"), default="auto")
    p.add_argument("--run-dir", help="keep recordings, stores, models and logs here (default: a temporary dir)")
    p.add_argument("--report", help="also write the summary as JSON to this file")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("smoke", help="the foundation smoke run: broker, round engine, gateway processes, a kill")
    p.add_argument("--gateways", type=int, default=3)
    p.add_argument("--broker", choices=("auto", "mosquitto", "embedded"), default="auto")
    p.set_defaults(func=_cmd_smoke)
    return parser


def main(argv: list[str] | None = None) -> int:
    from shared.logs import setup_logging

    args = build_parser().parse_args(argv)
    setup_logging(args.log_level, json_lines=args.log_json)
    func: Callable[[argparse.Namespace], int] = args.func
    return func(args)


if __name__ == "__main__":
    sys.exit(main())
