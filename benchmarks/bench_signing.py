"""Ed25519 signing and verification (``shared.signing``, on ``cryptography``): median time per call.

.venv/bin/python benchmarks/bench_signing.py
"""

from __future__ import annotations

import os
import sys
import timeit

import _common  # noqa: F401  (puts the repo root on sys.path)
from _common import markdown_table, median, print_machine

from shared.signing import SigningKey, VerifyKey

REPEATS = 200


def per_call_ms(call) -> float:
    return median(timeit.repeat(call, number=1, repeat=REPEATS)) * 1e3


def main() -> int:
    print_machine("Ed25519 (shared.signing on cryptography)", " ".join(["python", *sys.argv]))
    key = SigningKey.generate()
    public = key.verify_key
    rows = []
    for label, size in (("64 B", 64), ("200 KB", 200_000)):
        message = os.urandom(size)
        signature = key.sign(message)
        rows.append([f"sign, {label}", f"{per_call_ms(lambda: key.sign(message)):.3f}"])
        rows.append([f"verify, {label}", f"{per_call_ms(lambda: public.verify(message, signature)):.3f}"])
    raw = bytes(public)
    rows.append(["VerifyKey()", f"{per_call_ms(lambda: VerifyKey(raw)):.3f}"])
    print(markdown_table(["operation", f"median ms ({REPEATS} calls)"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
