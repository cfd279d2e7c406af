"""Typed message bodies: dataclasses validated field by field against their type hints.

A body class declares its fields with ordinary annotations; ``from_wire`` checks a decoded CBOR
map against them and names the offending field in the ``SchemaError`` (``body.edges[3]: ...``).
Supported annotations: ``int``, ``float`` (ints accepted), ``str``, ``bool``, ``bytes``,
``np.ndarray`` optionally narrowed with ``Annotated[np.ndarray, ArraySpec(...)]``, ``list[T]``,
``tuple[T, ...]``, ``dict[str, T]``, ``T | None``, ``Literal[...]`` and nested body dataclasses.
Unknown fields are errors: a sender that adds a field bumps the protocol version.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args, get_origin, get_type_hints

import numpy as np

from .errors import SchemaError

_NONE_TYPE = type(None)


@dataclass(frozen=True)
class ArraySpec:
    """Constraints on an array field: allowed dtypes, dimensionality, and whether NaN/inf may occur."""

    dtypes: tuple[str, ...] = ()
    ndim: int | None = None
    finite: bool = False

    def check(self, path: str, value: np.ndarray) -> None:
        if self.dtypes and value.dtype.name not in self.dtypes:
            raise SchemaError(path, f"expected dtype in {list(self.dtypes)}, got {value.dtype.name}")
        if self.ndim is not None and value.ndim != self.ndim:
            raise SchemaError(path, f"expected a {self.ndim}-d array, got shape {value.shape}")
        if self.finite and value.dtype.kind == "f" and not np.isfinite(value).all():
            raise SchemaError(path, "array must not contain NaN or infinity")


def _type_name(value: object) -> str:
    return "array" if isinstance(value, np.ndarray) else type(value).__name__


def _check_scalar(path: str, hint: type, value: Any) -> Any:
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if isinstance(value, float) and math.isnan(value):
                raise SchemaError(path, "NaN is not a valid value")
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    elif hint is bytes:
        if isinstance(value, bytes):
            return value
    elif hint is np.ndarray:
        if isinstance(value, np.ndarray):
            return value
    else:
        raise TypeError(f"unsupported annotation {hint!r} in a message schema")
    raise SchemaError(path, f"expected {hint.__name__}, got {_type_name(value)}")


def check_value(path: str, hint: Any, value: Any) -> Any:
    """Validate ``value`` against annotation ``hint``; return it in its Python form."""
    origin = get_origin(hint)
    if origin is Annotated:
        base, *extras = get_args(hint)
        result = check_value(path, base, value)
        for extra in extras:
            if isinstance(extra, ArraySpec):
                extra.check(path, result)
        return result
    if origin in (typing.Union, types.UnionType):
        options = get_args(hint)
        if value is None:
            if _NONE_TYPE in options:
                return None
            raise SchemaError(path, "must not be null")
        non_null = [o for o in options if o is not _NONE_TYPE]
        if len(non_null) != 1:
            raise TypeError(f"only `T | None` unions are supported in schemas, got {hint!r}")
        return check_value(path, non_null[0], value)
    if origin is Literal:
        allowed = get_args(hint)
        # type first: `array in (...)` would raise numpy's ambiguous-truth-value error
        if type(value) in {type(a) for a in allowed} and value in allowed:
            return value
        raise SchemaError(path, f"expected one of {list(get_args(hint))}, got {value!r}")
    if origin in (list, tuple):
        args = get_args(hint)
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            raise TypeError(f"only tuple[T, ...] is supported in schemas, got {hint!r}")
        if not isinstance(value, (list, tuple)):
            raise SchemaError(path, f"expected a list, got {_type_name(value)}")
        items = [check_value(f"{path}[{i}]", args[0], item) for i, item in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        key_hint, value_hint = get_args(hint)
        if key_hint is not str:
            raise TypeError("schema dict keys must be str")
        if not isinstance(value, dict):
            raise SchemaError(path, f"expected a map, got {_type_name(value)}")
        return {k: check_value(f"{path}.{k}", value_hint, v) for k, v in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return from_wire(hint, value, path)
    if hint is Any:
        return value
    return _check_scalar(path, hint, value)


@functools.cache
def _schema_of(cls: type) -> tuple[dict[str, Any], dict[str, dataclasses.Field]]:
    return get_type_hints(cls, include_extras=True), {f.name: f for f in dataclasses.fields(cls)}


def from_wire(cls: type, data: Any, path: str = "body") -> Any:
    """Build dataclass ``cls`` from a decoded CBOR map, validating every field."""
    if not isinstance(data, dict):
        raise SchemaError(path, f"expected a map, got {_type_name(data)}")
    hints, fields = _schema_of(cls)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise SchemaError(f"{path}.{unknown[0]}", f"unexpected field (allowed: {sorted(fields)})")
    kwargs = {}
    for name, field in fields.items():
        if name not in data:
            has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
            if has_default:
                continue
            raise SchemaError(f"{path}.{name}", "required field is missing")
        kwargs[name] = check_value(f"{path}.{name}", hints[name], data[name])
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as exc:  # __post_init__ cross-field checks
        raise SchemaError(path, str(exc)) from exc


def to_wire(obj: Any) -> Any:
    """Turn a body dataclass (and nested ones) into plain dicts/lists the codec encodes."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_wire(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_wire(item) for item in obj]
    if isinstance(obj, dict):
        return {key: to_wire(value) for key, value in obj.items()}
    return obj
