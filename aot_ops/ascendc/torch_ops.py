"""The bundled Ascend C kernels (kernels/ascendc) as PyTorch operators on CPU, through torch.library.

    import aot_ops.ascendc.torch_ops                 # registers torch.ops.ascendc.*
    z = torch.ops.ascendc.add_custom(x, y)           # eager
    f = torch.compile(lambda x, y: torch.ops.ascendc.add_custom(x, y) * 2)
    torch.library.opcheck(torch.ops.ascendc.add_custom.default, (x, y))

They are registered from the kernels' declarations (bundled.py) exactly as aot_ops.ascendc.load registers a user's
kernels (torch_library.py): the same library as the MindSpore operators, the kernel on the CPU emulator where its
dtypes and tiling allow it, the ATen fallback otherwise (aot_ops.ascendc.runtime.path_count tells which), a fake
implementation (the fallback on fake tensors) for torch.compile and the fallback's autograd.

    operator                                                          kernel path
    ascendc::add_custom(x, y, block_dim=8)                            float16, x and y of one shape, numel a
                                                                      multiple of 256 * block_dim
    ascendc::leaky_relu_custom(x, negative_slope=0.01, block_dim=8)   float16, numel a multiple of 16
    ascendc::softmax_custom(x, block_dim=8)                           float32, last dimension a multiple of 8
"""
from __future__ import annotations

from . import _bundled as bundled
from ._torch_library import register, run_into

NAMESPACE = bundled.NAME

register(bundled.library())


def run(kernel: str, inputs: list, out, *, block_dim: int = 8, **attrs) -> None:
    """Runs bundled `kernel` on contiguous CPU tensors, writing into the caller's `out` (tests fill it with NaN
    first, so an unwritten element shows)."""
    run_into(bundled.library(), kernel, list(inputs), [out], block_dim, attrs)
