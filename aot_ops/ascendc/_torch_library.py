"""The torch side of `ascendc.load`: each declared kernel as a torch.library operator torch.ops.<library>.<kernel>,
with a fake implementation (the fallback on fake tensors, for torch.compile) and autograd (the fallback's
vector-Jacobian product). The CPU implementation calls the library's generated C entry point, which runs the
kernel on the emulator or the fallback, exactly as the MindSpore operator does."""
from __future__ import annotations

import ctypes

import torch

from .._native.opener import last_error, open_library
from .._core.dtypes import checked_ms_name
from .._core.torch_private import destroy_library
from . import _codegen as codegen
from ._declare import attr_kind, fallback_argument_names, fallback_overload

# One torch.library fragment per namespace: loading a library again in the same process (its sources changed)
# replaces the previous definitions.
_FRAGMENTS: dict[str, torch.library.Library] = {}


def register(lib) -> None:
    previous = _FRAGMENTS.pop(lib.name, None)
    if previous is not None:
        destroy_library(previous)
    fragment = torch.library.Library(lib.name, "FRAGMENT")
    _FRAGMENTS[lib.name] = fragment
    for kernel_name, kernel in lib.kernels.items():
        _register_kernel(fragment, lib, kernel_name, kernel)


def _register_kernel(fragment, lib, kernel_name: str, kernel) -> None:
    qualified = f"{lib.name}::{kernel_name}"
    n_in, n_out = len(kernel.inputs), len(kernel.outputs)
    returns = "Tensor" if n_out == 1 else "(" + ", ".join(["Tensor"] * n_out) + ")"
    attr_params = "".join(f", {attr_kind(d)[1]} {a}={d!r}" for a, d in kernel.attrs.items())
    fragment.define(f"{kernel_name}({', '.join(f'Tensor {i}' for i in kernel.inputs)}{attr_params}, int block_dim=8) "
                    f"-> {returns}")
    attr_names = list(kernel.attrs)

    def split(args, kwargs):
        """(tensors, attribute values by name, block_dim) of a call: torch passes the non-tensor arguments the
        caller gave positionally and leaves out those that took their default."""
        rest = list(args[n_in:])
        values = {}
        for name in attr_names:
            values[name] = rest.pop(0) if rest else kwargs.get(name, kernel.attrs[name])
        block_dim = rest.pop(0) if rest else kwargs.get("block_dim", 8)
        return list(args[:n_in]), values, block_dim

    def cpu(*args, **kwargs):
        tensors, values, block_dim = split(args, kwargs)
        for t in tensors:
            if t.device.type != "cpu":
                raise ValueError(f"{qualified}: the Ascend C emulator runs on CPU tensors, got one on {t.device}")
        meta = fallback_outputs(kernel, [t.to("meta") for t in tensors], values)
        outputs = [torch.empty(m.shape, dtype=m.dtype) for m in meta]
        _launch(lib, kernel_name, [t.contiguous() for t in tensors] + outputs, block_dim, values)
        return outputs[0] if n_out == 1 else tuple(outputs)

    def fake(*args, **kwargs):
        tensors, values, _ = split(args, kwargs)
        out = [torch.empty_like(t, memory_format=torch.contiguous_format)
               for t in fallback_outputs(kernel, tensors, values)]
        return out[0] if n_out == 1 else tuple(out)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:n_in])
        ctx.values = split(inputs, {})[1]

    def backward(ctx, *grads):
        saved = ctx.saved_tensors
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(t.is_floating_point() or t.is_complex()) for t in saved]
            outs = fallback_outputs(kernel, leaves, ctx.values)
            wrt = [t for t in leaves if t.requires_grad]
            pairs = [(o, g) for o, g in zip(outs, grads) if o.requires_grad and g is not None]
            found = iter(torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True)
                         if pairs and wrt else [])
        result = [next(found, None) if t.requires_grad else None for t in leaves]
        return (*result, *([None] * (len(attr_names) + 1)))

    torch.library.impl(qualified, "cpu", lib=fragment)(cpu)
    torch.library.register_fake(qualified, lib=fragment)(fake)
    torch.library.register_autograd(qualified, backward, setup_context=setup_context, lib=fragment)


def fallback_outputs(kernel, tensors: list[torch.Tensor], values: dict) -> list[torch.Tensor]:
    """The fallback's results on `tensors` (fake or meta ones give the operator's output shapes and dtypes)."""
    schema_args = fallback_argument_names(kernel.fallback)
    out = fallback_overload(kernel.fallback)(*tensors, **{k: v for k, v in values.items() if k in schema_args},
                                             **kernel.fallback_args)
    return list(out) if isinstance(out, (tuple, list)) else [out]


def run_into(lib, kernel_name: str, inputs: list[torch.Tensor], outputs: list[torch.Tensor], block_dim: int = 8,
             attrs: dict | None = None) -> None:
    """Runs a kernel of `lib` (the kernel on the emulator, or its fallback) on contiguous CPU `inputs`, writing into
    the caller's contiguous CPU `outputs` (whose shapes and dtypes must be the operator's); `attrs` by name, the
    declared defaults for those left out."""
    kernel = lib.kernels[kernel_name]
    values = {name: (attrs or {}).get(name, default) for name, default in kernel.attrs.items()}
    if len(inputs) != len(kernel.inputs) or len(outputs) != len(kernel.outputs):
        raise ValueError(f"{lib.name}::{kernel_name} takes {len(kernel.inputs)} inputs and {len(kernel.outputs)} "
                         f"outputs, got {len(inputs)} and {len(outputs)}")
    everything = [*inputs, *outputs]
    for t in everything:
        if t.device.type != "cpu" or not t.is_contiguous():
            raise ValueError(f"{lib.name}::{kernel_name}: inputs and outputs must be contiguous CPU tensors")
    expected = fallback_outputs(kernel, [t.to("meta") for t in inputs], values)
    for i, (e, o) in enumerate(zip(expected, outputs)):
        if e.shape != o.shape or e.dtype != o.dtype:  # the kernel writes what the inputs' shapes say
            raise ValueError(f"{lib.name}::{kernel_name}: output {i} is {o.dtype} {tuple(o.shape)}, the operator "
                             f"gives {e.dtype} {tuple(e.shape)}")
    _launch(lib, kernel_name, everything, block_dim, values)


def _launch(lib, kernel_name: str, everything: list[torch.Tensor], block_dim: int, values: dict) -> None:
    """The generated C entry point on inputs then outputs, contiguous CPU tensors of the operator's shapes."""
    buffers = (ctypes.c_void_p * len(everything))(*[t.data_ptr() for t in everything])
    shape_arrays = [(ctypes.c_int64 * max(t.dim(), 1))(*t.shape) for t in everything]
    shapes = (ctypes.POINTER(ctypes.c_int64) * len(everything))(
        *[ctypes.cast(a, ctypes.POINTER(ctypes.c_int64)) for a in shape_arrays])
    ndims = (ctypes.c_int * len(everything))(*[t.dim() for t in everything])
    dtypes = (ctypes.c_char_p * len(everything))(*[checked_ms_name(t.dtype).encode() for t in everything])
    attr_values = (ctypes.c_double * max(len(values), 1))(*[float(v) for v in values.values()])
    library = open_library(lib.path)
    if getattr(library, codegen.torch_symbol(kernel_name))(buffers, shapes, ndims, dtypes, ctypes.c_int64(block_dim),
                                                           attr_values) != 0:
        raise RuntimeError(last_error(library))
