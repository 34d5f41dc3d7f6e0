"""The definition of one operator: its forward kernel, its backward kernel and how MindSpore's bprop calls it.

In the spirit of torch.library's CustomOpDef: every operator aot_ops hands out (the ready operators, the Ascend C
operators, `aten.op`, `Library.op`, the CUDA operators, a ported network's programs) is an OpDef turned into
MindSpore primitives by `build()`, so the pairing of forward and backward primitives, their shared attributes,
their counts (an Arity, arity.py) and their identities is written once; nothing else constructs an AotOp
(tests/test_contracts.py checks it). Public as `aot_ops.OpDef` and `aot_ops.Backward`.

    OpDef(library, "LeakyRelu", {"negative_slope": 0.2},
          backward=Backward("LeakyReluGrad", bprops.cotangent_then_inputs, num_grad_inputs=1)).build()
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from .arity import Arity
from .identity import FRESH, STABLE, backward_identity, identity_of
from .inference import Inference
from .primitive import AotOp

__all__ = ["Backward", "OpDef", "FRESH", "STABLE"]


@dataclass(frozen=True)
class Backward:
    """The backward kernel of an operator.

    `make_bprop(backward_op, num_grad_inputs)` returns MindSpore's bprop(*inputs, out, dout) calling it (see
    bprops.py for the common shapes; GRAPH_MODE needs a bprop that names every parameter). The kernel gets the
    forward's attributes unless `attrs` is given, and lives in the forward's library unless `library` is given.
    """

    symbol: str
    make_bprop: Callable[[AotOp, int], Callable]
    num_grad_inputs: int = 1
    attrs: Mapping[str, Any] | None = None
    library: str | Path | None = None
    infer: Inference | Callable | None = None  # as AotOp's `infer`; None: the kernel's own C++ rules
    arity: Arity | None = None        # for a kernel without an exported signature


@dataclass(frozen=True)
class OpDef:
    """One operator. `backward` (a kernel) or `bprop` (a function needing no kernel of its own), or neither (no
    gradient: MindSpore says "bprop not defined" if one is asked for).

    `identity` is the key MindSpore caches an operator's inference under (identity.py): STABLE (the default,
    from library, symbol and attributes: equal definitions share MindSpore's cache), FRESH (no other operator's),
    or a string (the caller's own key). `arity` gives the counts of a kernel without an exported signature
    (arity.py). `infer` and `eager_front` are AotOp's."""

    library: str | Path
    symbol: str
    attrs: Mapping[str, Any] | None = None
    backward: Backward | None = None
    bprop: Callable | None = None
    infer: Inference | Callable | None = None
    identity: Any = STABLE
    arity: Arity | None = None
    eager_front: bool = True

    def __post_init__(self):
        if self.backward is not None and self.bprop is not None:
            raise TypeError(f"{self.symbol}: give a backward kernel or a bprop, not both")

    def build(self) -> AotOp:
        """The forward primitive, with the backward primitive inside its bprop."""
        identity = identity_of(self.identity, self.library, self.symbol, self.attrs)
        bprop = self.bprop
        if self.backward is not None:
            b = self.backward
            library = self.library if b.library is None else b.library
            attrs = self.attrs if b.attrs is None else b.attrs
            # The backward kernel keeps ops.Custom in PyNative too: MindSpore runs bprops on its bprop queue,
            # where a call through the front waited on the frontend queue (a ported transformer's PyNative
            # training step took 30 ms with its 45 backward calls on the front, 19 ms on ops.Custom).
            backward_op = AotOp(library, b.symbol, infer=b.infer, attrs=attrs, arity=b.arity, eager_front=False,
                                identity=backward_identity(self.identity, identity, library, b.symbol, attrs))
            bprop = b.make_bprop(backward_op, b.num_grad_inputs)
        return AotOp(self.library, self.symbol, infer=self.infer, attrs=self.attrs, bprop=bprop, identity=identity,
                     arity=self.arity, eager_front=self.eager_front)
