"""AotOp: a MindSpore `ops.Custom(func_type="aot")` primitive with its output inferred from torch.

The one place where aot_ops meets MindSpore's Custom primitive. Every operator the package hands out (bundled
kernels, user libraries, ATen operators) is an AotOp.
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Callable, Mapping

from mindspore import ops
from mindspore.common import dtype as mstype

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


class AotOp(ops.Custom):
    """`ops.Custom(f"{library}:{symbol}", func_type="aot")` whose output shapes and dtypes come from `infer`.

    `infer` maps (input shapes, input torch dtypes) to (output shapes, output torch dtypes), usually a
    MetaInference over the torch function the kernel implements. MindSpore asks Custom for the shape and the
    dtype through separate callbacks, but torch needs both to run an operator (type promotion, dtype checks), so
    AotOp answers MindSpore's joint `__infer__` instead.
    """

    def __init__(self, library: str | Path, symbol: str, infer: MetaInference | Callable,
                 bprop: Callable | None = None, attrs: Mapping[str, object] | None = None,
                 identity: str | None = None):
        super().__init__(f"{library}:{symbol}", out_shape=_answered_by_infer, out_dtype=_answered_by_infer,
                         func_type="aot", bprop=bprop)
        self.library = str(library)
        self.symbol = symbol
        self.infer = infer
        self.signature = read_signature(self.library, symbol)
        for key, value in (attrs or {}).items():
            self.add_prim_attr(key, value)
        self.add_prim_attr(IDENTITY_ATTR, identity or fresh_identity(symbol))

    def __infer__(self, *args):
        shapes = [tuple(a["shape"]) for a in args]
        dtypes = [_dtypes.to_torch(a["dtype"]) for a in args]
        if self.signature is not None:
            self.signature.check(self.symbol, dtypes)
        out_shapes, out_dtypes = self.infer(shapes, dtypes)
        # Tensor types, not element types: given a bare element type, GRAPH_MODE treats a 0-dim output as a
        # Python scalar and the Cell returns a float instead of a Tensor.
        ms_dtypes = [mstype.TensorType(_dtypes.to_ms(d)) for d in out_dtypes]
        if len(out_shapes) == 1:
            return {"shape": list(out_shapes[0]), "dtype": ms_dtypes[0], "value": None}
        return {"shape": tuple(list(s) for s in out_shapes), "dtype": tuple(ms_dtypes), "value": None}


def _answered_by_infer(*_args):
    raise AssertionError("AotOp infers shape and dtype together in __infer__")
