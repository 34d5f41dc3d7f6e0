"""Where aot_ops' own files are: the folder of the libraries built at install time and the sources shipped with the
package. The bottom of the package: it imports nothing of aot_ops."""
from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # aot_ops/, above this _native/ folder
LIB_DIR = PACKAGE_DIR / "lib"
CPU_LIBRARY = "libaot_ops_cpu.so"
ASCENDC_LIBRARY = "libaot_ops_ascendc.so"
CUDA_LIBRARY = "libaot_ops_cuda.so"
NPU_LIBRARY = "libaot_ops_npu.so"
LIBRARIES = {"cpu": CPU_LIBRARY, "ascendc": ASCENDC_LIBRARY, "cuda": CUDA_LIBRARY, "npu": NPU_LIBRARY}


def source_dir(name: str) -> Path:
    """A source tree aot_ops needs at run time: "ms_ext" (headers and C runtime, compiled into every library) or
    "kernels" (the bundled kernel sources: CUDA add2, the Ascend C NPU project).

    A checkout or an editable install uses the top-level folder; a wheel carries a copy inside the package as
    `_<name>` (setup.py puts it there).
    """
    for candidate in (PACKAGE_DIR / f"_{name}", PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"aot_ops' {name} sources are not next to {PACKAGE_DIR}: the installation is incomplete "
                            "(reinstall aot_ops)")
