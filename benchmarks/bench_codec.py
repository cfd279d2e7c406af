"""Codec throughput: a message whose body holds a 10 MB float32 array.

    .venv/bin/python benchmarks/bench_codec.py [--quick] [--repeats N] [--mb SIZE]

Measures, in one run and on the same array, the median of N repeats of:

- WheelFed: ``Message.create`` + ``encode_message`` and ``decode_message`` (the hardened path:
  schema, RFC 8746 typed arrays, limits, validation);
- the floor: raw ``cbor2.dumps``/``cbor2.loads`` of a plain dict holding the array's bytes (plus
  ``tobytes``/``np.frombuffer`` so both ends are an array, like ours) — the ratio to it is what
  hardening costs;
- peers: ``pickle`` (protocol 5) of the array, ``np.save``/``np.load`` to a ``BytesIO``;
- the chunked path for 256 KiB MQTT payloads: ``split_payload`` and ``Reassembler.add`` alone, and
  the whole send/receive paths of ``Transport.publish``/``Transport._decode`` (encode, split,
  encode every chunk / decode every chunk, reassemble + verify SHA-256, decode the whole).

MB/s counts array payload bytes (10^6 bytes per MB) per second. Every decoded array is checked
bit-exact against the original (dtype, shape and bytes, NaN payloads and -0.0 included); the
script exits 1 if any check fails.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import io
import os
import pickle
import resource
import sys
import time
from dataclasses import dataclass
from typing import Callable

import _common  # noqa: F401  (puts the repo root on sys.path)
import cbor2
import numpy as np

from _common import description, markdown_table, median, print_machine
from shared.protocol.chunking import Reassembler, split_payload
from shared.protocol.envelope import Message, decode_message, encode_message, message_type
from shared.protocol.limits import DEFAULT_MAX_PAYLOAD

SENDER = "bench-1"

#: glibc tunables that keep freed 10 MB buffers in the heap instead of unmapping/trimming them.
STEADY_HEAP_ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
    "MALLOC_TRIM_THRESHOLD_": str(4 << 30),
    "MALLOC_TOP_PAD_": str(128 << 20),
}


@message_type("bench_array")
@dataclass(frozen=True)
class BenchArray:
    """Benchmark body: one array (like a histogram or gradient payload)."""

    values: np.ndarray


def make_array(n_bytes: int, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(n_bytes // 4, dtype=np.float32)
    # Values a lossy path would mangle: NaN with a payload, -0.0, infinities, a subnormal.
    specials = np.array([0x7FC00123, 0x80000000, 0x7F800000, 0xFF800000, 0x00000001], dtype=np.uint32).view(np.float32)
    values[: len(specials)] = specials
    return values


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def run_interleaved(
    fns: list[Callable[[], object]], repeats: int, warmup: int = 1
) -> tuple[list[list[float]], list[list[int]]]:
    """Seconds (and minor page faults) per call: every round calls each function once, ``warmup`` untimed rounds first.

    Interleaving matters on this kind of machine: 10 MB buffers come from fresh mmaps or from a
    heap glibc may trim, so page-fault cost drifts over a run; timing one operation's repeats
    back to back would hand that drift to whichever operation ran first.
    """
    for _ in range(warmup):
        for fn in fns:
            fn()
    samples: list[list[float]] = [[] for _ in fns]
    faults: list[list[int]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out, flt in zip(fns, samples, faults):
            gc.collect()
            faults_before = _minor_faults()
            start = time.perf_counter()
            result = fn()
            out.append(time.perf_counter() - start)
            flt.append(_minor_faults() - faults_before)
            del result
    return samples, faults


class Checks:
    def __init__(self, original: np.ndarray) -> None:
        self.original = original
        self.failures: list[str] = []

    def array(self, what: str, decoded: object) -> None:
        ok = (
            isinstance(decoded, np.ndarray)
            and decoded.dtype == self.original.dtype
            and decoded.shape == self.original.shape
            and decoded.tobytes() == self.original.tobytes()
        )
        if not ok:
            self.failures.append(f"{what}: decoded array is not bit-identical to the original")

    def true(self, what: str, condition: bool) -> None:
        if not condition:
            self.failures.append(what)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=description(__doc__))
    parser.add_argument("--quick", action="store_true", help="3 repeats instead of 15 (smoke run)")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per operation (default 15, quick 3)")
    parser.add_argument("--mb", type=float, default=10.0, help="array size in MB of 10^6 bytes (default 10)")
    parser.add_argument(
        "--chunk-kib",
        type=int,
        default=DEFAULT_MAX_PAYLOAD // 1024,
        help="MQTT payload limit for the chunked path, KiB (default 256)",
    )
    parser.add_argument(
        "--steady-heap",
        action="store_true",
        help="re-run with glibc told to keep freed memory (no mmap/trim per 10 MB buffer): "
        "shows CPU cost without the page-fault cost of fresh buffers",
    )
    args = parser.parse_args(argv)
    if args.steady_heap and os.environ.get("_WHEELFED_BENCH_STEADY_HEAP") != "1":
        env = dict(os.environ, _WHEELFED_BENCH_STEADY_HEAP="1", **STEADY_HEAP_ENV)
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *sys.argv[1:]], env)
    repeats = args.repeats or (3 if args.quick else 15)
    n_bytes = int(args.mb * 1e6) // 4 * 4
    max_payload = args.chunk_kib * 1024
    mb = n_bytes / 1e6

    print_machine(
        "bench_codec",
        "python " + " ".join(["benchmarks/bench_codec.py", *sys.argv[1:]]),
        {
            "array": f"float32, {n_bytes:,} bytes ({n_bytes // 4:,} elements)",
            "repeats": f"median of {repeats} (after 1 warm-up)",
            "chunk payload": f"{max_payload:,} bytes",
            "heap": (
                "steady: " + " ".join(f"{k}={v}" for k, v in STEADY_HEAP_ENV.items())
                if os.environ.get("_WHEELFED_BENCH_STEADY_HEAP") == "1"
                else "glibc defaults"
            ),
        },
    )

    array = make_array(n_bytes)
    checks = Checks(array)
    body = BenchArray(array)
    ops: list[tuple[str, str, Callable[[], object], int | None]] = []  # (operation, direction, fn, wire bytes)

    # -- the floor: raw cbor2 of a plain dict with the array's bytes --------------------------
    def floor_encode() -> bytes:
        return cbor2.dumps({"dtype": "<f4", "shape": list(array.shape), "data": array.tobytes()})

    floor_wire = floor_encode()

    def floor_decode() -> np.ndarray:
        raw = cbor2.loads(floor_wire)
        return np.frombuffer(raw["data"], dtype=raw["dtype"]).reshape(raw["shape"])

    checks.array("cbor2 floor", floor_decode())
    ops.append(("cbor2.dumps (floor)", "encode", floor_encode, len(floor_wire)))
    ops.append(("cbor2.loads (floor)", "decode", floor_decode, len(floor_wire)))

    # -- WheelFed envelope ---------------------------------------------------------------------
    def wf_encode() -> bytes:
        return encode_message(Message.create(body, sender=SENDER, job="bench", round=1))

    wf_wire = wf_encode()

    def wf_decode() -> Message:
        return decode_message(wf_wire)

    out = wf_decode()
    checks.array("WheelFed decode_message", out.body.values)
    checks.true("WheelFed decode_message: envelope fields", out.sender == SENDER and out.envelope.round == 1)
    ops.append(("WheelFed encode_message", "encode", wf_encode, len(wf_wire)))
    ops.append(("WheelFed decode_message", "decode", wf_decode, len(wf_wire)))

    # -- chunked path (256 KiB payloads) -------------------------------------------------------
    chunks = split_payload(wf_wire, sender=SENDER, max_payload=max_payload, job="bench", round=1)
    chunk_wires = [encode_message(c) for c in chunks]
    chunked_bytes = sum(len(w) for w in chunk_wires)
    checks.true("chunk payloads within max_payload", all(len(w) <= max_payload for w in chunk_wires))

    def split_only() -> list[Message]:
        return split_payload(wf_wire, sender=SENDER, max_payload=max_payload, job="bench", round=1)

    def reassemble_only() -> bytes | None:
        reassembler = Reassembler()  # fresh: a completed transfer id is remembered as done
        whole = None
        for chunk in chunks:
            whole = reassembler.add(chunk, sender=SENDER)
        return whole

    def send_path() -> list[bytes]:
        """What Transport.publish does with a message above max_payload."""
        encoded = encode_message(Message.create(body, sender=SENDER, job="bench", round=1))
        parts = split_payload(encoded, sender=SENDER, max_payload=max_payload, job="bench", round=1)
        return [encode_message(p) for p in parts]

    def receive_path() -> Message:
        """What Transport._decode does with the chunk payloads."""
        reassembler = Reassembler()
        whole = None
        for wire in chunk_wires:
            whole = reassembler.add(decode_message(wire, max_bytes=max_payload), sender=SENDER)
        assert whole is not None
        return decode_message(whole)

    checks.true("Reassembler.add returned the original encoding", reassemble_only() == wf_wire)
    checks.array("chunked receive", receive_path().body.values)
    ops.append((f"split_payload ({len(chunks)} chunks)", "encode", split_only, None))
    ops.append(("Reassembler.add (SHA-256 verify)", "decode", reassemble_only, None))
    ops.append(("chunked send: encode + split + encode chunks", "encode", send_path, chunked_bytes))
    ops.append(("chunked receive: decode chunks + reassemble + decode", "decode", receive_path, chunked_bytes))

    # -- peers -----------------------------------------------------------------------------------
    pickle_wire = pickle.dumps(array, protocol=5)
    checks.array("pickle", pickle.loads(pickle_wire))
    ops.append(("pickle.dumps (protocol 5)", "encode", lambda: pickle.dumps(array, protocol=5), len(pickle_wire)))
    ops.append(("pickle.loads", "decode", lambda: pickle.loads(pickle_wire), len(pickle_wire)))

    def npy_encode() -> bytes:
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        return buffer.getvalue()

    npy_wire = npy_encode()
    checks.array("np.load", np.load(io.BytesIO(npy_wire), allow_pickle=False))
    ops.append(("np.save to BytesIO", "encode", npy_encode, len(npy_wire)))
    ops.append(
        ("np.load from BytesIO", "decode", lambda: np.load(io.BytesIO(npy_wire), allow_pickle=False), len(npy_wire))
    )

    # -- reference: the SHA-256 every chunked transfer computes once per side --------------------
    ops.append(("(reference) hashlib.sha256 of the encoding", "ref", lambda: hashlib.sha256(wf_wire).digest(), None))

    # -- timing: round-robin, so allocator/page-cache drift hits every operation alike ----------
    samples, faults = run_interleaved([fn for _, _, fn, _ in ops], repeats)
    rows = [(op, d, median(s), wire, median(f)) for (op, d, _, wire), s, f in zip(ops, samples, faults)]

    # -- table -----------------------------------------------------------------------------------
    floor = {d: s for op, d, s, _, _ in rows if "floor" in op}
    table = []
    for direction in ("encode", "decode", "ref"):
        for op, d, seconds, wire, flt in rows:
            if d != direction:
                continue
            ratio = f"{floor[d] / seconds:.2f}" if d in floor else "-"  # throughput ratio: >1 is faster
            table.append(
                [
                    op,
                    direction,
                    f"{mb / seconds:,.0f}",
                    f"{seconds * 1e3:.2f}",
                    ratio,
                    f"{flt:,.0f}",
                    "" if wire is None else f"{wire - n_bytes:+,}",
                ]
            )
    print(
        markdown_table(["operation", "dir", "MB/s", "ms", "x cbor2 floor", "page faults", "wire overhead (B)"], table)
    )
    print()
    print(
        "x cbor2 floor = throughput / floor throughput of the same direction (1.00 = as fast as raw cbor2; "
        "< 1 = slower). page faults = median minor faults per call (a fresh 10 MB buffer costs ~2,440; "
        "on VMs each costs microseconds, see --steady-heap). wire overhead = encoded bytes - array bytes."
    )
    print()
    if checks.failures:
        print("CORRECTNESS FAILURES:")
        for failure in checks.failures:
            print(f"- {failure}")
        return 1
    print(
        "correctness: all decoded arrays bit-identical to the original (dtype, shape, bytes incl. NaN payload, "
        "-0.0, inf, subnormal); chunked reassembly returned the exact encoding."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
