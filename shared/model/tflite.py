"""The TFLite engine: a tree ensemble compiled into a ``.tflite`` flatbuffer, run by LiteRT.

Two halves with different dependencies:

* ``compile_tflite(ensemble, client_index=None) -> bytes`` (aggregator side) writes the
  flatbuffer with the ``tflite`` schema package and ``flatbuffers`` (extra ``tflite-compile``);
  no TensorFlow.
* ``TfliteEngine(model_bytes)`` (gateway side) runs it with ``ai_edge_litert`` (numpy >= 2) or
  ``tflite_runtime`` (Pi profile, numpy < 2), whichever is installed (``load_interpreter``).
  It needs numpy, cbor2 and one interpreter: it reads the flatbuffer's metadata with a few
  lines of its own, never ``flatbuffers``/``tflite``, and never imports TensorFlow, XGBoost,
  scikit-learn or pandas.

The graph (perfect-tree traversal, builtin ops only). Every tree is padded to a perfect tree of
the ensemble's maximum depth ``D`` (>= 1): a leaf above depth ``D`` becomes pseudo-splits whose
every descendant slot maps back to that leaf, so which way a pseudo-split goes does not matter.
Level ``l`` stores, for slot ``g = tree * 2**l + position``, the input column, the float32
threshold and (if categorical) the category codes. First the input is widened once per call
(NOT_EQUAL, SELECT_V2, CONCATENATION) to ``XA = [X, NaN -> -inf | X, NaN -> +inf | X raw]``; a
split reads the copy that encodes its default direction, so no per-level NaN handling is
needed. Then one ``(n_rows, n_trees)`` int32 tensor of slots advances a level per step::

    x  = GATHER(XA, GATHER(column_l, g), batch_dims=1)     # level 0: GATHER(XA, column_0, axis=1)
    r  = CAST(GREATER_EQUAL(x, GATHER(threshold_l, g)))     # 1 = go right
    r -= CAST(REDUCE_ANY(EQUAL(EXPAND_DIMS(x), GATHER(codes_l, g))))  # levels with categorical splits
    g  = ADD(ADD(g, g), r)                                  # child slot 2g + r

and the output is ``GATHER(leaf_id, g)``: the local leaf node id per tree, (n_rows, n_trees)
int32, the same ids as ``TreeEnsemble.leaves``. The graph does no floating-point arithmetic.
Why the NaN copies are exact: a numeric threshold becomes a float32 ``t32`` in
``[-FLT_MAX, +inf]``, so a NaN replaced by -inf fails ``-inf >= t32`` (goes left, like real
-inf) and one replaced by +inf passes ``+inf >= t32`` (goes right, like real +inf).
``TfliteEngine.raw`` turns the leaf ids into ``predict_raw`` with the numpy engine's own summation
(``CompiledEnsemble._combine``, same order), so it equals the numpy engine bit for bit — LiteRT's
SUM would add in another order (measured: up to 7e-6 off for 500 trees). The leaf values,
base score and ensemble rule come from the ensemble, embedded as CBOR in the flatbuffer's
metadata (``wheelfed.ensemble``).

Numerics — **inputs are float32**, as in the numpy engine's split rule (``float32(x) <
threshold``, ``shared.model.inference``): a float64 array given to ``TfliteEngine`` is rounded
to float32 first, as the numpy engine rounds it, so both route every input alike. Thresholds are converted
so that for float32 inputs ``x < t`` is exact: a float64 threshold ``t`` becomes the smallest
float32 ``t32 >= t`` (then for every float32 ``x``: ``x < t  <=>  x < t32``; thresholds beyond
the float32 range become +inf / -FLT_MAX, still exact). A split goes right iff ``x >= t32``;
NaN takes its split's default direction (through the widened input); ±inf compare as numbers.

Categorical splits are supported in general: a categorical node gets threshold -inf (every
value passes ``x >= -inf`` except NaN), and its codes, padded with NaN to the widest set on
that level, are matched by float32 equality; a match subtracts 1 (goes left). A split sending
NaN right reads the NaN -> +inf copy (+inf is no code: right); one sending NaN left reads the raw
copy (NaN fails ``>= -inf`` and matches nothing: left) — -inf cannot stand in for NaN there,
since a real -inf is a non-code and must go right. Codes that are not exactly representable in
float32 (2**24 + 1, ...) are dropped at compile time: no float32 input can equal them, while
their float32 rounding could equal a different input. Non-codes (negative, fractional, ±inf,
beyond int32) equal no code and go right, as in the numpy engine.

Client indicator (models with ``uses_client_index``): by default it is one more input column
like in the numpy engine (categorical splits on it work as above). ``compile_tflite(model,
client_index=k)`` instead specialises the model for one gateway: every split on the client
feature is resolved at compile time (index ``k``; ``-1`` = a client outside the training fleet,
i.e. NaN / default direction), the subtree that is never taken disappears (which can reduce the
depth), and the compiled model's input is the real features only (``n_features - 1``
columns). ``TfliteEngine`` then accepts either width: with the client column present it must
hold ``k`` (NaN for -1) in every row, and is dropped.

Batch: the input has a dynamic batch dimension (shape signature ``[-1, n_inputs]``). The
engine keeps one interpreter at batch 1 for single windows (no re-allocation) and one that it
resizes (``resize_tensor_input`` + ``allocate_tensors``) for batches, fed in chunks of at most
``BATCH_CHUNK`` rows. Size limit: ``n_trees * 2**D`` slots per level (refused above
``MAX_SLOTS``), so very deep trees are better served by the numpy engine.
"""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from .ensemble import TreeEnsemble
from .inference import as_rows
from .inputs import CLIENT_FEATURE, uses_client_index

if TYPE_CHECKING:
    from .inference import CompiledEnsemble

__all__ = ["TfliteEngine", "compile_tflite", "load_interpreter", "tflite_available", "TFLITE_FORMAT"]

TFLITE_FORMAT = "wheelfed-tflite/1"
METADATA_INFO = "wheelfed.info"  # JSON: format, n_inputs, client_index, depth, n_trees
METADATA_ENSEMBLE = "wheelfed.ensemble"  # the source ensemble as CBOR (leaf values, rule)
INPUT_NAME = "features"
OUTPUT_NAME = "leaves"
#: Largest number of perfect-tree slots on one level (n_trees * 2**depth).
MAX_SLOTS = 1 << 24
#: Rows per interpreter call for batches (bounds the (rows, trees, codes) temporaries).
BATCH_CHUNK = 4096

_INSTALL_HINT = (
    "the TFLite engine needs a TFLite interpreter: `pip install ai-edge-litert` (numpy >= 2; "
    "extra `wheelfed[edge-tflite]`) or, on a Raspberry Pi with numpy < 2, "
    "`pip install 'numpy<2' 'tflite-runtime==2.14.*'` (see deploy/tflite-pi-profile)"
)


# ---------------------------------------------------------------------------------------------
# Interpreter loading (runtime side)
# ---------------------------------------------------------------------------------------------
def load_interpreter() -> type:
    """The ``Interpreter`` class of ``ai_edge_litert`` or else ``tflite_runtime``.

    Raises ``ImportError`` with install instructions when neither is usable (tflite-runtime
    2.14 was built against numpy 1.x and cannot run under numpy 2)."""
    try:
        from ai_edge_litert.interpreter import Interpreter

        return Interpreter
    except ImportError:
        pass
    try:
        from tflite_runtime.interpreter import Interpreter
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
    if int(np.__version__.split(".")[0]) >= 2:
        raise ImportError(
            f"tflite-runtime is installed but numpy is {np.__version__}: tflite-runtime 2.14 needs "
            f"numpy < 2 — {_INSTALL_HINT}"
        )
    return Interpreter


def tflite_available() -> bool:
    """Whether ``load_interpreter`` finds a usable interpreter."""
    try:
        load_interpreter()
    except ImportError:
        return False
    return True


def _resolver_kwargs(interpreter_class: type) -> dict[str, Any]:
    """Plain builtin kernels without the default (XNNPACK) delegate: it takes none of these
    ops, and skipping it makes start-up cheaper and results independent of delegation."""
    module = __import__(interpreter_class.__module__, fromlist=["OpResolverType"])
    resolver = getattr(module, "OpResolverType", None)
    if resolver is None or not hasattr(resolver, "BUILTIN_WITHOUT_DEFAULT_DELEGATES"):
        return {}
    return {"experimental_op_resolver_type": resolver.BUILTIN_WITHOUT_DEFAULT_DELEGATES}


# Blocks of the widened input [X with NaN -> -inf | X with NaN -> +inf | X]: which copy of a
# feature a split reads (see the module docstring).
_NAN_LOW, _NAN_HIGH, _RAW = 0, 1, 2


# ---------------------------------------------------------------------------------------------
# The perfect-tree layout (pure numpy; shared by compiler and tests)
# ---------------------------------------------------------------------------------------------
def float32_threshold(threshold: ArrayLike) -> np.ndarray:
    """The smallest float32 >= each float64 threshold (so ``x < t`` is exact for float32 x)."""
    t64 = np.asarray(threshold, dtype=np.float64)
    with np.errstate(over="ignore"):
        t32 = t64.astype(np.float32)
    low = t32.astype(np.float64) < t64
    t32[low] = np.nextafter(t32[low], np.float32(np.inf))
    return t32


class _Layout:
    """Per-level node tables of the padded perfect trees."""

    def __init__(self, ensemble: TreeEnsemble, client_index: int | None) -> None:
        self.n_trees = ensemble.n_trees
        self.n_inputs = ensemble.n_features
        self.client_feature = -1
        self.client_value = np.nan
        if client_index is not None:
            if not uses_client_index(ensemble):
                raise ValueError("client_index is only for models with client-indicator splits (uses_client_index)")
            if not isinstance(client_index, (int, np.integer)) or client_index < -1:
                raise ValueError(f"client_index must be an int >= -1, got {client_index!r}")
            self.client_feature = ensemble.n_features - 1
            self.client_value = np.nan if client_index < 0 else float(client_index)
            self.n_inputs -= 1
        self.depth = max(1, max(self._depth(tree, 0) for tree in ensemble.trees))
        if self.n_trees * 2**self.depth > MAX_SLOTS:
            raise ValueError(
                f"{self.n_trees} trees padded to depth {self.depth} need {self.n_trees * 2**self.depth} "
                f"leaf slots (limit {MAX_SLOTS}): use the numpy engine for such deep trees"
            )
        T, D = self.n_trees, self.depth
        # Pseudo-nodes (padding below early leaves): column 0, threshold 0.
        self.feature = [np.zeros(T << d, dtype=np.int32) for d in range(D)]  # column of the widened input
        self.threshold = [np.zeros(T << d, dtype=np.float32) for d in range(D)]
        self.n_blocks = 2  # 3 once a categorical split sends NaN left (it needs the raw block)
        self.codes: list[dict[int, np.ndarray]] = [{} for _ in range(D)]
        self.leaf = np.zeros(T << D, dtype=np.int32)
        for t, tree in enumerate(ensemble.trees):
            self._tree = tree
            self._t32 = float32_threshold(tree.threshold)
            self._place(t, 0, 0, 0)

    def _resolved(self, tree: Any, node: int) -> int | None:
        """For a split on the specialised client feature: the child taken; else None."""
        if self.client_feature < 0 or int(tree.feature[node]) != self.client_feature:
            return None
        x = self.client_value
        if np.isnan(x):
            left = bool(tree.default_left[node])
        elif tree.is_categorical[node]:
            left = int(x) in set(tree.categories(node).tolist())
        else:
            left = x < float(tree.threshold[node])
        return int(tree.left[node] if left else tree.right[node])

    def _depth(self, tree: Any, node: int) -> int:
        if tree.left[node] < 0:
            return 0
        child = self._resolved(tree, node)
        if child is not None:
            return self._depth(tree, child)
        return 1 + max(self._depth(tree, int(tree.left[node])), self._depth(tree, int(tree.right[node])))

    def _place(self, t: int, node: int, level: int, position: int) -> None:
        tree = self._tree
        while True:
            child = None if tree.left[node] < 0 else self._resolved(tree, node)
            if child is None:
                break
            node = child
        D = self.depth
        if tree.left[node] < 0:  # a leaf: every slot below maps to it
            span = 1 << (D - level)
            start = ((t << level) + position) * span
            self.leaf[start : start + span] = node
            return
        g = (t << level) + position
        block = _NAN_LOW if tree.default_left[node] else _NAN_HIGH
        if tree.is_categorical[node]:
            self.threshold[level][g] = -np.inf
            if tree.default_left[node]:
                block = _RAW
                self.n_blocks = 3
            codes = tree.categories(node).astype(np.float64)
            exact = codes.astype(np.float32).astype(np.float64) == codes
            self.codes[level][g] = codes[exact].astype(np.float32)
        else:
            self.threshold[level][g] = self._t32[node]
        self.feature[level][g] = int(tree.feature[node]) + block * self.n_inputs
        self._place(t, int(tree.left[node]), level + 1, 2 * position)
        self._place(t, int(tree.right[node]), level + 1, 2 * position + 1)

    def code_table(self, level: int) -> np.ndarray | None:
        """(slots, K) float32 codes padded with NaN, or None if no split on the level has any."""
        sets = self.codes[level]
        width = max((c.size for c in sets.values()), default=0)
        if width == 0:
            return None
        table = np.full((self.n_trees << level, width), np.nan, dtype=np.float32)
        for g, codes in sets.items():
            table[g, : codes.size] = codes
        return table


# ---------------------------------------------------------------------------------------------
# Compiler (aggregator side: needs `flatbuffers` and the `tflite` schema package)
# ---------------------------------------------------------------------------------------------
class _Graph:
    """Tensors, constant buffers and operators of one subgraph, serialised at the end."""

    def __init__(self) -> None:
        self.tensors: list[tuple[str, int, list[int], int]] = []  # name, type, signature, buffer
        self.buffers: list[bytes] = [b""]  # buffer 0 must be empty
        self.operators: list[tuple[int, list[int], list[int], Any]] = []
        self.opcodes: dict[tuple[int, int], int] = {}

    def tensor(self, name: str, tensor_type: int, signature: list[int], data: bytes | None = None) -> int:
        buffer = 0
        if data is not None:
            self.buffers.append(data)
            buffer = len(self.buffers) - 1
        self.tensors.append((name, tensor_type, signature, buffer))
        return len(self.tensors) - 1

    def const(self, name: str, array: np.ndarray) -> int:
        types = {np.dtype(np.float32): _TT["FLOAT32"], np.dtype(np.int32): _TT["INT32"]}
        array = np.ascontiguousarray(array)
        data = array.astype(array.dtype.newbyteorder("<")).tobytes()
        return self.tensor(name, types[array.dtype], list(array.shape), data)

    def op(self, code: int, inputs: list[int], outputs: list[int], options: Any = None, version: int = 1) -> None:
        index = self.opcodes.setdefault((code, version), len(self.opcodes))
        self.operators.append((index, inputs, outputs, options))


_TT: dict[str, int] = {}  # tflite TensorType values, filled by _schema()


def _schema() -> Any:
    try:
        import flatbuffers  # noqa: F401
        import tflite
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "compile_tflite needs the `tflite` schema package and `flatbuffers`: "
            "pip install 'wheelfed[tflite-compile]' (or `pip install tflite flatbuffers`)"
        ) from exc
    _TT.update(FLOAT32=tflite.TensorType.FLOAT32, INT32=tflite.TensorType.INT32, BOOL=tflite.TensorType.BOOL)
    return tflite


def compile_tflite(ensemble: TreeEnsemble, *, client_index: int | None = None) -> bytes:
    """Compile ``ensemble`` into a ``.tflite`` flatbuffer (see the module docstring).

    Input ``features``: float32 ``[-1, n_inputs]``; output ``leaves``: int32 ``[-1, n_trees]``,
    the local leaf node ids (as ``TreeEnsemble.leaves``). ``client_index`` specialises a model
    with client-indicator splits for one gateway (its client column is then not an input)."""
    if not isinstance(ensemble, TreeEnsemble):
        raise TypeError(f"expected a TreeEnsemble, got {type(ensemble).__name__}")
    tfl = _schema()
    layout = _Layout(ensemble, client_index)
    op, TT = tfl.BuiltinOperator, _TT
    T, D = layout.n_trees, layout.depth
    g = _Graph()
    X = g.tensor(INPUT_NAME, TT["FLOAT32"], [-1, layout.n_inputs])
    F = layout.n_inputs

    def gather_opts(axis: int, batch_dims: int) -> Any:
        def build(b: Any) -> int:
            tfl.GatherOptionsStart(b)
            tfl.GatherOptionsAddAxis(b, axis)
            tfl.GatherOptionsAddBatchDims(b, batch_dims)
            return tfl.GatherOptionsEnd(b)

        return (tfl.BuiltinOptions.GatherOptions, build)

    def simple_opts(kind: str) -> Any:
        module = {"Cast": "CastOptions", "Add": "AddOptions", "Mul": "MulOptions", "Sub": "SubOptions"}[kind]

        def build(b: Any) -> int:
            getattr(tfl, f"{module}Start")(b)
            if kind == "Cast":
                tfl.CastOptionsAddInDataType(b, TT["BOOL"])
                tfl.CastOptionsAddOutDataType(b, TT["INT32"])
            return getattr(tfl, f"{module}End")(b)

        return (getattr(tfl.BuiltinOptions, module), build)

    def tmp(name: str, tensor_type: int, signature: list[int]) -> int:
        return g.tensor(name, tensor_type, signature)

    def as_int(name: str, flag: int) -> int:
        out = tmp(name, TT["INT32"], [-1, T])
        g.op(op.CAST, [flag], [out], simple_opts("Cast"))
        return out

    def binary(code: int, name: str, a: int, b: int, tensor_type: int | None = None, opts: str | None = None) -> int:
        out = tmp(name, TT["INT32"] if tensor_type is None else tensor_type, [-1, T])
        g.op(code, [a, b], [out], simple_opts(opts) if opts else None)
        return out

    # The widened input: NaN replaced by -inf (splits sending NaN left), by +inf (right), raw.
    nan = g.tensor("nan", TT["BOOL"], [-1, F])
    g.op(op.NOT_EQUAL, [X, X], [nan])

    def select_opts(b: Any) -> int:
        tfl.SelectV2OptionsStart(b)
        return tfl.SelectV2OptionsEnd(b)

    blocks = []
    for name, fill in (("x_nan_low", -np.inf), ("x_nan_high", np.inf)):
        blocks.append(g.tensor(name, TT["FLOAT32"], [-1, F]))
        g.op(
            op.SELECT_V2,
            [nan, g.const(name + "/fill", np.array(fill, dtype=np.float32)), X],
            [blocks[-1]],
            (tfl.BuiltinOptions.SelectV2Options, select_opts),
        )
    if layout.n_blocks == 3:
        blocks.append(X)
    XA = g.tensor("x_wide", TT["FLOAT32"], [-1, F * layout.n_blocks])

    def concat(b: Any) -> int:
        tfl.ConcatenationOptionsStart(b)
        tfl.ConcatenationOptionsAddAxis(b, 1)
        return tfl.ConcatenationOptionsEnd(b)

    g.op(op.CONCATENATION, blocks, [XA], (tfl.BuiltinOptions.ConcatenationOptions, concat))

    axis2 = None
    slot = -1
    for level in range(D):
        p = f"l{level}/"
        if level == 0:
            x = tmp(p + "x", TT["FLOAT32"], [-1, T])
            g.op(op.GATHER, [XA, g.const(p + "feature", layout.feature[0])], [x], gather_opts(1, 0))
            t = g.const(p + "threshold", layout.threshold[0])
        else:
            f = tmp(p + "f", TT["INT32"], [-1, T])
            g.op(op.GATHER, [g.const(p + "feature", layout.feature[level]), slot], [f], gather_opts(0, 0))
            x = tmp(p + "x", TT["FLOAT32"], [-1, T])
            g.op(op.GATHER, [XA, f], [x], gather_opts(1, 1), version=5)
            t = tmp(p + "t", TT["FLOAT32"], [-1, T])
            g.op(op.GATHER, [g.const(p + "threshold", layout.threshold[level]), slot], [t], gather_opts(0, 0))
        right = as_int(p + "ge_i", binary(op.GREATER_EQUAL, p + "ge", x, t, TT["BOOL"]))
        codes = layout.code_table(level)
        if codes is not None:
            K = codes.shape[1]
            if axis2 is None:
                axis2 = g.const("axis2", np.array([2], dtype=np.int32))
            xe = tmp(p + "x3", TT["FLOAT32"], [-1, T, 1])
            g.op(op.EXPAND_DIMS, [x, axis2], [xe])
            table = g.const(p + "codes", codes)
            if level == 0:
                level_codes = table
            else:
                level_codes = tmp(p + "c", TT["FLOAT32"], [-1, T, K])
                g.op(op.GATHER, [table, slot], [level_codes], gather_opts(0, 0))
            eq = tmp(p + "eq", TT["BOOL"], [-1, T, K])
            g.op(op.EQUAL, [xe, level_codes], [eq])
            member = tmp(p + "member", TT["BOOL"], [-1, T])

            def reducer(b: Any) -> int:
                tfl.ReducerOptionsStart(b)
                tfl.ReducerOptionsAddKeepDims(b, False)
                return tfl.ReducerOptionsEnd(b)

            g.op(op.REDUCE_ANY, [eq, axis2], [member], (tfl.BuiltinOptions.ReducerOptions, reducer))
            right = binary(op.SUB, p + "r_cat", right, as_int(p + "member_i", member), opts="Sub")
        if level == 0:
            base = g.const(p + "next_base", (2 * np.arange(T)).astype(np.int32))
            slot = binary(op.ADD, p + "next", right, base, opts="Add")
        else:
            twice = binary(op.ADD, p + "twice", slot, slot, opts="Add")
            slot = binary(op.ADD, p + "next", twice, right, opts="Add")
    leaves = tmp(OUTPUT_NAME, TT["INT32"], [-1, T])
    g.op(op.GATHER, [g.const("leaf_id", layout.leaf), slot], [leaves], gather_opts(0, 0))

    info = {
        "format": TFLITE_FORMAT,
        "n_inputs": layout.n_inputs,
        "n_features": ensemble.n_features,
        "client_index": client_index,
        "depth": D,
        "n_trees": T,
    }
    metadata = {METADATA_INFO: json.dumps(info, sort_keys=True).encode(), METADATA_ENSEMBLE: ensemble.to_cbor()}
    return _serialize(tfl, g, X, leaves, metadata)


def _serialize(tfl: Any, g: _Graph, input_id: int, output_id: int, metadata: dict[str, bytes]) -> bytes:
    import flatbuffers

    b = flatbuffers.Builder(1024 + sum(len(d) for d in g.buffers) + sum(len(d) for d in metadata.values()))

    def int_vector(start: Any, values: list[int]) -> int:
        start(b, len(values))
        for v in reversed(values):
            b.PrependInt32(v)
        return b.EndVector()

    def byte_vector(data: bytes) -> int:
        b.StartVector(1, len(data), 16)  # 16-byte aligned constant data
        b.head -= len(data)
        b.Bytes[b.head : b.head + len(data)] = data
        b.vectorNumElems = len(data)
        return b.EndVector()

    tensor_offsets = []
    for name, tensor_type, signature, buffer in g.tensors:
        name_off = b.CreateString(name)
        shape = int_vector(tfl.TensorStartShapeVector, [1 if d < 0 else d for d in signature])
        sig = int_vector(tfl.TensorStartShapeSignatureVector, signature) if -1 in signature else None
        tfl.TensorStart(b)
        tfl.TensorAddShape(b, shape)
        if sig is not None:
            tfl.TensorAddShapeSignature(b, sig)
        tfl.TensorAddType(b, tensor_type)
        tfl.TensorAddBuffer(b, buffer)
        tfl.TensorAddName(b, name_off)
        tensor_offsets.append(tfl.TensorEnd(b))

    operator_offsets = []
    for opcode_index, inputs, outputs, options in g.operators:
        ins = int_vector(tfl.OperatorStartInputsVector, inputs)
        outs = int_vector(tfl.OperatorStartOutputsVector, outputs)
        opt = options[1](b) if options else None
        tfl.OperatorStart(b)
        tfl.OperatorAddOpcodeIndex(b, opcode_index)
        tfl.OperatorAddInputs(b, ins)
        tfl.OperatorAddOutputs(b, outs)
        if opt is not None:
            tfl.OperatorAddBuiltinOptionsType(b, options[0])
            tfl.OperatorAddBuiltinOptions(b, opt)
        operator_offsets.append(tfl.OperatorEnd(b))

    def table_vector(start: Any, offsets: list[int]) -> int:
        start(b, len(offsets))
        for off in reversed(offsets):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()

    tensors_vec = table_vector(tfl.SubGraphStartTensorsVector, tensor_offsets)
    operators_vec = table_vector(tfl.SubGraphStartOperatorsVector, operator_offsets)
    sg_inputs = int_vector(tfl.SubGraphStartInputsVector, [input_id])
    sg_outputs = int_vector(tfl.SubGraphStartOutputsVector, [output_id])
    sg_name = b.CreateString("main")
    tfl.SubGraphStart(b)
    tfl.SubGraphAddTensors(b, tensors_vec)
    tfl.SubGraphAddInputs(b, sg_inputs)
    tfl.SubGraphAddOutputs(b, sg_outputs)
    tfl.SubGraphAddOperators(b, operators_vec)
    tfl.SubGraphAddName(b, sg_name)
    subgraph = tfl.SubGraphEnd(b)

    opcode_offsets = []
    for (code, version), _ in sorted(g.opcodes.items(), key=lambda item: item[1]):
        tfl.OperatorCodeStart(b)
        tfl.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
        tfl.OperatorCodeAddBuiltinCode(b, code)
        tfl.OperatorCodeAddVersion(b, version)
        opcode_offsets.append(tfl.OperatorCodeEnd(b))

    all_buffers = list(g.buffers)
    metadata_offsets = []
    for name, data in metadata.items():
        all_buffers.append(data)
        name_off = b.CreateString(name)
        tfl.MetadataStart(b)
        tfl.MetadataAddName(b, name_off)
        tfl.MetadataAddBuffer(b, len(all_buffers) - 1)
        metadata_offsets.append(tfl.MetadataEnd(b))

    buffer_offsets = []
    for data in all_buffers:
        data_off = byte_vector(data) if data else None
        tfl.BufferStart(b)
        if data_off is not None:
            tfl.BufferAddData(b, data_off)
        buffer_offsets.append(tfl.BufferEnd(b))

    buffers_vec = table_vector(tfl.ModelStartBuffersVector, buffer_offsets)
    opcodes_vec = table_vector(tfl.ModelStartOperatorCodesVector, opcode_offsets)
    subgraphs_vec = table_vector(tfl.ModelStartSubgraphsVector, [subgraph])
    metadata_vec = table_vector(tfl.ModelStartMetadataVector, metadata_offsets)
    description = b.CreateString("WheelFed tree ensemble (perfect-tree traversal)")
    tfl.ModelStart(b)
    tfl.ModelAddVersion(b, 3)
    tfl.ModelAddOperatorCodes(b, opcodes_vec)
    tfl.ModelAddSubgraphs(b, subgraphs_vec)
    tfl.ModelAddDescription(b, description)
    tfl.ModelAddBuffers(b, buffers_vec)
    tfl.ModelAddMetadata(b, metadata_vec)
    b.Finish(tfl.ModelEnd(b), file_identifier=b"TFL3")
    return bytes(b.Output())


# ---------------------------------------------------------------------------------------------
# Reading the metadata back without the flatbuffers package
# ---------------------------------------------------------------------------------------------
def read_metadata(model_bytes: bytes) -> dict[str, bytes]:
    """The ``Model.metadata`` entries of a ``.tflite`` flatbuffer: name -> buffer bytes."""
    buf = memoryview(model_bytes)
    if len(buf) < 8 or bytes(buf[4:8]) != b"TFL3":
        raise ValueError("not a TFLite flatbuffer (file identifier TFL3 missing)")

    def u32(pos: int) -> int:
        if pos < 0 or pos + 4 > len(buf):
            raise ValueError("truncated or corrupt TFLite flatbuffer")
        return struct.unpack_from("<I", buf, pos)[0]

    def field(table: int, index: int) -> int | None:
        """Absolute position of a table's field ``index``, or None if absent."""
        vtable = table - struct.unpack_from("<i", buf, table)[0]
        vsize = struct.unpack_from("<H", buf, vtable)[0]
        if 4 + 2 * index >= vsize:
            return None
        off = struct.unpack_from("<H", buf, vtable + 4 + 2 * index)[0]
        return table + off if off else None

    def deref(pos: int) -> int:
        return pos + u32(pos)

    def vector(pos: int | None) -> tuple[int, int]:
        if pos is None:
            return 0, 0
        start = deref(pos)
        return start + 4, u32(start)

    model = u32(0)
    # Model fields: 0 version, 1 operator_codes, 2 subgraphs, 3 description, 4 buffers,
    # 5 metadata_buffer, 6 metadata; Metadata: 0 name, 1 buffer; Buffer: 0 data.
    buffers_at, n_buffers = vector(field(model, 4))
    metadata_at, n_metadata = vector(field(model, 6))
    out: dict[str, bytes] = {}
    for i in range(n_metadata):
        entry = deref(metadata_at + 4 * i)
        name_pos = field(entry, 0)
        buffer_pos = field(entry, 1)
        if name_pos is None or buffer_pos is None:
            continue
        name_at, name_len = vector(name_pos)
        index = u32(buffer_pos)
        if index >= n_buffers:
            raise ValueError(f"metadata buffer index {index} out of range")
        data_at, data_len = vector(field(deref(buffers_at + 4 * index), 0))
        if data_at + data_len > len(buf):
            raise ValueError("truncated or corrupt TFLite flatbuffer")
        out[bytes(buf[name_at : name_at + name_len]).decode()] = bytes(buf[data_at : data_at + data_len])
    return out


# ---------------------------------------------------------------------------------------------
# Runtime engine (gateway side)
# ---------------------------------------------------------------------------------------------
class TfliteEngine:
    """Runs a model made by ``compile_tflite``: ``leaves(X)`` as ``TreeEnsemble.leaves`` and
    ``raw(X)`` as ``TreeEnsemble.predict_raw`` (equal bit for bit for float32 inputs).

    ``X``: float32 rows (other dtypes are converted with ``astype(np.float32)``), 1-D for one
    row. ``num_threads`` goes to the interpreter (1: the ops are tiny, threads only add cost)."""

    def __init__(self, model_bytes: bytes, *, num_threads: int = 1) -> None:
        from .serialization import from_cbor

        self.model_bytes = bytes(model_bytes)
        meta = read_metadata(self.model_bytes)
        if METADATA_INFO not in meta or METADATA_ENSEMBLE not in meta:
            raise ValueError("this .tflite was not made by compile_tflite (no wheelfed metadata)")
        self.info = json.loads(meta[METADATA_INFO])
        if self.info.get("format") != TFLITE_FORMAT:
            raise ValueError(f"unsupported WheelFed TFLite format {self.info.get('format')!r}")
        self.ensemble: TreeEnsemble = from_cbor(meta[METADATA_ENSEMBLE])
        self.n_inputs = int(self.info["n_inputs"])
        self.n_trees = self.ensemble.n_trees
        self.client_index = self.info.get("client_index")
        self._interpreter_class = load_interpreter()
        self._num_threads = num_threads
        self._single = self._new_interpreter()
        self._batch: Any = None
        self._batch_rows = 0
        self._numpy: CompiledEnsemble = self.ensemble._engine

    def _new_interpreter(self) -> Any:
        cls = self._interpreter_class
        interpreter = cls(model_content=self.model_bytes, num_threads=self._num_threads, **_resolver_kwargs(cls))
        interpreter.allocate_tensors()
        self._input_index = interpreter.get_input_details()[0]["index"]
        self._output_index = interpreter.get_output_details()[0]["index"]
        return interpreter

    # -- inputs ---------------------------------------------------------------------------------
    def rows(self, X: ArrayLike) -> tuple[np.ndarray, bool]:
        """``X`` as C-contiguous float32 (n_rows, n_inputs), and whether it was 1-D. A model
        specialised for one client also takes the full input with the client column, which
        must then hold that client's index (NaN for -1) and is dropped."""
        array, single = as_rows(X)
        width = array.shape[1]
        if self.client_index is not None and width == self.n_inputs + 1:
            column = array[:, -1].astype(np.float64)
            expected = np.nan if self.client_index < 0 else float(self.client_index)
            ok = np.isnan(column) if np.isnan(expected) else column == expected
            if not ok.all():
                raise ValueError(
                    f"this model was compiled for client index {self.client_index}; the "
                    f"{CLIENT_FEATURE!r} column holds other values"
                )
            array = array[:, :-1]
        elif width != self.n_inputs:
            raise ValueError(f"X has {width} features per row, the model expects {self.n_inputs}")
        return np.ascontiguousarray(array, dtype=np.float32), single

    # -- evaluation -----------------------------------------------------------------------------
    def _run(self, rows: np.ndarray) -> np.ndarray:
        n = rows.shape[0]
        if n == 0:
            return np.zeros((0, self.n_trees), dtype=np.int32)
        if n == 1:
            interpreter = self._single
        else:
            if self._batch is None:
                self._batch = self._new_interpreter()
            interpreter = self._batch
            if n != self._batch_rows:
                interpreter.resize_tensor_input(self._input_index, [n, self.n_inputs])
                interpreter.allocate_tensors()
                self._batch_rows = n
        interpreter.set_tensor(self._input_index, rows)
        interpreter.invoke()
        return interpreter.get_tensor(self._output_index)

    def _traverse(self, rows: np.ndarray) -> np.ndarray:
        if rows.shape[0] <= BATCH_CHUNK:
            return self._run(rows)
        return np.concatenate([self._run(rows[i : i + BATCH_CHUNK]) for i in range(0, rows.shape[0], BATCH_CHUNK)])

    def leaves(self, X: ArrayLike) -> np.ndarray:
        """Local leaf node id per tree: (n_rows, n_trees) int32, (n_trees,) for a 1-D ``X``."""
        rows, single = self.rows(X)
        local = np.asarray(self._traverse(rows), dtype=np.int32)
        return local[0] if single else local

    def raw(self, X: ArrayLike) -> np.ndarray:
        """``predict_raw``: the TFLite leaves combined by the numpy engine's own summation."""
        rows, single = self.rows(X)
        out = np.empty((rows.shape[0], self.ensemble.n_outputs), dtype=np.float64)
        for start in range(0, rows.shape[0], BATCH_CHUNK):
            local = self._run(rows[start : start + BATCH_CHUNK])
            out[start : start + BATCH_CHUNK] = self._numpy._combine(local.astype(np.intp) + self._numpy.roots)
        return out[0] if single else out

    def predict_proba(self, X: ArrayLike) -> np.ndarray:
        """Class probabilities, as ``TreeEnsemble.predict_proba`` (same link functions)."""
        from .ensemble import _sigmoid, _softmax

        model = self.ensemble
        if not model.is_classifier:
            raise ValueError("predict_proba needs a classifier; this model is a regressor")
        raw = self.raw(X)
        if model.kind != "boosted":
            return raw
        if model.link == "sigmoid":
            p = _sigmoid(raw)
            return np.concatenate([1.0 - p, p], axis=-1)
        return _softmax(raw)

    def __repr__(self) -> str:
        return (
            f"TfliteEngine(n_trees={self.n_trees}, depth={self.info['depth']}, n_inputs={self.n_inputs}, "
            f"client_index={self.client_index}, interpreter={self._interpreter_class.__module__})"
        )
