"""A ported cell's call arguments: keyword arguments placed by the torch module's names, then the inputs' shapes and
dtypes checked against those the module was ported for (with the same words as the generated construct's checks,
codegen.py, which GRAPH_MODE runs for calls from other graphs)."""
from __future__ import annotations

from typing import Sequence

from ..._core import dtypes as _dtypes
from .codegen import expected_dtype, expected_shape

_MISSING = object()


def bind_inputs(module_name: str, specs: Sequence, args: tuple, kwargs: dict) -> tuple:
    """The inputs in the order construct takes them (`specs`: graph.UserInput), keyword arguments placed by name."""
    if not kwargs:
        return args
    names = [spec.name for spec in specs]
    values = list(args) + [_MISSING] * (len(names) - len(args))
    for key, value in kwargs.items():
        if key not in names:
            raise TypeError(f"{module_name} got an unexpected keyword argument '{key}' (its inputs: "
                            f"{', '.join(names)})")
        k = names.index(key)
        if k < len(args):
            raise TypeError(f"{module_name} got multiple values for argument '{key}'")
        values[k] = value
    missing = [n for n, v in zip(names, values) if v is _MISSING]
    if missing:
        raise TypeError(f"{module_name} is missing input(s): {', '.join(missing)}")
    return tuple(values)


def check_inputs(module_name: str, specs: Sequence, args: tuple) -> None:
    """The inputs' count, shapes and dtypes against `specs` (a batch dimension of None takes any size). Checked in
    Python before MindSpore's own checks of dynamic inputs, which would say less."""
    if len(args) != len(specs):
        raise TypeError(f"{module_name} takes {len(specs)} input(s) ({', '.join(s.name for s in specs)}), "
                        f"got {len(args)}")
    for spec, arg in zip(specs, args):
        shape = tuple(getattr(arg, "shape", ()))
        dtype = getattr(arg, "dtype", None)
        if len(shape) != len(spec.shape) or any(n is not None and n != d for n, d in zip(spec.shape, shape)):
            raise ValueError(expected_shape(module_name, spec) + str(shape))
        if dtype != _dtypes.to_ms(spec.dtype):
            raise TypeError(expected_dtype(module_name, spec) + str(dtype))
