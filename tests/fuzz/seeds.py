"""The seed corpus: one small valid input per target, made by the real writers (and a trusted
key for the bundle target). ``python -m tests.fuzz.run --write-seeds`` writes them into
``tests/fuzz/corpus/<target>/``; the fuzzer mutates from there."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from shared.signing import SigningKey

#: A fixed key: bundles signed with it verify in the bundle target, so mutations reach past the
#: signature check as far as the signature itself.
SIGNING_KEY = SigningKey.from_seed(bytes(range(32)))
TRUSTED_KEY = SIGNING_KEY.verify_key


def _messages() -> list[bytes]:
    from shared.protocol.envelope import Message, encode_message
    from shared.protocol.messages import Hello, Ping, Status

    bodies = [
        Hello("0.1.0", "fs-1", 12, ("fedscs", "fedforest")),
        Status(online=True, active_model="m:v3", n_windows=10, detail={"link": "up", "labels": "sit=3"}),
        Ping(b"\x00\x01" * 8, 0.5),
    ]
    return [encode_message(Message.create(b, sender="gw-1", job="j", round=2)) for b in bodies]


def _chunks() -> list[bytes]:
    from shared.protocol.chunking import split_payload
    from shared.protocol.envelope import encode_message

    whole = _messages()[1]
    parts = [encode_message(m) for m in split_payload(whole, sender="gw-1", max_payload=300)]
    return [b"\xff\xfe".join(parts), b"\xff\xfe".join(parts[::-1] + parts[:1])]


def _frames() -> list[bytes]:
    from firmware_bridge.frames import DescriptorFrame, SampleFrame, encode_frame
    from firmware_bridge.importers.synthetic_chair import chair_descriptors

    descriptor = chair_descriptors()[0]
    samples = np.arange(30, dtype=np.int16).reshape(10, 3)
    stream = [
        DescriptorFrame(descriptor),
        SampleFrame(descriptor.sensor_id, 0, 0, samples),
        SampleFrame(descriptor.sensor_id, 1, 100_000, samples),
    ]
    return [b"".join(encode_frame(f) for f in stream), encode_frame(stream[0])]


def _checked_frames() -> list[bytes]:
    """The chair's descriptors and a sample block as [type][sensor][length][payload] records."""
    import struct

    from firmware_bridge.frames import descriptor_to_dict
    from firmware_bridge.importers.synthetic_chair import chair_descriptors

    records = []
    for descriptor in chair_descriptors()[:2]:
        payload = json.dumps(descriptor_to_dict(descriptor), separators=(",", ":")).encode()
        records.append(bytes((1, descriptor.sensor_id)) + struct.pack("<H", len(payload)) + payload)
    block = bytes((3, 1)) + np.arange(30, dtype="<i2").tobytes()  # 3 channels, format code 1
    records.append(bytes((0, chair_descriptors()[0].sensor_id)) + struct.pack("<H", len(block)) + block)
    return [b"".join(records)]


def _recording(folder: Path) -> list[bytes]:
    from firmware_bridge.importers.synthetic_chair import write_chair

    path = write_chair(folder / "seed.wfrec", 6.0, seed=1)
    return [path.read_bytes()]


def _checked_recording(folder: Path) -> list[bytes]:
    """A real recording's metadata and records, as [length: 2 bytes][metadata][records]."""
    from firmware_bridge.recording import MAGIC

    whole = _recording(folder)[0]
    meta_len = int.from_bytes(whole[len(MAGIC) + 2 : len(MAGIC) + 6], "little")
    meta = whole[len(MAGIC) + 6 : len(MAGIC) + 6 + meta_len]
    return [meta_len.to_bytes(2, "little") + meta + whole[len(MAGIC) + 6 + meta_len + 4 :][:2000]]


def _bundle() -> list[bytes]:
    from shared.model import TreeBuilder, TreeEnsemble
    from shared.model.bundle import ModelBundle

    builder = TreeBuilder(0.0)
    left, right = builder.split(0, 0, 0.5)
    builder.set_value(left, -1.0)
    builder.set_value(right, 1.0)
    model = TreeEnsemble(
        trees=(builder.build(),),
        kind="boosted",
        link="identity",
        n_outputs=1,
        feature_names=("x0", "x1"),
        feature_set_version="fs-1",
    )
    return [
        ModelBundle.create(
            model, model_id="seed", version=1, signing_key=SIGNING_KEY, n_self_test=2, created=0.0
        ).to_bytes()
    ]


def _alert_rules() -> list[bytes]:
    rules = [
        {
            "name": "pressure-relief",
            "kind": "absent",
            "labels": ["PEN"],
            "minutes": 30,
            "message": "no pressure relief for 30 minutes",
        },
        {"name": "lying", "kind": "sustained", "labels": ["lie"], "minutes": 120},
    ]
    return [json.dumps(rules).encode()]


def _gateway_config() -> list[bytes]:
    """Every key that names no file, and the shipped template (deploy/gateway/gateway.toml) as
    install.sh writes it, its certificate lines turned into comments (no such files here)."""
    every_key = b"""client_id = "gw-1"
session = "s-1"
store = "w.db"
model_dir = "models"
trust = []
engine = "numpy"
holdout_fraction = 0.2
publish_every = 2.5
stats_every = 0
[serial]
device = "socket://127.0.0.1:7000"
baud = 57600
[retention]
max_windows = 1000
max_age_days = 30
[broker]
enabled = true
host = "broker.example.org"
port = 8883
protocol = 4
username = "gw-1"
"""
    template = (Path(__file__).resolve().parents[2] / "deploy" / "gateway" / "gateway.toml").read_text()
    template = (
        template.replace("@STATE@", "/var/lib/wheelfed")
        .replace("@CONFIG@", "/etc/wheelfed")
        .replace("@CLIENT_ID@", "gw-1")
        .replace("\ntls_", "\n# tls_")
    )
    return [every_key, template.encode()]


def seed_inputs(scratch: Path) -> dict[str, list[bytes]]:
    return {
        "message": _messages(),
        "chunks": _chunks(),
        "frames": _frames(),
        "checked_frames": _checked_frames(),
        "recording": _recording(scratch),
        "checked_recording": _checked_recording(scratch),
        "bundle": _bundle(),
        "alert_rules": _alert_rules(),
        "gateway_config": _gateway_config(),
    }
