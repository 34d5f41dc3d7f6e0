"""AotOp: a MindSpore `ops.Custom(func_type="aot")` primitive for an ms_ext entry point.

The one place where aot_ops meets MindSpore's Custom primitive. Every operator the package hands out (bundled
kernels, user libraries, ATen operators) is an AotOp.
"""
from __future__ import annotations

import functools
import threading
from pathlib import Path
from typing import Callable, Mapping

from mindspore import Tensor, ops
from mindspore.ops import CustomRegOp, DataType

from . import dtypes as _dtypes
from . import front as _front
from .arity import Arity
from .identity import FRESH, identity_of
from .inference import CppInference, Inference, OutputCache, as_inference
from .mindspore_private import recording_gradients
from .signature import read_signature

# A Custom primitive with the same `func` and the same prim attributes as an earlier one reuses MindSpore's
# cached inference (its own out_shape is never called). Every AotOp therefore carries an identity attribute
# (identity.py).
IDENTITY_ATTR = "aot_ops_identity"
IO_ATTR = "ms_ext_io"
_NOT_MADE = object()

# MindSpore is not safe to enter from several Python threads at once: concurrent PyNative launches of one Custom
# primitive were measured to return another thread's values and, now and then, to abort the process; a GRAPH_MODE
# Cell called from threads crashed (with built-in operators too). Every PyNative call of an AotOp, and every call
# of a ported Cell in either mode, holds this lock, so calls from threads are serialised and each returns its own
# result. Reentrant: a ported Cell's operators take it again in the same thread.
CALL_LOCK = threading.RLock()


@functools.lru_cache(maxsize=None)
def _front_allowed() -> bool:
    """Whether eager calls may use the PyNative front: decided once per process (aot_ops/_front)."""
    return _front.active()


def attribute_value(value):
    """How a Python value travels as a primitive attribute. MindSpore keeps floats as float32 (eps=1e-5 would
    arrive as 9.99999974738e-06), so floats, and lists holding floats, travel as their exact Python text, which
    ms_ext reads back as doubles (ms_ext/c_api.h)."""
    if isinstance(value, float):
        return repr(value)
    if (isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float)) for v in value)
            and not any(isinstance(v, bool) for v in value) and any(isinstance(v, float) for v in value)):
        return ",".join(repr(float(v)) for v in value)
    return value


def set_attributes(prim: ops.Primitive, attrs: Mapping[str, object] | None) -> None:
    for key, value in (attrs or {}).items():
        prim.add_prim_attr(key, attribute_value(value))


def _device_target() -> str:
    """The backend the operator will run on (MindSpore's device target when the primitive is made): a CUDA kernel's
    reg_info must say GPU."""
    import mindspore as ms

    target = ms.get_context("device_target")
    return target if target in ("CPU", "GPU", "Ascend") else "CPU"


def _reg_info(symbol: str, arity: Arity):
    """The reg_info MindSpore requires before it calls C++ inference: inputs, outputs, any dtype, the current device
    target. Built anew for every primitive: Custom modifies the reg_info it is given (it prefixes the op name)."""
    reg = CustomRegOp(arity.registration_name(symbol))
    for i in range(arity.inputs):
        reg = reg.input(i, f"x{i}")
    for i in range(arity.outputs):
        reg = reg.output(i, f"y{i}")
    formats = [DataType.None_None] * (arity.inputs + arity.outputs)
    return reg.dtype_format(*formats).target(_device_target()).get_op_info()


class AotOp(ops.Custom):
    """`ops.Custom(f"{library}:{symbol}", func_type="aot")` with its outputs inferred for MindSpore.

    `infer`, an Inference (inference.py), chooses how:
    - MindSporeRules(out_shape, out_dtype): ops.Custom's own callables over MindSpore shapes and dtypes, for any
      entry point (dynamic shapes included: MindSpore calls them).
    - None: the kernel's own rules (MS_EXT_KERNEL with Signature::shapes/types): a CppInference with the kernel's
      dtype rule; MindSpore calls the C++ <symbol>InferShape, which also handles dynamic shapes in GRAPH_MODE.
    - a CppInference: the C++ <symbol>InferShape too, with dtypes given in Python (the generic ATen entry).
    - a MetaInference, or any `fn(input shapes, input torch dtypes) -> (output shapes, output torch dtypes)` (a
      PythonInference): in Python, answered through AotOp's `__infer__`. Static shapes only.
    Calls are checked in Python against the operator's Arity (arity.py: the kernel's exported signature when it
    has one, else `arity`) and the signature's dtypes. A PyNative call with fewer inputs than the Arity's passes
    None for the optional ones it leaves out. Output shapes and dtypes are inferred once per input signature and
    kept in one cache (`outputs`), which MindSpore's callbacks and the PyNative front both read.
    Made by OpDef.build() (opdef.py) inside aot_ops; `identity` (identity.py) defaults to a fresh one.
    """

    def __init__(self, library: str | Path, symbol: str, *,
                 infer: Inference | Callable | None = None, bprop: Callable | None = None,
                 attrs: Mapping[str, object] | None = None, identity: str | None = None, arity: Arity | None = None,
                 eager_front: bool = True):
        library = str(library)
        signature = read_signature(library, symbol)
        if signature is not None:
            signature.check_attrs(attrs)
            arity = Arity(signature.inputs, signature.outputs, arity.required if arity is not None else None)
        arity = arity or Arity()
        if infer is None:
            if signature is None or not signature.infer:
                raise ValueError(f"{symbol}: the kernel in {library} has no C++ shape/dtype rules; give out_shape "
                                 "and out_dtype (Library.op) or an inference")
            infer = CppInference(signature.output_dtypes)
        infer = as_inference(infer)
        if infer.shapes_in_cpp and (arity.inputs is None or arity.outputs is None):
            raise ValueError(f"{symbol}: an operator inferred in C++ needs both counts in its Arity, got {arity}")
        out_shape, out_dtype = infer.custom_callbacks(self._cpp_dtypes)
        super().__init__(
            f"{library}:{symbol}", out_shape=out_shape, out_dtype=out_dtype,
            func_type="aot", bprop=bprop,
            reg_info=_reg_info(symbol, arity) if infer.shapes_in_cpp else None)
        self.library = library
        self.symbol = symbol
        self.infer = infer
        self.signature = signature
        self.arity = arity
        self.outputs = OutputCache(self._infer_outputs)
        set_attributes(self, attrs)
        self.add_prim_attr(IDENTITY_ATTR, identity_of(FRESH if identity is None else identity, library, symbol, attrs))
        self._kernel_attrs = dict(attrs or {})  # the values the kernel reads, for the PyNative front
        self._eager_front = eager_front
        # The input/output split the kernel checks at launch. Every call of this primitive has exactly these
        # counts: __call__ and __infer__ check its arguments.
        io = arity.io_attribute()
        if io is not None:
            self.add_prim_attr(IO_ATTR, io)
            self._kernel_attrs[IO_ATTR] = io

    def __call__(self, *args):
        # PyNative: check the call before MindSpore selects a kernel (a wrong argument count otherwise surfaces as
        # "KernelObjectTypeNotSupported", or worse).
        if self.arity.inputs is not None:
            count = sum(len(a) if isinstance(a, (tuple, list)) else 1 for a in args)  # the kernel's view
            self.arity.check_call(self.name_for_errors(), count, may_omit_optional=True)
            args = args + (None,) * (self.arity.inputs - count)
        if self._eager_front and _front_allowed() and not recording_gradients():
            result = self._call_front(args)
            if result is not NotImplemented:
                return result
        with CALL_LOCK:
            return super().__call__(*args)

    def _call_front(self, args):
        """The call through the PyNative fast front (aot_ops/_front), or NotImplemented where it cannot run it."""
        front = self.__dict__.get("_front", _NOT_MADE)
        if front is _NOT_MADE:
            cpp = self.infer.shapes_in_cpp
            front = self._front = _front.front_for(self.library, self.symbol, self.name_for_errors(),
                                                   self._kernel_attrs, self.arity.outputs if cpp else None, cpp,
                                                   self.outputs)
        if front is None:
            return NotImplemented
        inputs = []
        for a in args:  # a tuple of tensors reaches the kernel expanded, as MindSpore passes it
            if isinstance(a, (tuple, list)):
                inputs.extend(a)
            else:
                inputs.append(a)
        if not all(t is None or isinstance(t, Tensor) for t in inputs):
            return NotImplemented  # the Custom path reports what it makes of other arguments
        with CALL_LOCK:
            return front(inputs)

    def add_prim_attr(self, name, value):
        # An attribute set after the operator was made (by hand) reaches the kernel on the PyNative front too: the
        # front's attribute table is made anew with it.
        kernel_attrs = self.__dict__.get("_kernel_attrs")
        if kernel_attrs is not None:
            kernel_attrs[name] = value
            self.__dict__.pop("_front", None)
        return super().add_prim_attr(name, value)

    def __getattr__(self, item):
        # An AotOp whose __init__ raised (a refused kernel or attribute) has no MindSpore state: MindSpore's own
        # lookup reads self.attrs, which recursed until the C stack overflowed when pytest printed the failure.
        if "attrs" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__} was not initialised: no attribute {item!r}")
        return super().__getattr__(item)

    def __repr__(self):
        if "attrs" not in self.__dict__:
            return f"<{type(self).__name__}, not initialised>"
        return super().__repr__()

    def name_for_errors(self) -> str:
        return self.infer.name or self.symbol

    def _cpp_dtypes(self, *ms_dtypes):
        """out_dtype for kernels inferred in C++ (MindSpore asks on every PyNative call): the dtype rule, as
        MindSpore tensor types."""
        flat = [None if d is None else _dtypes.element_type(d) for d in _flatten_dtypes(ms_dtypes)]
        # The key the PyNative front uses for the same inputs (front.py): one entry per signature for both paths.
        inferred = self.outputs.get(tuple(flat), None, [None if d is None else _dtypes.to_torch(d) for d in flat])
        out = inferred.tensor_types
        return out[0] if len(out) == 1 else tuple(out)

    def _infer_outputs(self, shapes, dtypes):
        """(output shapes, output torch dtypes, output MindSpore tensor types) for inputs of these shapes and torch
        dtypes; the shapes are None for a kernel whose C++ InferShape decides them. Raises the operator's errors, named. Called through the one
        cache (`self.outputs`) by MindSpore's inference callbacks and by the PyNative front alike."""
        try:
            # A C++-inferred kernel's dtype rule checks the dtypes itself (the signature's, or the caller's rule)
            if self.signature is not None and not self.infer.shapes_in_cpp:
                self.signature.check(dtypes)
            out_shapes, out_dtypes = self.infer.outputs(shapes, dtypes)
            tensor_types = _dtypes.tensor_types(out_dtypes)  # e.g. a complex32 result has no MindSpore dtype
        except TypeError as exc:
            name = self.name_for_errors()
            raise TypeError(str(exc) if str(exc).startswith(f"{name}:") else f"{name}: {exc}") from None
        return out_shapes, out_dtypes, tensor_types

    def __infer__(self, *args):
        # GRAPH_MODE reaches here without __call__: the same argument count check, before anything reads inputs.
        if self.arity.inputs is not None:
            count = len(_flatten_tuple_arguments(args)[0])  # a tuple of tensors reaches the kernel expanded
            self.arity.check_call(self.name_for_errors(), count, may_omit_optional=False)
        if self.infer.answered_by_custom:
            # CppInference: a shape placeholder (MindSpore runs the C++ InferShape) and _cpp_dtypes;
            # MindSporeRules: the user's out_shape/out_dtype, called by Custom itself.
            return super().__infer__(*args)
        shapes, ms_dtypes = _flatten_tuple_arguments(args)
        ms_dtypes = [None if d is None else _dtypes.element_type(d) for d in ms_dtypes]
        # The key the PyNative front uses for the same inputs (front.py): one entry per signature for both paths.
        key = tuple(None if d is None else (d, s) for s, d in zip(shapes, ms_dtypes))
        inferred = self.outputs.get(key, shapes, [None if d is None else _dtypes.to_torch(d) for d in ms_dtypes])
        out_shapes, ms_dtypes = inferred.shapes, inferred.tensor_types
        if len(out_shapes) == 1:
            return {"shape": list(out_shapes[0]), "dtype": ms_dtypes[0], "value": None}
        return {"shape": tuple(list(s) for s in out_shapes), "dtype": tuple(ms_dtypes), "value": None}


def _flatten_tuple_arguments(args):
    """Input shapes and dtypes, with a tuple-of-tensors argument (which MindSpore passes to the kernel as
    consecutive tensors) expanded in place; a None argument gives (None, None)."""
    shapes, dtypes = [], []
    for a in args:
        if isinstance(a["dtype"], (tuple, list)):
            shapes.extend(tuple(s) for s in a["shape"])
            dtypes.extend(a["dtype"])
        else:
            shapes.append(None if a["shape"] is None else tuple(a["shape"]))
            dtypes.append(a["dtype"])
    return shapes, dtypes


def _flatten_dtypes(ms_dtypes) -> list:
    out = []
    for d in ms_dtypes:
        out.extend(d if isinstance(d, (tuple, list)) else [d])
    return out

