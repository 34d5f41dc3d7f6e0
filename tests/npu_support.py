"""torch-npu's headers and libraries for the tests that compile with NPU placement: fetched once into a download
cache outside the project's environment (nothing of it is installed; its Python part could not be imported here,
as it loads the CANN runtime)."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from aot_ops._build.lock import BuildLock

TORCH_NPU_VERSION = ".".join(torch.__version__.split("+")[0].split(".")[:2]) + ".0"  # torch-npu follows torch's minor
# releases: torch-npu 2.14.0 is built for torch 2.14.x (there is no torch-npu 2.14.1)
DOWNLOADS = Path(os.environ.get("AOT_OPS_TEST_DOWNLOADS", Path.home() / ".cache" / "aot_ops-test-downloads"))


def fetch_torch_npu() -> Path:
    """The unpacked torch_npu package folder (include/ and lib/ only); skips the test when the registry cannot be
    reached."""
    folder = DOWNLOADS / f"torch_npu-{TORCH_NPU_VERSION}"
    package = folder / "torch_npu"
    if (package / "lib" / "libtorch_npu.so").is_file():
        return package
    folder.mkdir(parents=True, exist_ok=True)
    with BuildLock(folder / ".lock", "the torch-npu download"):  # test workers of one run share the download
        if not (package / "lib" / "libtorch_npu.so").is_file():
            _download(folder)
    return package


def _download(folder: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                           "--no-deps", "--only-binary=:all:", "-d", str(folder), f"torch-npu=={TORCH_NPU_VERSION}"],
                          capture_output=True, text=True, timeout=900)
    wheels = sorted(folder.glob("torch_npu-*.whl"))
    if done.returncode != 0 or not wheels:
        pytest.skip(f"torch-npu {TORCH_NPU_VERSION} could not be downloaded: {done.stderr.strip()[-500:]}")
    with zipfile.ZipFile(wheels[-1]) as wheel:
        members = [m for m in wheel.namelist() if m.startswith(("torch_npu/include/", "torch_npu/lib/"))]
        members.sort(key=lambda m: m.endswith("/libtorch_npu.so"))  # last: its presence means all is there
        wheel.extractall(folder, members)
    wheels[-1].unlink()
