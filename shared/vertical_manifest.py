"""The signed manifest of a deployed vertical Federated Forest, and the digests it binds.

The aggregator cannot sign the parties' partial trees: it never sees a threshold. It signs what
it knows -- the model id and version, the training job, the parties, the master's trees
(:func:`forest_digest`) -- together with the digest each party reported of its own partial trees
at the end of training (:func:`partial_digest`). A party then trusts its stored trees because
(1) the manifest verifies under the aggregator's Ed25519 key (``shared.signing``, the key that
signs model bundles) and (2) the SHA-256 of the trees it holds equals the digest the manifest
names for it. A tampered file, another party's trees, or trees of another job fail (2); a
manifest not from the aggregator fails (1).

The signed bytes are ``MANIFEST_DOMAIN`` and every field framed as ``shared.model.bundle``
frames a bundle's (name, type, length, value), so the two signatures can never be confused.

Examples
--------
>>> from shared.signing import SigningKey
>>> key = SigningKey(bytes(range(32)))
>>> m = sign_manifest(key, model_id="activity-vf", version=1, job="job-1", parties=("gw-a", "gw-b"),
...                   label_holder="gw-a", task="classification", classes=("lie", "sit"),
...                   forest_digest=bytes(32), party_digests=(bytes(32), bytes(32)), issued_ns=1)
>>> verify_manifest(m, key.verify_key) == key.verify_key
True
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Sequence
from dataclasses import fields, replace
from typing import Any

import numpy as np

from .model.bundle import _frame, _trusted_key
from .protocol.messages.vertical_forest import VerticalManifest
from .signing import BadSignature, SigningKey, VerifyKey

__all__ = ["MANIFEST_DOMAIN", "forest_digest", "manifest_payload", "partial_digest", "sign_manifest", "verify_manifest"]

MANIFEST_DOMAIN = b"wheelfed vertical-forest manifest v1\x00"


def _value_frames(name: str, value: Any) -> bytes:
    """A field as frames: tuples element by element after their length."""
    if isinstance(value, tuple):
        return _frame(name, len(value)) + b"".join(_frame(f"{name}.{i}", v) for i, v in enumerate(value))
    return _frame(name, value)


def forest_digest(trees: Sequence[Any], n_features: Sequence[int]) -> bytes:
    """SHA-256 of the master's trees (``MasterTree``: split nodes, owners, encoded features, leaves,
    leaf values, cover) and the parties' widths: what the manifest binds of the master's model."""
    h = hashlib.sha256(_frame("n_features", np.asarray(n_features, dtype=np.int64)))
    for t, tree in enumerate(trees):
        for name, dtype in (
            ("split_nodes", np.int64),
            ("owner", np.int64),
            ("feature", np.int64),
            ("leaves", np.int64),
            ("values", np.float64),
            ("cover", np.float64),
        ):
            h.update(_frame(f"{t}.{name}", np.asarray(getattr(tree, name), dtype=dtype)))
    return h.digest()


def partial_digest(job: str, trees: Sequence[Any]) -> bytes:
    """SHA-256 of one party's partial trees (``PartialTree``: split nodes, owned flags, features,
    thresholds) of job ``job``: what a party reports at the end of training and checks at deploy."""
    h = hashlib.sha256(_frame("job", job))
    for t, tree in enumerate(trees):
        for name, dtype in (
            ("split_nodes", np.int64),
            ("owned", np.uint8),
            ("feature", np.int64),
            ("threshold", np.float64),
        ):
            h.update(_frame(f"{t}.{name}", np.asarray(getattr(tree, name), dtype=dtype)))
    return h.digest()


def manifest_payload(manifest: VerticalManifest) -> bytes:
    """The exact bytes the signature covers: the domain and every field but the signature."""
    return MANIFEST_DOMAIN + b"".join(
        _value_frames(f.name, getattr(manifest, f.name)) for f in fields(manifest) if f.name != "signature"
    )


def sign_manifest(
    signing_key: SigningKey,
    *,
    model_id: str,
    version: int,
    job: str,
    parties: Sequence[str],
    label_holder: str,
    task: str,
    classes: Sequence[str],
    forest_digest: bytes,
    party_digests: Sequence[bytes],
    issued_ns: int | None = None,
) -> VerticalManifest:
    """The aggregator's signed manifest (``issued_ns`` defaults to now)."""
    if not isinstance(signing_key, SigningKey):
        raise TypeError(f"signing_key must be a shared.signing.SigningKey, got {type(signing_key).__name__}")
    if any(len(d) != 32 for d in party_digests):
        raise ValueError("party_digests: every party must have reported the SHA-256 of its partial trees (32 bytes)")
    unsigned = VerticalManifest(
        model_id,
        int(version),
        job,
        tuple(parties),
        label_holder,
        task,  # type: ignore[arg-type]  # the caller's text: checked where parties decode it
        tuple(classes),
        forest_digest,
        tuple(party_digests),
        time.time_ns() if issued_ns is None else int(issued_ns),
        signing_key.key_id,
    )
    return replace(unsigned, signature=signing_key.sign(manifest_payload(unsigned)))


def verify_manifest(manifest: VerticalManifest, keys: VerifyKey | Iterable[VerifyKey]) -> VerifyKey:
    """Check the manifest's signature against the trusted key with its key id; returns that key.
    Raises ``BadSignature`` (unsigned, unknown key, or altered)."""
    if not manifest.signature:
        raise BadSignature("unsigned: this vertical forest manifest carries no signature; refused")
    key = _trusted_key(keys, manifest.key_id, "vertical forest manifest", "the manifest")
    try:
        key.verify(manifest_payload(manifest), manifest.signature)
    except BadSignature as exc:
        raise BadSignature(f"vertical forest manifest: {exc}; refused") from None
    return key
