"""Recordings: ``features``, ``record``, ``replay``, ``import`` and offline ``predict``."""

from __future__ import annotations

import argparse
import signal
import threading

from edge_client.cli.arguments import (
    add_subcommand,
    existing_dir,
    non_negative_float,
    output_file,
    positive_float,
    positive_int,
    recording_file,
    serial_port,
)
from edge_client.cli.errors import INTERRUPTED, CliError, UsageError
from edge_client.cli.model_files import load_model_file, model_file


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _features(args: argparse.Namespace) -> int:
    from edge_client.processing import extract_recording

    table, stats = extract_recording(args.recording)
    table.save(args.output)
    labelled = sum(y is not None for y in table.labels)
    print(
        f"{args.output}: {len(table.X)} windows x {len(table.names)} features ({labelled} labelled), "
        f"feature set {table.feature_set_version}; {stats.frames} frames",
        flush=True,
    )
    return 0


def _record(args: argparse.Namespace) -> int:
    from firmware_bridge.recorder import record
    from firmware_bridge.recording import RecordingMetadata

    if args.output.exists():
        raise UsageError(f"{args.output} exists; a recording is never overwritten (choose another -o)")
    stop = _stop_on_signals()
    if args.duration:
        timer = threading.Timer(args.duration, stop.set)
        timer.daemon = True
        timer.start()
    metadata = RecordingMetadata(
        session_id=args.session or args.output.name.split(".")[0], subject=args.subject, source=f"serial:{args.serial}"
    )
    until = f"{args.duration:g} s or Ctrl-C" if args.duration else "Ctrl-C"
    print(f"recording {args.serial} -> {args.output}; {until} stops", flush=True)
    stats = record(args.serial, args.output, metadata, stop, baudrate=args.baud)
    reader = stats.reader
    print(
        f"recorded {stats.records} records ({stats.bytes_written:,} bytes) into {args.output}; "
        f"{reader.delivered} frames, {reader.link.crc_errors + reader.link.header_errors} checksum errors, "
        f"{reader.link.lost_frames} frames lost in gaps, {reader.disconnects} disconnects, {reader.dropped} dropped",
        flush=True,
    )
    if stats.unrecorded_frames:
        print(
            f"warning: {stats.unrecorded_frames} frames were not recorded: the disk was full (the recording is "
            "valid without them)",
            flush=True,
        )
    return 0


def _replay(args: argparse.Namespace) -> int:
    from firmware_bridge.replay import ReplayError, open_pty, replay

    if bool(args.pty) == bool(args.to):
        raise UsageError("give exactly one of --to PORT and --pty")
    stop = _stop_on_signals()
    if args.pty:
        master, slave = open_pty()
        print(f"pty: {slave}", flush=True)
        port: str | int = master
        wait: float | None = args.wait_for_reader
    else:
        port, wait = args.to, None
    try:
        stats = replay(
            args.recording, port, speed=args.speed, baudrate=args.baud, stop_event=stop, wait_for_reader_s=wait
        )
    except ReplayError as exc:
        raise CliError(str(exc)) from None
    state = "replayed" if stats.completed else "stopped early after"
    print(
        f"{state} {stats.recording_s:.1f} s of recording in {stats.wall_s:.1f} s: {stats.frames_sent} frames "
        f"({stats.sample_frames} sample, {stats.annotation_frames} label, {stats.descriptor_frames} descriptor), "
        f"{stats.bytes_sent:,} bytes; worst lag {stats.max_lag_s:.2f} s",
        flush=True,
    )
    return 0 if stats.completed else INTERRUPTED


def _import(args: argparse.Namespace) -> int:
    from firmware_bridge.importers import ecg, seglearn_watch

    args.output.mkdir(parents=True, exist_ok=True)
    importer = {"seglearn": seglearn_watch.import_all, "ecg": ecg.import_all}[args.dataset]
    for path in importer(args.output):
        print(path)
    return 0


def _predict(args: argparse.Namespace) -> int:
    import numpy as np

    from edge_client.processing import extract_recording
    from shared.model import client_index, model_inputs

    model = load_model_file(args.model)
    table, stats = extract_recording(args.recording)
    if len(table.X) == 0:
        raise CliError(
            f"{args.recording} holds no complete window ({stats.frames} frames; a window is 4 s of "
            "every sensor): nothing to predict"
        )
    if model.feature_set_version and model.feature_set_version != table.feature_set_version:
        raise CliError(
            f"the model expects feature set {model.feature_set_version!r}, the recording gives "
            f"{table.feature_set_version!r} (a model trained on other sensors)"
        )
    X = model_inputs(model, table.X.astype(np.float32), client_index(model, args.client or ""))
    predicted = model.predict(X)
    labels = table.labels
    if args.output:
        with open(args.output, "w") as fh:
            fh.write("start_us,end_us,label,predicted\n")
            for a, b, y, p in zip(table.start_us, table.end_us, labels, predicted):
                fh.write(f"{a},{b},{'' if y is None else y},{p}\n")
    known = np.array([y is not None for y in labels], dtype=bool)
    print(
        f"{args.recording}: {len(predicted)} windows predicted with {args.model}"
        f"{f'; per-window predictions in {args.output}' if args.output else ''}"
    )
    if known.any():
        truth = np.array([str(y) for y in labels[known]])
        guess = np.array([str(p) for p in predicted[known]])
        print(f"accuracy on {int(known.sum())} labelled windows: {(truth == guess).mean():.4f}")
        for label in sorted(set(truth)):
            rows = truth == label
            print(f"  {label:24} {int(rows.sum()):6} windows  recall {(guess[rows] == label).mean():.4f}")
    return 0


def add(sub: argparse._SubParsersAction) -> None:
    p = add_subcommand(
        sub,
        "features",
        "batch features of a recording (the gateway's own data path)",
        examples=["wheelfed features recordings/seglearn_watch_s01.wfrec -o s01.npz"],
    )
    p.add_argument("recording", type=recording_file, help="a .wfrec recording")
    p.add_argument("-o", "--output", required=True, type=output_file(".npz", ".csv"), help="output file: .npz or .csv")
    p.set_defaults(func=_features)

    p = add_subcommand(
        sub,
        "record",
        "record a serial sensor link into a recording file",
        examples=["wheelfed record --serial /dev/ttyUSB0 -o session.wfrec --duration 5"],
    )
    p.add_argument("--serial", required=True, type=serial_port, help="device path, pty path or pyserial URL")
    p.add_argument("--baud", type=positive_int, default=115200, help="serial baud rate")
    p.add_argument(
        "-o", "--output", required=True, type=output_file(".wfrec", what="recording"), help="the new recording (.wfrec)"
    )
    p.add_argument("--session", help="session id (default: the output file's name)")
    p.add_argument("--subject", help="who was recorded (a pseudonym)")
    p.add_argument("--duration", type=positive_float, help="stop after this many seconds (default: Ctrl-C)")
    p.set_defaults(func=_record)

    p = add_subcommand(
        sub,
        "replay",
        "play a recording into a serial port or a new pty",
        examples=["wheelfed replay recordings/seglearn_watch_s01.wfrec --pty --speed 10"],
    )
    p.add_argument("recording", type=recording_file, help="a .wfrec recording")
    p.add_argument("--to", type=serial_port, help="serial device or pty path to write to")
    p.add_argument("--pty", action="store_true", help="create a pty, print its path, wait for a reader")
    p.add_argument(
        "--wait-for-reader",
        type=positive_float,
        default=60.0,
        help="--pty: seconds to wait for a reader to open the pty",
    )
    p.add_argument(
        "--speed",
        type=non_negative_float,
        default=1.0,
        help="1 = real time, N = N times faster, 0 = as fast as possible",
    )
    p.add_argument("--baud", type=positive_int, default=115200, help="serial baud rate")
    p.set_defaults(func=_replay)

    p = add_subcommand(
        sub,
        "import",
        "turn bundled real datasets into recordings (seglearn watch IMU, ECG)",
        examples=["wheelfed import seglearn -o recordings/"],
    )
    p.add_argument("dataset", choices=("seglearn", "ecg"), help="which bundled dataset")
    p.add_argument("-o", "--output", required=True, type=_new_or_existing_dir, help="folder for the recordings")
    p.set_defaults(func=_import)

    p = add_subcommand(
        sub,
        "predict",
        "offline batch prediction of a recording (per-label accuracy if labelled)",
        examples=["wheelfed predict session.wfrec --model model.cbor -o predictions.csv"],
    )
    p.add_argument("recording", type=recording_file, help="a .wfrec recording")
    p.add_argument(
        "--model", required=True, type=model_file, help="model file (.json or CBOR), e.g. from wheelfed model export"
    )
    p.add_argument("--client", help="the gateway id, for models that split on the client")
    p.add_argument("-o", "--output", type=output_file(".csv"), help="CSV of per-window predictions")
    p.set_defaults(func=_predict)


def _new_or_existing_dir(text: str):
    from pathlib import Path

    path = Path(text)
    if path.exists():
        return existing_dir(text)
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"the folder {path.parent} does not exist (create it first)")
    return path


_new_or_existing_dir.__name__ = "folder"
