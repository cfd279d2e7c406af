"""Every decoder that takes bytes from outside, as a fuzz target: ``target(data)`` must either
accept the input or raise the decoder's own error family -- anything else is a finding.

The targets read what an attacker or a broken device controls: MQTT payloads (CBOR envelopes),
a sequence of chunks to reassemble, the serial byte stream (frames, descriptors' JSON inside),
recording files, model bundles pushed to a gateway, and a gateway's alert-rule and config files.
``tests/fuzz/run.py`` drives them with atheris (coverage-guided) and ``test_fuzz_targets.py``
runs each for a bounded time in CI; ``corpus/<target>/`` holds the seeds.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

#: A scratch file per process for the targets that read files (on tmpfs when there is one).
_SCRATCH_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
_SCRATCH = os.path.join(_SCRATCH_DIR, f"wheelfed-fuzz-{os.getpid()}")


@dataclass(frozen=True)
class Target:
    """A decoder under fuzzing and the exceptions it may raise (its documented refusals)."""

    name: str
    run: Callable[[bytes], object]
    allowed: Callable[[], tuple[type[BaseException], ...]]

    def __call__(self, data: bytes) -> None:
        try:
            self.run(data)
        except self.allowed():
            pass


def _scratch_file(data: bytes) -> str:
    with open(_SCRATCH, "wb") as fh:
        fh.write(data)
    return _SCRATCH


# -- MQTT payloads ------------------------------------------------------------------------------
def _message(data: bytes) -> object:
    from shared.protocol.envelope import decode_message

    return decode_message(data)


def _decode_errors() -> tuple[type[BaseException], ...]:
    from shared.protocol.errors import DecodeError

    return (DecodeError,)


def _chunks(data: bytes) -> None:
    """The bytes split at 0xFF 0xFE into payloads, each decoded and every chunk fed to one
    reassembler as if it came from gw-1's outbox (so forged senders, duplicates and reorderings
    are all reachable)."""
    from shared.protocol.chunking import Reassembler
    from shared.protocol.envelope import decode_message
    from shared.protocol.errors import DecodeError
    from shared.protocol.limits import DecodeLimits

    reassembler = Reassembler(limits=DecodeLimits(max_message_bytes=1 << 16), clock=lambda: 0.0)
    for payload in data.split(b"\xff\xfe"):
        try:
            message = decode_message(payload)
            if message.envelope.type == "chunk":
                reassembler.add(message, sender="gw-1")
        except DecodeError:
            continue


# -- the serial link ------------------------------------------------------------------------------
def _frames(data: bytes) -> None:
    """The decoder sees the stream in two reads split in the middle, as a serial port delivers it."""
    from firmware_bridge.frames import FrameDecoder

    decoder = FrameDecoder()
    half = len(data) // 2
    decoder.feed(data[:half])
    decoder.feed(data[half:])


def _checked_frames(data: bytes) -> None:
    """Payloads the fuzzer chooses inside frames whose checksums are right, so that mutations get
    past the CRCs to what a valid frame may carry (a descriptor's JSON, a sample block, a label):
    records of [type][sensor id][length: 2 bytes][payload], sequence numbers counting up."""
    import struct
    import zlib

    from firmware_bridge.frames import FrameDecoder, FrameType, _header

    stream, at, seq = bytearray(), 0, 0
    while at + 4 <= len(data):
        ftype, sensor_id, length = data[at], data[at + 1], struct.unpack_from("<H", data, at + 2)[0]
        payload = data[at + 4 : at + 4 + length]
        at += 4 + length
        kind = (FrameType.SAMPLES, FrameType.DESCRIPTOR, FrameType.ANNOTATION)[ftype % 3]
        body = _header(kind, sensor_id, seq, seq * 100_000, payload) + payload
        stream += body + struct.pack("<I", zlib.crc32(body))
        seq += 1 + (ftype >> 6)  # high bits: sequence gaps
    FrameDecoder().feed(bytes(stream))


def _nothing() -> tuple[type[BaseException], ...]:
    return ()


# -- files ----------------------------------------------------------------------------------------
def _recording(data: bytes) -> None:
    from firmware_bridge.recording import RecordingReader

    reader = RecordingReader(_scratch_file(data))
    try:
        for _ in reader:
            pass
    finally:
        reader.close()


def _checked_recording(data: bytes) -> None:
    """Metadata the fuzzer chooses behind a valid magic, version, length and CRC (mutations of a
    whole file rarely get past the header's CRC): the first 2 bytes give the metadata's length."""
    import struct
    import zlib

    from firmware_bridge.recording import FORMAT_VERSION, MAGIC

    length = int.from_bytes(data[:2], "little") % max(len(data) - 1, 1)
    meta, rest = data[2 : 2 + length], data[2 + length :]
    head = struct.pack("<8sHI", MAGIC, FORMAT_VERSION, len(meta)) + meta
    _recording(head + struct.pack("<I", zlib.crc32(head)) + rest)


def _recording_errors() -> tuple[type[BaseException], ...]:
    from firmware_bridge.recording import RecordingError

    return (RecordingError,)


def _bundle(data: bytes) -> None:
    """What a gateway does with a pushed bundle before it trusts it: parse, then verify."""
    from shared.model.bundle import ModelBundle
    from tests.fuzz.seeds import TRUSTED_KEY

    ModelBundle.from_bytes(data, max_bytes=1 << 20).verify(TRUSTED_KEY)


def _bundle_errors() -> tuple[type[BaseException], ...]:
    from shared.model.bundle import BundleError
    from shared.model.errors import ModelValidationError
    from shared.protocol.errors import DecodeError
    from shared.signing import BadSignature

    return (BundleError, BadSignature, DecodeError, ModelValidationError)


def _alert_rules(data: bytes) -> None:
    from edge_client.alerts import load_rules

    load_rules(_scratch_file(data))


def _alert_rule_errors() -> tuple[type[BaseException], ...]:
    from edge_client.alerts import AlertRulesError

    return (AlertRulesError,)


def _gateway_config(data: bytes) -> None:
    """A gateway's TOML config file, relative paths taken from the scratch folder."""
    from pathlib import Path

    from edge_client.gateway_config import parse_config

    parse_config(data, base=Path(_SCRATCH_DIR))


def _gateway_config_errors() -> tuple[type[BaseException], ...]:
    from edge_client.gateway_config import ConfigError

    return (ConfigError,)


def _canary(data: bytes) -> None:
    """A planted bug the fuzzer must find (``test_fuzz_targets`` checks the harness can fail)."""
    if len(data) >= 3 and data[0] == 70 and data[1] == 85 and data[2] == 90:  # b"FUZ", byte by byte
        raise RuntimeError("the planted bug")


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("message", _message, _decode_errors),
        Target("chunks", _chunks, _decode_errors),
        Target("frames", _frames, _nothing),
        Target("checked_frames", _checked_frames, _nothing),
        Target("recording", _recording, _recording_errors),
        Target("checked_recording", _checked_recording, _recording_errors),
        Target("bundle", _bundle, _bundle_errors),
        Target("alert_rules", _alert_rules, _alert_rule_errors),
        Target("gateway_config", _gateway_config, _gateway_config_errors),
    )
}

#: Not in ``TARGETS`` (not part of a run over "every target"), but runnable by name.
CANARY = Target("canary", _canary, _nothing)
