"""The libraries bundled with aot_ops, checked against the installed torch and MindSpore, and the include folders
a kernel of one's own is built against (aot_ops.library_path, aot_ops.include_paths)."""
from __future__ import annotations

from pathlib import Path

from . import build_info, cuda, npu, toolchain
from .._native.opener import preload_torch_libraries
from .._native.paths import LIB_DIR, LIBRARIES


def library_path(kind: str = "cpu") -> Path:
    """Absolute path of a library bundled with aot_ops: "cpu" (the ATen kernels, the default), "ascendc" (the
    Ascend C kernels on the CPU emulator), "cuda" (the CUDA kernels, where setup.py could build them) or "npu" (the
    same ATen kernels with NPU placement through torch_npu, where torch_npu and CANN were found at install time).

    Use it to build `ops.Custom(f"{aot_ops.library_path()}:LeakyRelu", ..., func_type="aot")` by hand; torch's
    libraries it needs are loaded first, so MindSpore can load it wherever torch is installed. Raises
    FileNotFoundError when it was not built (with the reason) and StaleLibraryError when it was built against
    other torch or MindSpore versions than the installed ones.
    """
    if kind not in LIBRARIES:
        raise ValueError(f"aot_ops.library_path: unknown library {kind!r} (one of {', '.join(LIBRARIES)})")
    path = LIB_DIR / LIBRARIES[kind]
    if not path.is_file():
        if kind == "cuda":
            why = cuda.why_not_linkable(use_torch=True) or "TORCH_CUDA_ARCH_LIST was not set at install time"
            raise FileNotFoundError(f"{path} was not built: {why}")
        if kind == "npu":
            why = npu.why_not_buildable() or "torch_npu and CANN were installed after aot_ops (reinstall aot_ops)"
            raise FileNotFoundError(f"{path} was not built: {why}")
        raise FileNotFoundError(
            f"{path} is missing: the kernels are built at install time (`pip install --no-build-isolation -e .`, "
            "or run ./run.sh test which does it)")
    build_info.check(path)
    preload_torch_libraries()
    return path


def include_paths(use_torch: bool = True) -> list[str]:
    """The include folders of an ms_ext kernel: ms_ext's headers, and torch's with `use_torch` (for a build system
    other than aot_ops' own: CMake, a Makefile, torch.utils.cpp_extension)."""
    paths = [str(toolchain.ms_ext_include_dir())]
    if use_torch:
        paths += list(toolchain.torch_info().include_dirs)
    return paths


def aten_kernel_units(kernels_dir: Path, generated_dir: Path) -> list[Path]:
    """The translation unit of the bundled ATen kernels (`kernels_dir` is the project's kernels/ folder): the
    operators of kernels/aten/cpu and the generic entries of kernels/aten/generic compiled as ONE unit, written to
    `generated_dir` (a unity build). Torch's headers cost most of each file's compile (10 of aten_op.cpp's 15 s
    with g++ 12 -O2), so parsing them once is what counts: the three units this was (the operators, aten_op.cpp,
    program.cpp) took 46 s of CPU and 27 s on two cores, the one unit takes 22 s; the library is compiled by the
    set-up, by the wheel's build and for the CUDA and NPU placements. Each file keeps its names in an anonymous
    namespace: two files defining the same name there fail this build, loudly."""
    sources = [*sorted((kernels_dir / "aten" / "cpu").glob("*.cpp")),
               *sorted((kernels_dir / "aten" / "generic").glob("*.cpp"))]
    text = ("// The bundled ATen kernels as one translation unit (aot_ops/_build/bundled.py).\n"
            + "".join(f'#include "{source.resolve()}"\n' for source in sources))
    return [write_generated_source(generated_dir / "aten_kernels.cpp", text)]


def write_generated_source(path: Path, text: str) -> Path:
    """`path` holding `text`, written only where it differs: an unchanged file leaves ninja nothing to recompile."""
    if not path.is_file() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return path
