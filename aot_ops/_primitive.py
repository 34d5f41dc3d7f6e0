"""AotOp: a MindSpore `ops.Custom(func_type="aot")` primitive for an ms_ext entry point.

The one place where aot_ops meets MindSpore's Custom primitive. Every operator the package hands out (bundled
kernels, user libraries, ATen operators) is an AotOp.
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Callable, Mapping

from mindspore import ops
from mindspore.common import dtype as mstype
from mindspore.ops import CustomRegOp, DataType

from . import _dtypes
from ._meta import MetaInference
from ._signature import read_signature

# A Custom primitive with the same `func` and the same prim attributes as an earlier one reuses MindSpore's
# cached inference (its own out_shape is never called). Every AotOp therefore carries an identity attribute:
# a stable one when its behaviour is fully described by (library, symbol, attributes), a fresh one otherwise.
IDENTITY_ATTR = "aot_ops_identity"
_fresh_ids = itertools.count()


def fresh_identity(prefix: str) -> str:
    return f"{prefix}#{next(_fresh_ids)}"


def stable_identity(library: str | Path, symbol: str, attrs: Mapping[str, object] | None) -> str:
    """Identity of an operator whose behaviour (shapes, dtypes, values) is fully given by its kernel and its
    attributes: two such operators may share MindSpore's cached inference."""
    described = ",".join(f"{k}={attrs[k]!r}" for k in sorted(attrs or {}))
    return f"{Path(library).name}:{symbol}({described})"


def _reg_info(symbol: str, n_in: int, n_out: int):
    """The reg_info MindSpore requires before it calls C++ inference: inputs, outputs, any dtype. Built anew for
    every primitive: Custom modifies the reg_info it is given (it prefixes the op name)."""
    reg = CustomRegOp(symbol)
    for i in range(n_in):
        reg = reg.input(i, f"x{i}")
    for i in range(n_out):
        reg = reg.output(i, f"y{i}")
    return reg.dtype_format(*([DataType.None_None] * (n_in + n_out))).target("CPU").get_op_info()


class AotOp(ops.Custom):
    """`ops.Custom(f"{library}:{symbol}", func_type="aot")` with its outputs inferred for MindSpore.

    Two ways to infer the outputs:
    - `infer=None`: the kernel's own rules (MS_EXT_KERNEL with Signature::shapes/types). MindSpore calls the
      C++ <symbol>InferShape, which also handles dynamic shapes in GRAPH_MODE; the dtype comes from the kernel's
      dtype rule, called here (a dtype inferred in C++ would make GRAPH_MODE return 0-dim outputs as Python
      scalars).
    - `infer=fn`: `fn(input shapes, input torch dtypes) -> (output shapes, output torch dtypes)` in Python,
      usually a MetaInference over the torch function the kernel implements. MindSpore asks Custom for the shape
      and the dtype through separate callbacks, but torch needs both to run an operator, so AotOp answers
      MindSpore's joint `__infer__` instead. Static shapes only.
    Either way, calls are checked in Python against the kernel's exported signature (argument count, dtypes).
    """

    def __init__(self, library: str | Path, symbol: str, *, infer: MetaInference | Callable | None = None,
                 bprop: Callable | None = None, attrs: Mapping[str, object] | None = None,
                 identity: str | None = None):
        library = str(library)
        signature = read_signature(library, symbol)
        self_infers = infer is None
        if self_infers and (signature is None or not signature.infer):
            raise ValueError(f"{symbol}: the kernel in {library} has no C++ shape/dtype rules; pass `infer`")
        super().__init__(
            f"{library}:{symbol}",
            out_shape=None if self_infers else _answered_by_infer,  # None: MindSpore calls <symbol>InferShape
            out_dtype=self._rule_dtypes if self_infers else _answered_by_infer,
            func_type="aot", bprop=bprop,
            reg_info=_reg_info(symbol, signature.inputs, signature.outputs) if self_infers else None)
        self.library = library
        self._dtype_answers: dict = {}  # MindSpore asks on every PyNative call
        self.symbol = symbol
        self.infer = infer
        self.signature = signature
        for key, value in (attrs or {}).items():
            self.add_prim_attr(key, value)
        self.add_prim_attr(IDENTITY_ATTR, identity or fresh_identity(symbol))

    def __call__(self, *args):
        # PyNative: check the call against the kernel's signature before MindSpore selects a kernel (a wrong
        # argument count otherwise surfaces as "KernelObjectTypeNotSupported").
        if self.signature is not None and len(args) != self.signature.inputs:
            raise TypeError(f"{self.symbol}: expected {self.signature.inputs} input(s), got {len(args)}")
        return super().__call__(*args)

    def _rule_dtypes(self, *ms_dtypes):
        """out_dtype for kernels with rules: the kernel's dtype rule, as MindSpore tensor types."""
        key = tuple(str(d) for d in ms_dtypes)
        answer = self._dtype_answers.get(key)
        if answer is None:
            out = _tensor_types(self.signature.output_dtypes([_dtypes.to_torch(d) for d in ms_dtypes]))
            answer = self._dtype_answers[key] = out[0] if len(out) == 1 else tuple(out)
        return answer

    def __infer__(self, *args):
        if self.infer is None:
            return super().__infer__(*args)  # shape placeholder (MindSpore runs the C++ InferShape), _rule_dtypes
        shapes, ms_dtypes = _flatten_tuple_arguments(args)
        dtypes = [_dtypes.to_torch(d) for d in ms_dtypes]
        if self.signature is not None:
            self.signature.check(dtypes)
        out_shapes, out_dtypes = self.infer(shapes, dtypes)
        ms_dtypes = _tensor_types(out_dtypes)
        if len(out_shapes) == 1:
            return {"shape": list(out_shapes[0]), "dtype": ms_dtypes[0], "value": None}
        return {"shape": tuple(list(s) for s in out_shapes), "dtype": tuple(ms_dtypes), "value": None}


def _flatten_tuple_arguments(args):
    """Input shapes and dtypes, with a tuple-of-tensors argument (which MindSpore passes to the kernel as
    consecutive tensors) expanded in place."""
    shapes, dtypes = [], []
    for a in args:
        if isinstance(a["dtype"], (tuple, list)):
            shapes.extend(tuple(s) for s in a["shape"])
            dtypes.extend(a["dtype"])
        else:
            shapes.append(tuple(a["shape"]))
            dtypes.append(a["dtype"])
    return shapes, dtypes


def _tensor_types(torch_dtypes) -> list:
    # Tensor types, not element types: given a bare element type, GRAPH_MODE treats a 0-dim output as a Python
    # scalar and the Cell returns a float instead of a Tensor.
    return [mstype.TensorType(_dtypes.to_ms(d)) for d in torch_dtypes]


def _answered_by_infer(*_args):
    raise AssertionError("AotOp infers shape and dtype together in __infer__")
