"""scaled_tanh: a kernel library shipped in a package of its own, built by aot_ops.extension at install time."""
from pathlib import Path

import aot_ops

LIBRARY = Path(__file__).with_name("libscaled_ops.so")


def scaled_tanh(scale: float = 1.0) -> aot_ops.AotOp:
    """y = scale * tanh(x) as a MindSpore operator (PyNative and GRAPH_MODE), with its gradient."""
    library = aot_ops.check_library(LIBRARY)  # built against the installed torch and MindSpore, or a clear error
    grad = aot_ops.OpDef(library, "ScaledTanhGrad", attrs={"scale": scale}).build()

    def bprop(x, out, dout):
        return (grad(dout, x),)

    return aot_ops.OpDef(library, "ScaledTanh", attrs={"scale": scale}, bprop=bprop).build()
