"""Weights that are tensor subclasses (torchao's quantized tensors: Int8Tensor and its kin) ported as they are
stored. Such a weight is a wrapper around plain tensors (an int8 matrix and its scales), and its matrix product is
whatever the subclass's __torch_dispatch__ runs on them. torch.export keeps the wrapper as the graph's input and
run_decompositions takes it apart behind a parametrization (`q_proj.parametrizations.weight.original0`, ...) of its
own copy, which the module the port reads its structure and weights from does not have. So the port takes them
apart first, the same way, on a structural copy of the module: its state is then the inner tensors under those
keys (the cell's Parameters: the packed integers and their scales, never a dequantized copy), and the graph the
operators the subclass runs on them (aten::_int_mm, torchao's registered quantization operators, ...)."""
from __future__ import annotations

import contextlib
import re

import torch

from ..._core import torch_private
from ..errors import PortError
from .module_copy import structural_copy

_PLAIN = (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer)


def subclass_weights(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """(state key, tensor) of every parameter and buffer that is a tensor subclass."""
    found = []
    for path, module in model.named_modules(remove_duplicate=False):
        for name, tensor in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
            if type(tensor) not in _PLAIN:
                found.append((f"{path}.{name}" if path else name, tensor))
    return found


def structure(tensor: torch.Tensor) -> tuple | None:
    """What a graph over `tensor` depends on beyond its shape and dtype: for a tensor subclass its class, its
    attributes and its inner tensors' names, shapes and dtypes (in turn); None for a plain tensor."""
    if type(tensor) in _PLAIN or not torch_private.is_traceable_wrapper_subclass(tensor):
        return None
    names, attributes = tensor.__tensor_flatten__()
    inner = [(name, tuple(getattr(tensor, name).shape), str(getattr(tensor, name).dtype),
              structure(getattr(tensor, name))) for name in names]
    return f"{type(tensor).__module__}.{type(tensor).__qualname__}", repr(attributes), inner


def with_plain_weights(model: torch.nn.Module) -> torch.nn.Module:
    """`model` itself when its weights are plain tensors; else a structural copy whose tensor-subclass weights are
    parametrizations over their inner tensors. A subclass torch.export cannot take apart is refused by name."""
    found = subclass_weights(model)
    if not found:
        return model
    for key, tensor in found:
        if not torch_private.is_traceable_wrapper_subclass(tensor):
            kind = type(tensor)
            raise PortError(
                f"{type(model).__name__}: the weight '{key}' is a {kind.__module__}.{kind.__qualname__}, a tensor "
                "subclass without __tensor_flatten__/__tensor_unflatten__, which torch.export cannot take apart. "
                "Supported: traceable wrapper subclasses (torchao's quantized tensors: Int8WeightOnlyConfig, "
                "Int8DynamicActivationInt8WeightConfig; docs/porting.md#quantized-models-torchao); convert the "
                "weight to a plain tensor otherwise")
    copy = structural_copy(model)
    inner = _inner_tensors(found)
    torch_private.unwrap_tensor_subclass_parameters(copy)
    _link_inner(copy, inner)
    return copy


def _inner_tensors(found: list[tuple[str, torch.Tensor]]) -> dict[tuple, torch.Tensor]:
    """The subclass weights' inner tensors, by where their memory is."""
    inner = {}
    for _, tensor in found:
        for name in tensor.__tensor_flatten__()[0]:
            value = getattr(tensor, name)
            inner[(value.data_ptr(), value.dtype, tuple(value.shape))] = value
    return inner


def _link_inner(model: torch.nn.Module, inner: dict[tuple, torch.Tensor]) -> None:
    """Each parametrization's inner tensor (a new Parameter over the memory of the user's subclass's own inner
    tensor) linked to that tensor, for share_weights (cells/weights.py): the Parameter a checkpoint's weight was
    read into (load_pretrained's, marked by convert.owned_view) is taken as it is, and otherwise the user's inner
    tensor is made a view of the new Parameter too, so that the packed weights are held once."""
    for _, tensor in model.named_parameters(remove_duplicate=False):
        same = inner.get((tensor.data_ptr(), tensor.dtype, tuple(tensor.shape)))
        if same is not None:
            tensor._aot_ops_same_memory = same
            owner = getattr(same, "_aot_ops_owner", None)
            if owner is not None:
                tensor._aot_ops_owner = owner


@contextlib.contextmanager
def derivatives_explained(model: torch.nn.Module):
    """A PortError of tracing a backward through an operator without a derivative, raised in the block, says which
    quantized weights of `model` such an operator runs on (torchao's int4 CPU kernel has none: a LoRA on an int4
    base cannot train, in torch either)."""
    try:
        yield
    except PortError as exc:
        missing = re.search(r"derivative for (\S+) is not implemented", str(exc))
        found = subclass_weights(model) if missing else []
        if not found:
            raise
        key, tensor = found[0]
        raise PortError(
            f"{exc}\n{type(model).__name__} cannot train through its quantized weights ('{key}' of class "
            f"{type(tensor).__qualname__}, and {len(found) - 1} more): their kernel {missing.group(1)} has no "
            "derivative. Port it for evaluation (evaluation_only=True, from_torch_lm), or train adapters on a base "
            "whose kernels have one (torchao's int8 schemes: docs/porting.md#quantized-models-torchao)") from exc
