"""The MindSpore operators for ATen calls: one cached AotOp per (overload, non-tensor arguments).

Forward: the generic AtenOp kernel, outputs inferred by running the overload on fake CPU tensors (or, for
operators given output shapes as size expressions, by the kernel's C++ shape inference, which GRAPH_MODE needs
for dynamic shapes). Backward: the generic AtenOpBackward kernel (torch autograd's vector-Jacobian product),
registered as the bprop.
"""
from __future__ import annotations

import collections
import threading
from typing import Any, Sequence

import torch

from .._core.bprops import inputs_then_cotangent, inputs_then_cotangents
from .._core.arity import Arity
from .._core.cells import OptionalInputs
from .._core.opdef import Backward, OpDef
from .._build.bundled import library_path
from .._core.inference import CppInference, MetaInference
from .._core.primitive import AotOp
from .argtypes import CALL_TIME_LIST, arg_type
from .encode import encode
from .schema import BoundCall, check_in_scope, out_variant
from .sizes import Size, encode_shapes

# One operator per (overload, non-tensor arguments), most recently used last. Bounded: a loop over distinct float
# arguments (a learning-rate schedule written as aten.mul(x, lr)) would otherwise keep every primitive alive.
# An evicted operator keeps working where it is referenced; a new one for the same key gets the same identity.
MAX_CACHED_OPERATORS = 4096
_operators: collections.OrderedDict[tuple, AotOp] = collections.OrderedDict()
_operators_lock = threading.Lock()


def _substitute(call: BoundCall, tensors: Sequence) -> tuple[list[Any], dict[str, Any]]:
    """The call's arguments with its tensors replaced, in input order, by `tensors` (as positional + keyword), and
    sizes computed from input shapes (aten.size) evaluated for them."""
    shapes = [None if t is None else tuple(t.shape) for t in tensors]
    list_length = len(tensors) - len(input_flags(call))
    it = iter(tensors)
    args, kwargs = [], {}
    for arg, value in zip(call.schema.arguments, call.values):
        if value is CALL_TIME_LIST:
            value = [next(it) for _ in range(list_length)]
        elif value is not None:
            value = arg_type(arg)[0].to_torch(value, lambda: next(it), shapes)
        if arg.kwarg_only:
            kwargs[arg.name] = value
        else:
            args.append(value)
    return args, kwargs


def input_flags(call: BoundCall) -> list[bool]:
    """For each tensor input fixed in number (not a tensor list left for call time), in order, whether the schema
    accepts None for it."""
    flags: list[bool] = []
    for arg, value in zip(call.schema.arguments, call.values):
        if value is None or value is CALL_TIME_LIST:
            continue
        kind, optional = arg_type(arg)
        flags.extend(kind.input_flags(value, optional))
    return flags


def operator_for(call: BoundCall, out_shapes: Sequence[Sequence[Size]] | None = None,
                 out_dtypes: Sequence[torch.dtype] | None = None,
                 shape_inputs: int = 0, recompute: bool = False) -> tuple[AotOp | OptionalInputs, list[Any]]:
    """(the operator, its tensor inputs in order) for a bound call; the operator is created once per distinct
    overload and non-tensor arguments.

    `out_shapes`/`out_dtypes`: the outputs, when known beforehand (sizes may be expressions of input shapes):
    MindSpore then infers shapes with the kernel's C++ shape inference, as GRAPH_MODE needs for dynamic shapes.
    `shape_inputs`: that many more tensors follow the call's own at call time, only to lend their shapes to size
    expressions (aten.size(i, d) numbers them after the call's tensors); they need `out_shapes`.
    `recompute`: an operator of its own, marked for MindSpore's autodiff to compute again in the backward instead
    of keeping its result (Primitive.recompute; applied in GRAPH_MODE).
    """
    try:
        attrs, inputs, key = encode(call)
    except TypeError as exc:
        raise TypeError(f"{call.qualified_name}: {exc}") from None
    if (out_shapes is None) != (out_dtypes is None):
        raise TypeError(f"{call.qualified_name}: give both out_shapes and out_dtypes, or neither")
    if out_shapes is not None:
        out_shapes = [list(s) for s in out_shapes]
        out_dtypes = list(out_dtypes)
        if len(out_shapes) != len(out_dtypes):
            raise TypeError(f"{call.qualified_name}: {len(out_shapes)} output shapes but {len(out_dtypes)} dtypes")
        key = key + (("out", repr(out_shapes), tuple(out_dtypes)),)
    if shape_inputs:
        if out_shapes is None or attrs["aten_num_inputs"] < 0:
            raise TypeError(f"{call.qualified_name}: shape_inputs needs out_shapes, and no tensor list left for call "
                            "time")
        attrs = dict(attrs, aten_shape_inputs=int(shape_inputs), aten_num_inputs=len(inputs) + int(shape_inputs))
        key = key + (("shape_inputs", int(shape_inputs)),)
    if recompute:
        key = key + (("recompute", True),)
    cache_key = (call.qualified_name, key)
    with _operators_lock:  # ported cells and ports in other threads use the same cache
        op = _operators.get(cache_key)
        if op is not None:
            _operators.move_to_end(cache_key)
    if op is None:
        # Asked once per operator made (the functional form calls this every time); the inputs' dtypes, where they
        # can refuse the call (a boolean index), are judged again by the output inference, per dtypes.
        checks_dtypes = check_in_scope(call, attrs)
        op = _make_operator(call, attrs, len(inputs) + shape_inputs, key, out_shapes, out_dtypes, checks_dtypes)
        if recompute:
            op.recompute()
        if op.arity.has_optional_inputs:
            op = OptionalInputs(op)
        with _operators_lock:  # two threads may make the same operator: either serves
            _operators[cache_key] = op
            while len(_operators) > MAX_CACHED_OPERATORS:
                _operators.popitem(last=False)
    return op, inputs


def _make_operator(call: BoundCall, attrs: dict, n: int, key: tuple, out_shapes, out_dtypes,
                   checks_dtypes: bool = False) -> AotOp:
    name = call.qualified_name
    attrs = dict(attrs, aten_op=name, aten_out_op=out_variant(call.overload))
    identity = f"{name}{key!r}"
    call_time_list = attrs["aten_num_inputs"] < 0
    n_outputs = attrs.get("aten_num_outputs")
    # The call-time arguments as MindSpore (and so the bprop) sees them: tensors, a tensor list as one tuple.
    bprop_arguments = 1 if call_time_list else n
    if call_time_list and input_flags(call):
        raise TypeError(f"{name}: with a tensor list left for call time, give every other tensor argument when "
                        "making the operator")
    optional = input_flags(call) + [False] * attrs.get("aten_shape_inputs", 0)
    required = len(optional) - list(reversed(optional)).index(False) if False in optional else 0

    if out_shapes is not None:
        if call_time_list:
            raise TypeError(f"{name}: output shapes cannot be given for a tensor list left for call time")
        attrs["aten_out_shapes"] = encode_shapes(out_shapes)
        attrs["aten_num_outputs"] = n_outputs = len(out_shapes)
        forward_infer = CppInference(lambda _dtypes: out_dtypes)
        backward_infer = CppInference(lambda dtypes: [d or torch.float32 for d in dtypes[:n]])
        forward_outputs, backward_outputs = n_outputs, n
        forward_symbol = "AtenOp" if len(out_shapes) == 1 else "AtenOpMulti"
        backward_symbol = "AtenOpBackward" if n == 1 else "AtenOpBackwardMulti"
        make_bprop = inputs_then_cotangent if len(out_shapes) == 1 else inputs_then_cotangents
    else:
        def forward_meta(*tensors):
            if checks_dtypes:
                check_in_scope(call, attrs, tensors)
            args, kwargs = _substitute(call, tensors)
            return call.overload(*args, **kwargs)

        def backward_meta(*tensors):
            inputs = tensors[:len(tensors) - n_outputs] if call_time_list else tensors[:n]
            # A None input (an optional tensor left out) gets a 0-dim zero as its gradient.
            return tuple(torch.zeros(()) if t is None else torch.empty_like(t) for t in inputs)

        forward_infer = MetaInference(name, forward_meta)
        backward_infer = MetaInference(f"{name} (backward)", backward_meta)
        forward_outputs = backward_outputs = None  # decided per call by the inference
        forward_symbol, backward_symbol = "AtenOp", "AtenOpBackward"
        make_bprop = inputs_then_cotangent
    # The backward takes the inputs, then the cotangents.
    backward_arity = Arity() if call_time_list or n_outputs is None else Arity(n + n_outputs, backward_outputs)
    forward_arity = Arity() if call_time_list else Arity(n, forward_outputs, required)
    backward = Backward(backward_symbol, make_bprop, bprop_arguments, infer=backward_infer, arity=backward_arity)
    return OpDef(library_path(), forward_symbol, attrs, backward=backward, infer=forward_infer, identity=identity,
                 arity=forward_arity).build()


