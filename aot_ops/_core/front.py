"""The PyNative fast front: eager calls of an AotOp without the Custom primitive's Python path.

In PyNative an `ops.Custom` call costs 30-100 µs before any work; a built-in operator costs about 15-20 µs. The
front (pynative_front.cpp, a CustomOpBuilder module built by setup.py) hands the call to MindSpore's PyBoost
pipeline as built-in operators do, and the launch calls the same ms_ext entry point with the same seven
arguments. AotOp.__call__ uses it when all of these hold:

- the call is eager and MindSpore is not recording gradients (`ms.grad`/`value_and_grad` record through the
  Custom primitive, whose bprop MindSpore knows: a PyBoost op of its own would get zero gradients silently);
- the operator is not a backward kernel called by a bprop (AotOp(eager_front=False)): inside MindSpore's bprop a
  call through the front took ~200 us more than through ops.Custom;
- the kernel comes from an ms_ext library with call extras (attributes travel in a packed table, c_api.h) and has
  at least one output; the device target is CPU;
- every argument is a Tensor or None, and the front is on: `AOT_OPS_FAST_FRONT=0` turns it off for the process.

Output dtypes (and, for operators inferred in Python, shapes) come from the operator's one OutputCache
(inference.py), where the front also keeps its launch plan per input signature; dtype errors are raised here, at
the call, with the Custom path's text. Shape and launch errors surface
as a RuntimeError naming the operator when the result is read, as with MindSpore's own operators.
`aot_ops doctor` reports whether the front is active.
"""
from __future__ import annotations

import os
from typing import Sequence

import mindspore as ms

from . import dtypes as _dtypes
from .inference import OutputCache
from .mindspore_private import wait_for_queued_work
from .packed_attrs import pack
from .._front import ENV_SWITCH, switched_off

_NO_OUTPUTS = object()  # a launch plan saying: leave this call to the Custom path

_module = None
_unavailable: str | None = None


def _load():
    """The compiled module, or None with the reason kept for `status`."""
    global _module, _unavailable
    if _module is None and _unavailable is None:
        try:
            from .._front import _pynative_front
        except ImportError as exc:
            _unavailable = f"not built or not loadable ({exc}); reinstall aot_ops"
        else:
            _module = _pynative_front
    return _module


def active() -> bool:
    """Whether eager calls use the front in this process (the switch, the module, the device target)."""
    return not switched_off() and _load() is not None and ms.get_context("device_target") == "CPU"


def status() -> str:
    """One line for `aot_ops doctor`."""
    if switched_off():
        return f"off ({ENV_SWITCH}={os.environ[ENV_SWITCH]})"
    if _load() is None:
        return f"unavailable: {_unavailable}"
    target = ms.get_context("device_target")
    if target != "CPU":
        return f"inactive: device target {target} (the front is built for CPU)"
    return f"active (eager calls outside gradient recording; {ENV_SWITCH}=0 turns it off)"


def launches() -> int:
    """Entry points launched through the front so far in this process, every call made before this one counted
    (the count waits for the work PyNative still has queued)."""
    module = _load()
    wait_for_queued_work()
    return 0 if module is None else module.launches()


class Front:
    """The front of one AotOp: its compiled kernel handles, and a launch plan per input signature kept beside the
    inferred outputs in the operator's OutputCache (whose inference raises the operator's errors)."""

    def __init__(self, library: str, symbol: str, name: str, attrs: dict, cpp_shapes: bool, outputs: OutputCache):
        self._library = library
        self._symbol = symbol
        self._name = name
        self._packed = pack(attrs).encode()
        self._cpp_shapes = cpp_shapes
        self._outputs = outputs
        self._kernels: dict[int, object] = {}  # per output count (known once the first call is inferred)

    def __call__(self, inputs: Sequence):
        # The key is MindSpore's own dtype objects (and shapes), read without converting anything: this runs on
        # every eager call.
        if self._cpp_shapes:
            key = tuple(None if t is None else t.dtype for t in inputs)
        else:
            key = tuple(None if t is None else (t.dtype, t.shape) for t in inputs)
        entry = self._outputs.find(key)
        plan = None if entry is None else entry.launch_plan
        if plan is None:
            plan = self._plan(key, inputs)
        if plan is _NO_OUTPUTS:
            return NotImplemented
        kernel, types, shapes = plan
        return kernel(list(inputs), types, shapes)

    def _plan(self, key, inputs):
        shapes = None if self._cpp_shapes else [None if t is None else tuple(t.shape) for t in inputs]
        dtypes = [None if t is None else _dtypes.to_torch(t.dtype) for t in inputs]
        entry = self._outputs.get(key, shapes, dtypes)
        if not entry.dtypes:
            plan = _NO_OUTPUTS  # an operator without outputs stays on the Custom path
        else:
            ids = _load().type_ids()
            types = [ids[_dtypes.checked_ms_name(d)] for d in entry.dtypes]
            plan = (self._kernel(len(types)), types,
                    None if entry.shapes is None else [list(s) for s in entry.shapes])
        entry.launch_plan = plan
        return plan

    def _kernel(self, num_outputs: int):
        kernel = self._kernels.get(num_outputs)
        if kernel is None:
            kernel = self._kernels[num_outputs] = _load().FrontKernel(
                self._library, self._symbol, self._name, self._packed, num_outputs, self._cpp_shapes)
        return kernel


def front_for(library: str, symbol: str, name: str, attrs: dict, num_outputs: int | None, cpp_shapes: bool,
              outputs: OutputCache):
    """A Front for this kernel, or None when the front cannot run it (then ops.Custom does)."""
    module = _load()
    if module is None or num_outputs == 0:
        return None
    from .._native.opener import open_library

    try:
        if not hasattr(open_library(library), "ms_ext_call_extra_new"):
            return None  # not built with ms_ext call extras: attributes cannot reach it outside MindSpore
        pack(attrs)
    except (OSError, TypeError, ValueError):
        return None  # a library that cannot be opened here, or attributes a packed table cannot carry
    return Front(library, symbol, name, attrs, cpp_shapes, outputs)
