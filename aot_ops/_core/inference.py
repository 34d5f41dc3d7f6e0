"""How an operator's output shapes and dtypes are inferred (the Inference family AotOp calls), and the one cache
that keeps them per input signature (OutputCache).

The ways, one class each:
- CppInference: shapes from the kernel's C++ <symbol>InferShape, which MindSpore calls (dynamic shapes included),
  dtypes from a Python rule;
- MindSporeRules: ops.Custom's own out_shape/out_dtype callables over MindSpore shapes and dtypes;
- PythonInference: any `fn(shapes, torch dtypes) -> (shapes, torch dtypes)`, answered through AotOp.__infer__;
- MetaInference: a PythonInference running the operator's torch counterpart on fake CPU tensors.

A fake tensor (torch's FakeTensorMode) has a shape, a dtype and a device but no data, so this costs microseconds
and follows torch exactly: broadcasting, type promotion, multi-output operators, torch's own error messages for
invalid shapes, and the CPU kernels' own output shapes where they differ from the generic meta kernels (eval-mode
batch norm and embedding_bag return empty statistics on CPU; a meta-device tensor would claim full-size ones).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from . import dtypes as _dtypes
from .dtypes import ms_name
from .torch_private import FakeTensorMode
from ..errors import Error


class InferenceError(Error, ValueError):
    """The operator rejects these input shapes/dtypes (raised while MindSpore infers the output)."""


_local = threading.local()


def fake_mode() -> FakeTensorMode:
    """One fake-tensor mode per thread (a mode is not meant to be entered from two threads at once)."""
    mode = getattr(_local, "mode", None)
    if mode is None:
        mode = _local.mode = FakeTensorMode(allow_non_fake_inputs=True)
    return mode


class Inference:
    """One way of inferring an operator's outputs. AotOp asks it three things: which callbacks ops.Custom gets,
    whether MindSpore's Custom answers inference itself, and the outputs for given input shapes and dtypes."""

    name: str | None = None    # how errors name the operator, when the inference knows better than its symbol
    shapes_in_cpp = False      # MindSpore calls the kernel's C++ <symbol>InferShape for the output shapes
    answered_by_custom = False  # Custom.__infer__ answers (it calls the callbacks); else AotOp.__infer__ does

    def custom_callbacks(self, dtype_rule: Callable) -> tuple[Callable | None, Callable]:
        """(out_shape, out_dtype) for ops.Custom; `dtype_rule` is AotOp's out_dtype over MindSpore dtypes, cached."""
        return _answered_by_infer, _answered_by_infer

    def outputs(self, shapes, dtypes) -> tuple[list | None, list]:
        """(output shapes, output torch dtypes) for inputs of these shapes (None: unknown here) and torch dtypes;
        the shapes are None when the C++ InferShape decides them."""
        raise NotImplementedError


@dataclass(frozen=True)
class CppInference(Inference):
    """Output shapes from the kernel's C++ InferShape (MindSpore calls it, also with dynamic shapes in GRAPH_MODE),
    dtypes from `dtypes(input torch dtypes) -> output torch dtypes` in Python (a dtype inferred in C++ would make
    GRAPH_MODE return 0-dim outputs as Python scalars). The operator's Arity must give both counts."""

    dtypes: Callable[[Sequence[torch.dtype]], Sequence[torch.dtype]]
    shapes_in_cpp = True
    answered_by_custom = True

    def custom_callbacks(self, dtype_rule):
        return None, dtype_rule  # no out_shape: MindSpore calls <symbol>InferShape

    def outputs(self, shapes, dtypes):
        return None, list(self.dtypes(dtypes))


@dataclass(frozen=True)
class MindSporeRules(Inference):
    """Output shapes and dtypes from callables over MindSpore shapes and dtypes, exactly as `ops.Custom` takes them
    (`out_shape=lambda x: x, out_dtype=lambda x: x`): MindSpore calls them itself, dynamic shapes included, and the
    PyNative front calls them once per input signature. For kernels without ms_ext shape/dtype rules."""

    out_shape: Callable
    out_dtype: Callable
    answered_by_custom = True

    def custom_callbacks(self, dtype_rule):
        return self.out_shape, self.out_dtype

    def outputs(self, shapes, dtypes):
        ms_dtypes = [None if d is None else _dtypes.to_ms(d) for d in dtypes]
        # Lists, as MindSpore passes them (a rule may append to one).
        ms_shapes = [None if s is None else list(s) for s in shapes]
        out_shapes, out_dtypes = self.out_shape(*ms_shapes), self.out_dtype(*ms_dtypes)
        if not isinstance(out_dtypes, (tuple, list)):  # one output: a shape and a dtype
            out_shapes, out_dtypes = [out_shapes], [out_dtypes]
        return [tuple(s) for s in out_shapes], [_dtypes.to_torch(d) for d in out_dtypes]


class PythonInference(Inference):
    """`fn(input shapes, input torch dtypes) -> (output shapes, output torch dtypes)` in Python. MindSpore asks
    Custom for the shape and the dtype through separate callbacks, but torch needs both to run an operator, so
    AotOp answers MindSpore's joint `__infer__` instead. Static shapes only."""

    def __init__(self, fn: Callable, name: str | None = None):
        self.fn = fn
        self.name = name

    def outputs(self, shapes, dtypes):
        return self.fn(shapes, dtypes)


def as_inference(infer: Inference | Callable) -> Inference:
    """An Inference as given, or a plain callable as a PythonInference."""
    return infer if isinstance(infer, Inference) else PythonInference(infer)


def _answered_by_infer(*_args):
    raise AssertionError("AotOp infers shape and dtype together in __infer__")


class MetaInference(PythonInference):
    """Wraps `fn(*fake_inputs) -> Tensor | tuple[Tensor, ...]` as a shape/dtype inference. An input whose shape is
    None is passed to `fn` as None (an optional tensor left out). Uncached: the operator keeps one OutputCache."""

    # What an operator inferred in Python can do about dynamic shapes (GRAPH_MODE), said when they reach it.
    DYNAMIC_ADVICE = ("Give its output shapes (aten.op(..., out_shapes=..., out_dtypes=...) with aten.size "
                      "expressions), or port whole networks with aot_ops.from_torch(..., dynamic_batch=True)")

    def __init__(self, name: str, fn: Callable[..., object], dynamic_advice: str = DYNAMIC_ADVICE):
        super().__init__(fn, name)
        self.dynamic_advice = dynamic_advice

    def outputs(self, shapes: Sequence[Sequence[int] | None], dtypes: Sequence[torch.dtype | None]):
        """-> (output shapes, output torch dtypes), one entry per output."""
        for s in shapes:
            if s is not None and any(d < 0 for d in s):
                described = ", ".join(describe_input(s, d) for s, d in zip(shapes, dtypes))
                raise InferenceError(
                    f"{self.name}: input shapes are unknown until run time ({described}: -1 is a dynamic dimension, "
                    f"-2 a dynamic rank); this operator infers its outputs in Python, which needs static shapes. "
                    f"{self.dynamic_advice}")
        try:
            with fake_mode():
                inputs = [None if s is None else torch.empty(s, dtype=d) for s, d in zip(shapes, dtypes)]
                result = self.fn(*inputs)
        except Exception as exc:  # torch explains why (shape mismatch, unsupported dtype, ...)
            described = ", ".join(describe_input(s, d) for s, d in zip(shapes, dtypes))
            raise InferenceError(f"{self.name}: cannot run on inputs ({described}): {exc}{_advice(exc)}") from exc
        outputs = list(result) if isinstance(result, (tuple, list)) else [result]
        return [tuple(o.shape) for o in outputs], [o.dtype for o in outputs]


def _advice(exc: Exception) -> str:
    """What to do when torch has no way to compute an operator's outputs without running it."""
    if type(exc).__name__ == "UnsupportedOperatorException":  # fake tensors met an operator with no fake kernel
        return ("; it has no fake (meta) implementation to infer its outputs from: register one with "
                "torch.library.register_fake")
    return ""


class InferredOutputs:
    """What an operator's inference said for one input signature, and the front's launch plan for it."""

    __slots__ = ("shapes", "dtypes", "tensor_types", "launch_plan")

    def __init__(self, shapes, dtypes, tensor_types):
        self.shapes = shapes              # output shapes; None where the kernel's C++ InferShape decides them
        self.dtypes = dtypes              # output torch dtypes
        self.tensor_types = tensor_types  # the same as MindSpore's inference callbacks answer them
        self.launch_plan = None           # the PyNative front's (front.py), made on its first call


class OutputCache:
    """The one cache of an operator's inferred outputs per input signature.

    MindSpore asks for output dtypes (and, for operators inferred in Python, shapes) on every PyNative call, and
    the PyNative front plans each new input signature: all of them read this cache, so `infer(shapes, dtypes) ->
    (output shapes, output torch dtypes, output tensor types)` runs once per signature. A key is whatever the caller describes the inputs by (MindSpore's dtypes and shapes
    as that caller sees them); errors are not cached, so a refused call raises again. Bounded: a long PyNative loop
    over a dynamic batch starts afresh after `limit` signatures.
    """

    def __init__(self, infer: Callable, limit: int = 1024):
        self._infer = infer
        self._limit = limit
        self._entries: dict = {}

    def find(self, key) -> InferredOutputs | None:
        return self._entries.get(key)

    def get(self, key, shapes, dtypes) -> InferredOutputs:
        """The entry for `key`, inferred from these input shapes (None: the C++ InferShape decides) and torch
        dtypes when it is not cached yet."""
        entry = self._entries.get(key)
        if entry is None:
            entry = InferredOutputs(*self._infer(shapes, dtypes))
            if len(self._entries) >= self._limit:
                self._entries.clear()
            self._entries[key] = entry
        return entry

    def __len__(self) -> int:
        return len(self._entries)


def describe_input(shape, dtype) -> str:
    if shape is None:
        return "None"
    return "[" + ", ".join(str(s) for s in shape) + "] " + ms_name(dtype)
