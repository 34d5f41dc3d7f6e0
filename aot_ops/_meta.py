"""Output shapes and dtypes of an operator, learned by running its torch counterpart on the meta device.

A meta tensor has a shape and a dtype but no data, so this costs microseconds and follows torch exactly:
broadcasting, type promotion, multi-output operators, and torch's own error messages for invalid shapes.
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

from . import _dtypes
from ._signature import ms_name


class InferenceError(ValueError):
    """The operator rejects these input shapes/dtypes (raised while MindSpore infers the output)."""


class MetaInference:
    """Wraps `fn(*meta_inputs) -> Tensor | tuple[Tensor, ...]` as a shape/dtype inference with a cache.

    MindSpore asks for the output shape on every PyNative call, so results are cached per (shapes, dtypes).
    """

    def __init__(self, name: str, fn: Callable[..., object]):
        self.name = name
        self.fn = fn
        self._cache: dict[tuple, tuple[list[tuple[int, ...]], list[torch.dtype]]] = {}

    def __call__(self, shapes: Sequence[Sequence[int]], dtypes: Sequence[torch.dtype]):
        """-> (output shapes, output torch dtypes), one entry per output."""
        key = (tuple(tuple(s) for s in shapes), tuple(dtypes))
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        inputs = [torch.empty(s, dtype=d, device="meta") for s, d in zip(shapes, dtypes)]
        try:
            result = self.fn(*inputs)
        except Exception as exc:  # torch explains why (shape mismatch, unsupported dtype, ...)
            described = ", ".join(f"{_describe(s)} {ms_name(d)}" for s, d in zip(shapes, dtypes))
            raise InferenceError(f"{self.name}: cannot run on inputs ({described}): {exc}") from None
        outputs = list(result) if isinstance(result, (tuple, list)) else [result]
        value = ([tuple(o.shape) for o in outputs], [o.dtype for o in outputs])
        if len(self._cache) < 4096:
            self._cache[key] = value
        return value


def _describe(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"

