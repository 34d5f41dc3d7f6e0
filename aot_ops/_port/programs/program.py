"""A graph of ATen calls as the attributes of ONE aot call of the program entry (kernels/aten/generic/program.cpp).

Each node is encoded exactly as `aten.op` encodes one call for the generic AtenOp entry (schema binding, then
_aten.encode), under the prefix n<k>_, plus the slots its tensor inputs come from. The nodes' attributes travel
packed in one string attribute (_core/packed_attrs.py: MindSpore converts each attribute on every PyNative call). The
program is parsed once by the kernel, and executed there through the c10 dispatcher with no Python.

Each Program object holds its key in the bundled library (program.cpp, ProgramRegistry): the kernel's parse (and
a compiled program's loaded package) stays while the object lives, however often MindSpore creates and destroys
the kernels calling it, and is freed once the last Program object of that key is collected (and no kernel uses it
any more). A ported cell keeps its Program objects, so a dropped cell takes its programs with it.
"""
from __future__ import annotations

import copy
import hashlib
import weakref
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import torch

from ..._aten import schema as _schema
from ..._aten.encode import encode
from ..._aten.sizes import encode_shapes
from ..._core.arity import Arity
from ..._core.packed_attrs import pack
from ..._core.torch_private import schema_of
from ..errors import PortError
from ..read.graph import Graph, Item, Operator


@dataclass
class Program:
    """The attributes of one program call, and what the caller needs to know about its outputs."""

    attrs: dict[str, Any]
    num_inputs: int
    out_dtypes: list[torch.dtype]
    _hold: KeyHold | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        key = self.attrs.get("program_key")
        if key is not None:
            self._hold = KeyHold(key)

    @property
    def num_outputs(self) -> int:
        return len(self.out_dtypes)

    @property
    def arity(self) -> Arity:
        return Arity(self.num_inputs, self.num_outputs)

    @property
    def symbol(self) -> str:
        return "AtenProgram" if self.num_outputs == 1 else "AtenProgramMulti"


class KeyHold:
    """Holds one program key in the bundled library while alive (the kernel keeps that program parsed); released
    when collected. A copy (copy, deepcopy, pickle) holds the key again."""

    __slots__ = ("key", "__weakref__")

    def __init__(self, key: str):
        from ..._build.bundled import library_path
        from ..._native.opener import open_library

        self.key = key
        lib = open_library(library_path())  # the copy MindSpore loads (dlopen of one path gives one copy)
        encoded = key.encode()
        lib.aot_ops_program_hold(encoded)
        # Not at exit: the library outlives the interpreter's shutdown, and nothing needs freeing then.
        weakref.finalize(self, lib.aot_ops_program_release, encoded).atexit = False

    def __reduce__(self):
        return KeyHold, (self.key,)


# A view's stride check follows the strides each kernel gives its results, and torch's tracing (fake tensors, whose
# meta kernels made these graphs) and the CPU kernels a program runs do not always agree: T5's and Swin's
# `transpose(...).contiguous().view(...)` lost its copy where the traced matmul already had the transposed layout,
# and the real kernel's result then cannot be viewed. In a functional graph reshape computes the same values: a
# view where the strides allow one, a copy where they do not.
AS_RESHAPE = {"aten::view.default": "size", "aten::_unsafe_view.default": "size"}
_FX_VIEWS = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default)  # the same two, as graph targets


def views_as_reshapes(module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`module` with its views made reshapes, for the tracers that follow strides where the programs do not (a copy,
    where it has any): AOTAutograd tracing an exported graph, and torch.export before AOTInductor compiles a
    program. A saved tensor reaches the backward program contiguous (MindSpore's buffer), not with the strides the
    forward gave it, so a view the partition made again from it (a permute, then a view of the permuted tensor:
    tests/test_compiled.py's transformer classifier) can only be traced as a reshape."""
    if not any(node.target in _FX_VIEWS for node in module.graph.nodes):
        return module
    module = copy.deepcopy(module)
    for node in module.graph.nodes:
        if node.target in _FX_VIEWS:
            node.target = torch.ops.aten.reshape.default
    module.recompile()
    return module


def node_attributes(op: Operator) -> dict[str, Any]:
    """What aten.op(op.target, **op.fixed) sends the generic entry: the tensor arguments left open, in order."""
    if op.target in AS_RESHAPE:
        size = AS_RESHAPE[op.target]
        op = replace(op, target="aten::reshape.default",
                     fixed={("shape" if k == size else k): v for k, v in op.fixed.items()})
    overload = _schema.overload_for(op.target)
    if overload is None:
        raise PortError(f"{op.name}: {op.target} is not an operator overload")
    call = _schema.bind(overload, (), _schema.with_open_tensors(overload, op.fixed))
    attrs, inputs, _key = encode(call)
    if len(inputs) != len(op.inputs) or attrs["aten_num_inputs"] != len(op.inputs):
        raise PortError(f"{op.name} ({op.target}) takes {len(op.inputs)} tensors, its encoding {len(inputs)}")
    attrs["aten_op"] = call.qualified_name
    if schema_of(overload).is_mutable:  # a node buffer_writes.py made in place: it writes its first argument
        attrs["writes_input"] = True
    return attrs


def build(name: str, graph: Graph, inputs: Sequence[str], outputs: Sequence[str], out_shapes: list,
          out_dtypes: list[torch.dtype], writes: Sequence[tuple[str, str]] = ()) -> Program:
    """The program computing `outputs` (value names) of `graph` from `inputs` (value names, MindSpore's inputs in
    order). `out_shapes`: each output's shape as ints and size expressions over the inputs. `writes`: (input,
    value) pairs: the program writes the value into that input's memory (buffer_writes.py), instead of returning it."""
    slot: dict[str, int] = {value: k for k, value in enumerate(inputs)}
    first_result: dict[str, int] = {}
    nodes: dict[str, Any] = {}
    next_slot, count = len(inputs), 0
    for step in graph.steps:
        if isinstance(step, Item):
            slot[step.name] = first_result[step.of] + step.index
            continue
        missing = [v for v in step.inputs if v not in slot]
        if missing:
            raise PortError(f"{step.name} ({step.target}) reads {missing}, which the program does not compute")
        prefix = f"n{count}_"
        for key, value in node_attributes(step).items():
            nodes[prefix + key] = value
        results = 1 if step.num_outputs is None else step.num_outputs
        nodes[prefix + "slots"] = [slot[v] for v in step.inputs]
        nodes[prefix + "results"] = results
        nodes[prefix + "source"] = step.source
        if step.reads_graph_inputs:
            nodes[prefix + "graph_shapes"] = True
        first_result[step.name] = next_slot
        slot[step.name] = next_slot
        next_slot += results
        count += 1
    for value in [*outputs, *(v for _, v in writes)]:
        if value not in slot:
            raise PortError(f"the output {value} is not computed by the program")
    attrs: dict[str, Any] = dict(program_name=name, program_num_inputs=len(inputs), program_num_nodes=count,
                                 program_outputs=[slot[v] for v in outputs],
                                 program_out_shapes=encode_shapes(out_shapes), program_nodes=pack(nodes))
    if writes:
        attrs["program_writes"] = [n for target, value in writes for n in (inputs.index(target), slot[value])]
    return Program(with_key(attrs), len(inputs), list(out_dtypes))


def with_key(attrs: dict[str, Any]) -> dict[str, Any]:
    """`attrs` with program_key set: equal programs share one parse (or one loaded package) in the kernel
    (program.cpp), so the key covers every other attribute."""
    attrs = {k: v for k, v in attrs.items() if k != "program_key"}
    attrs["program_key"] = hashlib.sha256(repr(sorted(attrs.items())).encode()).hexdigest()
    return attrs
