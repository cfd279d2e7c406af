"""The wire's shape per protocol version, and what a peer one version behind can be sent.

:func:`wire_fingerprint` describes every registered message type by its wire fields: each
field's name, its annotation in a canonical text (nested body dataclasses spelled out with their
own fields) and whether it has a default, plus the type's content revision
(:data:`CONTENT_REVISIONS`: the version in which the meaning of its bytes changed without its
fields changing). ``wire_versions.py`` beside this module holds the fingerprint of every
released protocol version; a test fails when the current messages differ from the entry of
:data:`~shared.protocol.envelope.PROTOCOL_VERSION` -- a wire change without a version bump.

From those entries, :func:`downgrade_body` writes a body for a peer that speaks an older
version: a field the older version does not know (or knows with another shape) is left out when
it holds its default value, else the body cannot go to that peer (:class:`NeedsVersion`, which
names the version it needs). :func:`version_needed` answers the same question for a message type
before a job starts, so that a job can leave an old gateway out instead of failing half-way.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

import numpy as np

HISTORY_FILE = Path(__file__).with_name("wire_versions.py")

#: Message types whose content changed in a version although their fields did not (a blob's
#: inner format, a field's meaning): type name -> the version of the latest such change.
#: Version 2: secure aggregation's sealed bundles carry a digest of every share (dealers commit
#: to their shares) and holders answer with complaints, so the unmasking round of a version-1
#: gateway cannot be checked by a version-2 server.
CONTENT_REVISIONS: dict[str, int] = {
    "secagg.unmask": 2,
    "secagg.unmask_reply": 2,
}


class NeedsVersion(ValueError):
    """A message cannot be written for a peer that speaks ``peer_version``: it needs ``needed``."""

    def __init__(self, type_name: str, needed: int, peer_version: int, why: str) -> None:
        super().__init__(f"{type_name} needs protocol version {needed} ({why}); the peer speaks {peer_version}")
        self.type_name, self.needed, self.peer_version, self.why = type_name, needed, peer_version, why


def _annotation_text(hint: Any) -> str:
    """A canonical text of a schema annotation: the same on every Python and in every tree."""
    origin = get_origin(hint)
    if origin is Annotated:
        base, *extras = get_args(hint)
        specs = []
        for extra in extras:
            if dataclasses.is_dataclass(extra):
                fields = ", ".join(f"{f.name}={getattr(extra, f.name)!r}" for f in dataclasses.fields(extra))
                specs.append(f"{type(extra).__name__}({fields})")
        return f"{_annotation_text(base)}[{'; '.join(specs)}]" if specs else _annotation_text(base)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(sorted(_annotation_text(a) for a in get_args(hint)))
    if origin is Literal:
        return f"Literal{list(get_args(hint))!r}"
    if origin in (list, tuple, dict):
        args = ", ".join("..." if a is Ellipsis else _annotation_text(a) for a in get_args(hint))
        return f"{origin.__name__}[{args}]"
    if hint is type(None):
        return "None"
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return "{" + ", ".join(f"{name}: {text}" for name, text in _fields_text(hint).items()) + "}"
    if hint is np.ndarray:
        return "ndarray"
    if hint is Any:
        return "Any"
    return getattr(hint, "__name__", repr(hint))


def _has_default(f: dataclasses.Field) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


@functools.cache
def _fields_text(cls: type) -> dict[str, str]:
    hints = get_type_hints(cls, include_extras=True)
    return {
        f.name: _annotation_text(hints[f.name]) + (" = default" if _has_default(f) else "")
        for f in dataclasses.fields(cls)
    }


def type_fingerprint(cls: type, type_name: str) -> dict[str, Any]:
    """One message type's wire shape: ``{"fields": {name: annotation text}, "revision": n}``."""
    return {"fields": dict(_fields_text(cls)), "revision": CONTENT_REVISIONS.get(type_name, 1)}


def wire_fingerprint() -> dict[str, dict[str, Any]]:
    """Every message type's wire shape (importing the message modules first)."""
    from . import (
        chunking,  # noqa: F401  (registers ``chunk``)
        messages,  # noqa: F401  (registers every algorithm's bodies)
    )
    from .envelope import registered_message_types

    # The gateway <-> aggregator wire: bodies defined in this package. (Types registered elsewhere
    # -- a site aggregator's or merge worker's, a test's -- travel between processes of the
    # aggregator's side, which are updated together.)
    return {
        name: type_fingerprint(cls, name)
        for name, cls in sorted(registered_message_types().items())
        if cls.__module__.startswith("shared.protocol.")
    }


@functools.cache
def wire_history() -> dict[int, dict[str, dict[str, Any]]]:
    """The checked-in fingerprint of every released protocol version (``wire_versions.py``)."""
    from .wire_versions import VERSIONS

    return {int(v): entry for v, entry in VERSIONS.items()}


@functools.cache
def _field_plan(type_name: str, version: int) -> tuple[str, ...] | str:
    """The current fields of ``type_name`` a peer of ``version`` reads as they are (the others
    must keep their defaults); or, as a string, why no body of this type can go to that peer."""
    from . import chunking, messages  # noqa: F401  (register every body type)
    from .envelope import body_class

    history = wire_history()
    if version not in history:
        return f"protocol version {version} is not one this build knows"
    old = history[version].get(type_name)
    if old is None:
        return f"not in protocol version {version}"
    current = type_fingerprint(body_class(type_name), type_name)
    if old["revision"] != current["revision"]:
        return f"content changed in protocol version {current['revision']}"
    now = current["fields"]
    gone = sorted(set(old["fields"]) - set(now))
    if gone:
        return f"field {gone[0]!r} of protocol version {version} is gone"
    same = tuple(
        name
        for name, text in now.items()
        if name in old["fields"] and old["fields"][name].removesuffix(" = default") == text.removesuffix(" = default")
    )
    for name, text in now.items():
        if name not in same and not text.endswith(" = default"):
            return f"field {name!r} is new or changed since protocol version {version} and has no default"
    for name, text in old["fields"].items():
        if name not in same and not text.endswith(" = default"):
            return f"field {name!r} changed since protocol version {version}, which requires it"
    return same


def version_needed(type_name: str, version: int) -> str:
    """Why a body of ``type_name`` can never go to a peer of ``version`` ("" if some body can:
    one whose fields the peer does not know all hold their defaults)."""
    from .envelope import PROTOCOL_VERSION

    if version >= PROTOCOL_VERSION:
        return ""
    plan = _field_plan(type_name, version)
    return plan if isinstance(plan, str) else ""


def first_version_for(type_name: str) -> int:
    """The oldest supported version some body of ``type_name`` can be sent to."""
    from .envelope import PROTOCOL_VERSION, SUPPORTED_VERSIONS

    for version in sorted(SUPPORTED_VERSIONS):
        if version >= PROTOCOL_VERSION or not version_needed(type_name, version):
            return version
    return PROTOCOL_VERSION


def writable_version(body: Any, peer_version: int | None = None) -> int:
    """The version to write ``body`` in for a peer that speaks ``peer_version`` (None: not known
    yet -- then the oldest supported version that carries this body, which every peer reads).

    A peer newer than this build gets this build's version (it reads one version back)."""
    from .envelope import PROTOCOL_VERSION, SUPPORTED_VERSIONS

    if peer_version is not None:
        return min(peer_version, PROTOCOL_VERSION)
    for version in sorted(v for v in SUPPORTED_VERSIONS if v < PROTOCOL_VERSION):
        if can_write(body, version):
            return version
    return PROTOCOL_VERSION


def can_write(body: Any, version: int) -> bool:
    """Whether ``body`` can be written for a peer of ``version`` (what it lacks at its defaults)."""
    from .envelope import PROTOCOL_VERSION, type_name_of

    if version >= PROTOCOL_VERSION:
        return True
    plan = _field_plan(type_name_of(body), version)
    return isinstance(plan, tuple) and all(
        _is_default(f, getattr(body, f.name)) for f in dataclasses.fields(body) if f.name not in plan
    )


def _is_default(f: dataclasses.Field, value: Any) -> bool:
    default = (
        f.default
        if f.default is not dataclasses.MISSING
        else (f.default_factory() if f.default_factory is not dataclasses.MISSING else dataclasses.MISSING)
    )
    if default is dataclasses.MISSING:
        return False
    if isinstance(value, np.ndarray) or isinstance(default, np.ndarray):
        return (
            isinstance(value, np.ndarray)
            and isinstance(default, np.ndarray)
            and value.dtype == default.dtype
            and np.array_equal(value, default)
        )
    return bool(value == default)


def downgrade_body(type_name: str, body: Any, version: int, wire: dict[str, Any]) -> dict[str, Any]:
    """``wire`` (the body's current wire map) as a peer of ``version`` reads it; ``NeedsVersion``
    when a field it does not know holds something other than its default."""
    from .envelope import PROTOCOL_VERSION

    if version >= PROTOCOL_VERSION:
        return wire
    plan = _field_plan(type_name, version)
    needed = min(
        (v for v in wire_history() if v > version and isinstance(_field_plan(type_name, v), tuple)),
        default=PROTOCOL_VERSION,
    )
    if isinstance(plan, str):
        raise NeedsVersion(type_name, needed, version, plan)
    out = {}
    for f in dataclasses.fields(body):
        if f.name in plan:
            out[f.name] = wire[f.name]
        elif not _is_default(f, getattr(body, f.name)):
            raise NeedsVersion(
                type_name, needed, version, f"field {f.name!r} is new or changed since protocol version {version}"
            )
    return out


_HISTORY_DOC = (
    "The wire fingerprint of every released protocol version, written by ``python -m "
    "shared.protocol.wire``\n(shared/protocol/wire.py). Version 1 was read from the tree tagged v1. "
    "Do not edit by hand.\n"
)


def record_current(*, history_file: Path = HISTORY_FILE, unreleased: bool = False) -> str:
    """Write the current fingerprint as :data:`PROTOCOL_VERSION`'s entry of ``history_file``.

    A version already recorded with another shape is refused: that is a wire change, which
    needs ``PROTOCOL_VERSION`` bumped first (docs/protocol.md, "Versions") -- unless
    ``unreleased`` says that this version has not been released yet (no tag ``v<version>``), so
    its wire may still change."""
    from .envelope import PROTOCOL_VERSION

    versions = {str(v): entry for v, entry in wire_history().items()} if history_file == HISTORY_FILE else {}
    current = wire_fingerprint()
    recorded = versions.get(str(PROTOCOL_VERSION))
    if recorded is not None and recorded != current and not unreleased:
        changed = sorted(t for t in set(recorded) | set(current) if recorded.get(t) != current.get(t))
        raise SystemExit(
            f"protocol version {PROTOCOL_VERSION} is recorded with another wire ({', '.join(changed)} "
            f"differ): bump PROTOCOL_VERSION in shared/protocol/envelope.py, then record again (or, "
            f"if version {PROTOCOL_VERSION} has not been released -- no git tag v{PROTOCOL_VERSION} -- "
            "record it again with --unreleased)"
        )
    versions[str(PROTOCOL_VERSION)] = current
    versions = dict(sorted(versions.items(), key=lambda kv: int(kv[0])))
    # JSON of strings and integers is a Python literal: the history ships as a module, no data file.
    history_file.write_text(f'"""{_HISTORY_DOC}"""\n\nVERSIONS = {json.dumps(versions, indent=1)}\n')
    wire_history.cache_clear()
    return f"recorded protocol version {PROTOCOL_VERSION}: {len(current)} message types in {history_file}"


if __name__ == "__main__":  # python -m shared.protocol.wire [--unreleased]: record the current version's wire
    import sys

    print(record_current(unreleased="--unreleased" in sys.argv[1:]))
