"""Output shapes and dtypes of an operator: learned in Python by running its torch counterpart on fake CPU tensors
(MetaInference), and kept once per input signature for every kind of inference (OutputCache).

A fake tensor (torch's FakeTensorMode) has a shape, a dtype and a device but no data, so this costs microseconds
and follows torch exactly: broadcasting, type promotion, multi-output operators, torch's own error messages for
invalid shapes, and the CPU kernels' own output shapes where they differ from the generic meta kernels (eval-mode
batch norm and embedding_bag return empty statistics on CPU; a meta-device tensor would claim full-size ones).
"""
from __future__ import annotations

import threading
from typing import Callable, Sequence

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from .dtypes import ms_name
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


class MetaInference:
    """Wraps `fn(*fake_inputs) -> Tensor | tuple[Tensor, ...]` as a shape/dtype inference. An input whose shape is
    None is passed to `fn` as None (an optional tensor left out). Uncached: the operator keeps one OutputCache."""

    # What an operator inferred in Python can do about dynamic shapes (GRAPH_MODE), said when they reach it.
    DYNAMIC_ADVICE = ("Give its output shapes (aten.op(..., out_shapes=..., out_dtypes=...) with aten.size "
                      "expressions), or port whole networks with aot_ops.from_torch(..., dynamic_batch=True)")

    def __init__(self, name: str, fn: Callable[..., object], dynamic_advice: str = DYNAMIC_ADVICE):
        self.name = name
        self.fn = fn
        self.dynamic_advice = dynamic_advice

    def __call__(self, shapes: Sequence[Sequence[int] | None], dtypes: Sequence[torch.dtype | None]):
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
            raise InferenceError(f"{self.name}: cannot run on inputs ({described}): {exc}{_advice(exc)}") from None
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
