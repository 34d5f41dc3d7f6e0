"""aot_ops: PyTorch's ATen operators and your own kernels as MindSpore `ops.Custom(func_type="aot")` operators.

Public surface:
    aot_ops.leaky_relu(), add(), mul(), sum(), mean(), matmul(), softmax(), max(), gelu(), layer_norm(),
    permute()
        ready operators backed by the bundled CPU ATen kernels (see aot_ops.operators)
    aot_ops.from_torch(model, example_args, example_kwargs) -> mindspore.nn.Cell
        a whole torch.nn.Module as a MindSpore Cell (both modes, training, weights both ways; Hugging Face
        transformers models too); PortError names the torch node that cannot be ported
    aot_ops.train_step(loss_cell, optimizer)
        a training step (forward, backward, optimizer) as one compiled MindSpore graph, also in PyNative
    aot_ops.from_torch_split(model) -> aot_ops.SplitPort
        an evaluating network whose sizes depend on values (torchvision's detectors), ported graph by graph, torch
        running the data-dependent steps between the graphs
    aot_ops.from_torch_lm(model, batch_size=..., max_length=...) -> aot_ops.PortedLM
        a transformers causal LM ported with its key/value cache (a static cache held as Parameters)
    aot_ops.generate(lm, input_ids, max_new_tokens=..., do_sample=..., streamer=...)
        text generation with a ported causal language model, as transformers' generate (greedy or sampling)
    aot_ops.zoo
        Hugging Face transformers models ported and checked against torch (python -m aot_ops zoo)
    aot_ops.library_path(kind="cpu")
        where a bundled kernel library lives ("cpu", "ascendc", "cuda"), for building ops.Custom by hand
    aot_ops.extension.AotExtension / BuildAotExtension, aot_ops.include_paths(), aot_ops.check_library(path)
        build an ms_ext kernel library in your own package's setup.py; check a shipped one against the installed
        torch and MindSpore (StaleLibraryError)
    aot_ops.aten
        every ATen operator: aten.leaky_relu(x, 0.2), aten.add.Tensor(a, b, alpha=2), aten.op("aten::...", ...)
    aot_ops.OpDef(library, symbol, attrs, backward=aot_ops.Backward(...) or bprop=...).build()
        define an operator: the one way every operator above is made (forward and backward primitives paired)
    aot_ops.AotOp
        the primitive behind every operator: ops.Custom for an ms_ext entry point
    aot_ops.last_error(library), aot_ops.live_kernel_states(library), aot_ops.aten_launches(),
    aot_ops.program_launches(), aot_ops.program_seconds()
        a library's last error text (MindSpore drops it for GPU launches), its live per-kernel states, the launches
        of the generic ATen entry points and of the program entry so far (bridged calls per step), and the time
        spent inside program launches
    aot_ops.harness
        call an entry point exactly as MindSpore does, without MindSpore
    aot_ops.load(name, sources), aot_ops.load_inline(name, cpp_source) -> aot_ops.Library
        compile your own kernels (cached; rebuilt only when something they depend on changes); `lib.op(symbol)`
        makes a MindSpore operator. aot_ops.BuildError carries compiler errors with file and line.
    aot_ops.cache_dir(), cache_entries(), clean_cache()
        the build cache ($AOT_OPS_CACHE or ~/.cache/aot_ops)
    aot_ops.ascendc (.operators, .torch_ops, .runtime, .npu)
        Ascend C kernels run on the CPU emulation: MindSpore operators, torch.library operators, path counters and
        emulator settings, the real-NPU build
    aot_ops.cuda
        the GPU side: CUDA builds of the kernels, add2 (JIT, setuptools, CMake) for MindSpore and PyTorch
    aot_ops.conformance
        PyTorch's OpInfo samples through the ATen bridge (python -m aot_ops conformance)

Names are loaded on first use, so `python -m aot_ops build|cache|doctor`, `aot_ops.load` and setup.py do not
import MindSpore.
"""
from __future__ import annotations

from ._core.lazy import lazy_names
from .errors import Error  # noqa: F401 - the base of every aot_ops exception class

__version__ = "0.1.0"

_LAZY = {
    "include_paths": ("._build.bundled", "include_paths"),
    "check_library": ("._build.build_info", "check_library"),
    "StaleLibraryError": ("._build.build_info", "StaleLibraryError"),
    "library_path": ("._build.bundled", "library_path"),
    "AotOp": ("._core.primitive", "AotOp"),
    "OpDef": ("._core.opdef", "OpDef"),
    "Backward": ("._core.opdef", "Backward"),
    "last_error": ("._core.native_state", "last_error"),
    "live_kernel_states": ("._core.native_state", "live_kernel_states"),
    "aten_launches": ("._core.native_state", "aten_launches"),
    "program_launches": ("._core.native_state", "program_launches"),
    "program_seconds": ("._core.native_state", "program_seconds"),
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
    "load": ("._core.library", "load"),
    "load_inline": ("._core.library", "load_inline"),
    "Library": ("._core.library", "Library"),
    "BuildError": ("._build.builder", "BuildError"),
    "NpuSetupError": ("._build.npu", "NpuSetupError"),
    "cache_dir": ("._core.library", "cache_dir"),
    "cache_entries": ("._core.library", "cache_entries"),
    "clean_cache": ("._core.library", "clean_cache"),
    "harness": (".harness", None),
    "extension": (".extension", None),
    "ascendc": (".ascendc", None),
    "cuda": (".cuda", None),
    "conformance": (".tools.conformance", None),
    "aten": (".aten", None),
    "operators": (".operators", None),
    "from_torch": ("._port", "from_torch"),
    "PortError": ("._port", "PortError"),
    "NoKernelError": (".errors", "NoKernelError"),
    "CompileFallbackWarning": ("._port.programs.compiled", "CompileFallbackWarning"),
    "generate": ("._port.lm.decoding", "generate"),
    "from_torch_lm": ("._port.lm.kv_cache", "from_torch_lm"),
    "from_pretrained": ("._port.lm.pretrained", "from_pretrained"),
    "load_pretrained": ("._port.lm.pretrained", "load_pretrained"),
    "from_torch_split": ("._port.split", "from_torch_split"),
    "SplitPort": ("._port.split", "SplitPort"),
    "PortedLM": ("._port.lm.kv_cache", "PortedLM"),
    "train_step": ("._core.train_step", "train_step"),
    "torch_process_group": ("._port.distributed", "torch_process_group"),
    "tensor_parallel": ("._port.tensor_parallel", "tensor_parallel"),
    "shard": ("._port.sharded", "shard"),
    "zoo": (".tools.zoo", None),
}

__all__ = sorted([*_LAZY, "Error"])
__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals())
