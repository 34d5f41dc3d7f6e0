"""aot_ops: PyTorch's ATen operators and your own kernels as MindSpore `ops.Custom(func_type="aot")` operators.

Public surface:
    aot_ops.leaky_relu(), add(), mul(), sum(), mean(), matmul(), softmax(), max(), gelu(), layer_norm(),
    permute()
        ready operators backed by the bundled CPU ATen kernels (see aot_ops.operators)
    aot_ops.library_path()
        where the bundled kernel library lives, for building ops.Custom by hand
    aot_ops.aten
        every ATen operator: aten.leaky_relu(x, 0.2), aten.add.Tensor(a, b, alpha=2), aten.op("aten::...", ...)
    aot_ops.AotOp
        the primitive behind every operator: ops.Custom for an ms_ext entry point
    aot_ops.last_error(library), aot_ops.live_kernel_states(library)
        a library's last error text (MindSpore drops it for GPU launches), its live per-kernel states
    aot_ops.harness
        call an entry point exactly as MindSpore does, without MindSpore

Names are loaded on first use, so `python -m aot_ops build` and setup.py do not import MindSpore.
"""
from __future__ import annotations

import importlib

_LAZY = {
    "library_path": ("._paths", "library_path"),
    "AotOp": ("._primitive", "AotOp"),
    "last_error": ("._runtime", "last_error"),
    "live_kernel_states": ("._runtime", "live_kernel_states"),
    "leaky_relu": (".operators", "leaky_relu"),
    "add": (".operators", "add"),
    "mul": (".operators", "mul"),
    "sum": (".operators", "sum"),
    "matmul": (".operators", "matmul"),
    "softmax": (".operators", "softmax"),
    "max": (".operators", "max"),
    "mean": (".operators", "mean"),
    "gelu": (".operators", "gelu"),
    "layer_norm": (".operators", "layer_norm"),
    "permute": (".operators", "permute"),
    "harness": (".harness", None),
    "aten": (".aten", None),
    "operators": (".operators", None),
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'aot_ops' has no attribute {name!r}") from None
    module = importlib.import_module(module_name, __name__)
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
