"""What each fuzz case should produce, computed with torch: the tensors a correct call returns, or an exception
when the call has no meaning (torch refuses it, an attribute has a wrong kind, the argument count is wrong).

The reference states the semantics independently of the code under test: a case whose call returns data must
return exactly this (same count, shapes, dtypes and values), whatever it declared to MindSpore.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .cases import ATEN, BAD_ATEN_NAMES
from ...errors import Error


class NoMeaning(Error):
    """The call is invalid: the only right outcome is an error."""


def _arity(inputs, n):
    if len(inputs) != n:
        raise NoMeaning(f"takes {n} tensors, got {len(inputs)}")


def _int(value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise NoMeaning(f"not an int: {value!r}")
    if not -2**63 <= value < 2**63:
        raise NoMeaning(f"beyond int64: {value!r}")
    return value


def _float(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NoMeaning(f"not a number: {value!r}")
    return float(value)


def _ints(value):
    """torch's `dim` argument as the ready operators take it: None, an int, or a sequence of ints."""
    if value is None:
        return ()
    if isinstance(value, int) and not isinstance(value, bool):
        return (_int(value),)
    if isinstance(value, (list, tuple)):
        return tuple(_int(v) for v in value)
    raise NoMeaning(f"not an int list: {value!r}")


def _reduce(fn, x, dims, keepdim):
    if not isinstance(keepdim, bool):
        raise NoMeaning("keepdim is not a bool")
    if not dims:
        return fn(x, dim=tuple(range(x.dim())), keepdim=keepdim) if x.dim() else fn(x)
    return fn(x, dim=dims, keepdim=keepdim)


def _promoting(fn, a, b):
    """The bundled binary kernels' documented dtype rule: torch.promote_types of both operands, whatever their
    ranks (MindSpore infers dtypes without shapes, so a 0-dim operand does not get torch's lower priority)."""
    dtype = torch.promote_types(a.dtype, b.dtype)
    return fn(a.to(dtype), b.to(dtype))


# -- the ready operators: aot_ops.<name>(**kwargs)(*inputs) ----------------------------------------------------
def ready(name: str, kwargs: dict, inputs: list[torch.Tensor]):
    k = kwargs
    if name in ("add", "mul"):
        _arity(inputs, 2)
        return (_promoting(getattr(torch, name), *inputs),)
    if name == "matmul":
        _arity(inputs, 2)
        return (torch.matmul(*inputs),)
    if name == "leaky_relu":
        _arity(inputs, 1)
        return (F.leaky_relu(inputs[0], _float(k.get("negative_slope", 0.01))),)
    if name in ("sum", "mean"):
        _arity(inputs, 1)
        return (_reduce(getattr(torch, name), inputs[0], _ints(k.get("dim")), k.get("keepdim", False)),)
    if name == "softmax":
        _arity(inputs, 1)
        return (torch.softmax(inputs[0], _int(k.get("dim", -1))),)
    if name == "max":
        _arity(inputs, 1)
        keepdim = k.get("keepdim", False)
        if not isinstance(keepdim, bool):
            raise NoMeaning("keepdim is not a bool")
        values, indices = torch.max(inputs[0], _int(k.get("dim", -1)), keepdim)
        return values, indices
    if name == "gelu":
        _arity(inputs, 1)
        approximate = k.get("approximate", "none")
        if not isinstance(approximate, str):
            raise NoMeaning("approximate is not a string")
        return (F.gelu(inputs[0], approximate=approximate),)
    if name == "permute":
        _arity(inputs, 1)
        return (inputs[0].permute(_ints(k.get("dims"))).contiguous(),)
    if name == "layer_norm":
        _arity(inputs, 3)
        x, w, b = inputs
        return (F.layer_norm(x, _ints(k.get("normalized_shape")), w, b, _float(k.get("eps", 1e-5))),)
    raise AssertionError(name)


# -- the ATen bridge: aten.op(name, **kwargs)(*inputs) ------------------------------------------------------------
def aten_overload(name: str):
    if name in BAD_ATEN_NAMES or name not in ATEN:
        raise NoMeaning(f"{name!r} is not an operator the bridge takes")
    packet, _, overload = name.removeprefix("aten::").partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def aten(name: str, kwargs: dict, inputs: list[torch.Tensor]):
    overload = aten_overload(name)
    if ATEN[name] == "list":
        if not inputs:
            raise NoMeaning("an empty tensor list")
        out = overload(list(inputs), **kwargs)
    else:
        _arity(inputs, ATEN[name])
        out = overload(*inputs, **kwargs)
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


# -- the bundled kernels through a hand-written ops.Custom ----------------------------------------------------
# The kernels behind these ready operators keep the operator's contract: attribute names, defaults and outputs.
_KERNEL_OF_READY = {"Add": "add", "Mul": "mul", "Matmul": "matmul", "LeakyRelu": "leaky_relu", "Softmax": "softmax",
                    "Gelu": "gelu", "MaxDim": "max"}


def kernel(symbol: str, attrs: dict, inputs: list[torch.Tensor]):
    """The kernel's contract, with the defaults it documents for attributes left out."""
    if symbol in _KERNEL_OF_READY:
        return ready(_KERNEL_OF_READY[symbol], attrs, inputs)
    if symbol == "Sum":
        _arity(inputs, 1)
        return (torch.sum(inputs[0]),)
    if symbol == "Permute":
        _arity(inputs, 1)
        if "dims" not in attrs:
            raise NoMeaning("dims is required")
        return (inputs[0].permute(_ints(attrs["dims"])).contiguous(),)
    if symbol == "LayerNorm":
        _arity(inputs, 3)
        if "normalized_shape" not in attrs:
            raise NoMeaning("normalized_shape is required")
        x, w, b = inputs
        return tuple(torch.native_layer_norm(x, _ints(attrs["normalized_shape"]), w, b,
                                             _float(attrs.get("eps", 1e-5))))
    if symbol == "AddGrad":
        _arity(inputs, 3)
        dout, a, b = inputs
        if dout.shape != torch.broadcast_shapes(a.shape, b.shape) or not (dout.dtype == a.dtype == b.dtype):
            raise NoMeaning("AddGrad takes the gradient of a + b")
        return dout.sum_to_size(a.shape).contiguous(), dout.sum_to_size(b.shape).contiguous()
    raise AssertionError(symbol)


# -- the generic ATen entry with hand-written attributes -----------------------------------------------------------
_RAW_ALLOWED = {"aten::neg": "aten::neg.out", "aten::abs": "aten::abs.out", "aten::exp": "aten::exp.out"}


def raw_aten(attrs: dict, inputs: list[torch.Tensor]):
    """Only the attributes aten.op itself would write describe a call; anything else must be refused."""
    name = attrs.get("aten_op")
    canonical = {"aten_op": name, "aten_num_inputs": len(inputs), "aten_num_outputs": 1, "aten_kinds": [0],
                 "aten_arg_0": 0}
    if name not in _RAW_ALLOWED or len(inputs) != 1:
        raise NoMeaning(f"{name!r} is outside the bridge, or the call has {len(inputs)} inputs")
    for key, value in canonical.items():
        if type(attrs.get(key)) is not type(value) or attrs.get(key) != value:
            raise NoMeaning(f"attribute {key} is {attrs.get(key)!r}")
    if attrs.get("aten_out_op", "") not in ("", _RAW_ALLOWED[name]):
        raise NoMeaning("aten_out_op is not the out= overload of aten_op")
    return (getattr(torch.ops.aten, name[len("aten::"):]).default(inputs[0]),)
