"""Ascend C kernels (kernels/ascendc), run here on the CPU emulation of the Ascend C API, from both frameworks.

    aot_ops.ascendc.add_custom(block_dim=8)        MindSpore operators (operators.py) of the bundled kernels,
    aot_ops.ascendc.leaky_relu_custom(...)         declared in bundled.py as a user declares theirs: the kernel
    aot_ops.ascendc.softmax_custom(...)            where its tiling holds, ATen otherwise, gradients from ATen
    import aot_ops.ascendc.torch_ops               torch.ops.ascendc.* through torch.library (torch_ops.py)
    aot_ops.ascendc.runtime                        which path ran, the emulator's core order and UB size
                                                   (runtime.py; needs neither MindSpore nor torch.library)
    python -m aot_ops.ascendc.npu                  the real-NPU build with CANN (npu.py; refused without CANN), of
                                                   the bundled kernels or (--project) of a loaded library
    aot_ops.ascendc.load(name, sources, kernels)   your own kernels from one declaration (library.py): MindSpore
    aot_ops.ascendc.Kernel, require, CannotTile    operators, torch.library operators, the NPU project; tilings
                                                   in Python, compiled to C++ (tiling.py)

The submodules load on first use, so reading path counts does not import MindSpore.
"""
from __future__ import annotations

from .._core.lazy import lazy_names

_LAZY = {
    "add_custom": (".operators", "add_custom"),
    "leaky_relu_custom": (".operators", "leaky_relu_custom"),
    "softmax_custom": (".operators", "softmax_custom"),
    "operators": (".operators", None),
    "runtime": (".runtime", None),
    "torch_ops": (".torch_ops", None),
    "npu": (".npu", None),
    "load": ("._library", "load"),
    "Kernel": ("._declare", "Kernel"),
    "require": ("._tiling", "require"),
    "minimum": ("._tiling", "minimum"),
    "maximum": ("._tiling", "maximum"),
    "where": ("._tiling", "where"),
    "CannotTile": ("._tiling", "CannotTile"),
}

__all__ = sorted(_LAZY)
__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
