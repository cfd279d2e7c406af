"""Model files on the command line: ``.json`` (WheelFed JSON) or CBOR, checked before any work.

Reading and writing live together so that what ``wheelfed model export`` writes is, by
construction, what ``wheelfed predict --model`` and ``wheelfed train --init-model`` read.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from edge_client.cli.arguments import existing_file

SQLITE_MAGIC = b"SQLite format 3\x00"


def load_model_file(path: str | Path):
    """The TreeEnsemble in ``path``; ``ValueError`` with a one-line reason if it is not a model."""
    from shared.model import TreeEnsemble
    from shared.protocol.errors import DecodeError

    path = Path(path)
    raw = path.read_bytes()
    if raw.startswith(SQLITE_MAGIC):
        raise ValueError(
            f"{path} is a database (a model registry?), not a model file: "
            "wheelfed model export MODEL_ID --registry DB -o model.cbor writes one"
        )
    if not raw:
        raise ValueError(f"{path} is empty, not a model file")
    try:
        return TreeEnsemble.from_json(raw) if path.suffix.lower() == ".json" else TreeEnsemble.from_cbor(raw)
    except (DecodeError, ValueError, KeyError, TypeError) as exc:
        kind = "JSON" if path.suffix.lower() == ".json" else "CBOR"
        raise ValueError(f"{path} is not a WheelFed model ({kind}: {str(exc).splitlines()[0][:160]})") from None


def model_file_bytes(model, path: Path, *, xgboost: bool = False) -> bytes:
    """``model`` as the file ``path`` names: WheelFed JSON for ``.json``, CBOR otherwise (what
    :func:`load_model_file` reads back), or XGBoost's model JSON (boosted models only; a
    ``ValueError`` says why another one cannot be)."""
    if xgboost:
        return model.to_xgboost_json()
    return model.to_json(indent=1).encode() if Path(path).suffix.lower() == ".json" else model.to_cbor()


def model_file(text: str):
    """argparse type: an existing file holding a model (returns the path; the model is re-read by the command)."""
    path = existing_file(text)
    try:
        load_model_file(path)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return path


model_file.__name__ = "model file"
