"""Where the libraries built by setup.py live."""
from __future__ import annotations

from pathlib import Path

LIB_DIR = Path(__file__).resolve().parent / "lib"
CPU_LIBRARY = "libaot_ops_cpu.so"


def library_path(name: str = CPU_LIBRARY) -> Path:
    """Absolute path of a library bundled with aot_ops (the CPU ATen kernels by default).

    Use it to build `ops.Custom(f"{aot_ops.library_path()}:LeakyRelu", ..., func_type="aot")` by hand.
    """
    path = LIB_DIR / name
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the kernels are built at install time (`pip install --no-build-isolation -e .`, "
            "or run ./run.sh test which does it)")
    return path
