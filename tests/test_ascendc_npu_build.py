"""The real-NPU build is off without CANN, and says so clearly instead of building half of it."""
import os
import shutil
import subprocess
import sys

import pytest

from aot_ops.ascendc import npu as ascendc_npu
from support import REPO


def env_without_cann(**extra):
    env = {k: v for k, v in os.environ.items() if k != "ASCEND_HOME_PATH"}
    env.update(extra)
    return env


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cmake_configure_without_cann_fails_with_a_clear_message(tmp_path):
    proc = subprocess.run(["cmake", "-S", str(ascendc_npu.npu_project()), "-B", str(tmp_path / "b")],
                          capture_output=True, text=True, env=env_without_cann())
    assert proc.returncode != 0
    assert "CANN not found: ASCEND_HOME_PATH is not set" in proc.stderr
    assert not list((tmp_path / "b").glob("**/*.so"))


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_cmake_configure_with_a_wrong_cann_path_names_it(tmp_path):
    proc = subprocess.run(["cmake", "-S", str(ascendc_npu.npu_project()), "-B", str(tmp_path / "b"),
                           f"-DASCEND_HOME_PATH={tmp_path}/no-cann"], capture_output=True, text=True,
                          env=env_without_cann())
    assert proc.returncode != 0
    assert f"no ascendc.cmake under ASCEND_HOME_PATH={tmp_path}/no-cann" in " ".join(proc.stderr.split())


def test_python_entry_refuses_without_cann(monkeypatch, tmp_path):
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    with pytest.raises(ascendc_npu.CannNotFoundError, match="CANN not found: ASCEND_HOME_PATH is not set"):
        ascendc_npu.build(tmp_path)
    assert not any(tmp_path.iterdir())


def test_command_line_exits_with_the_message():
    proc = subprocess.run([sys.executable, "-m", "aot_ops.ascendc.npu", "--build-dir", "unused"], cwd=REPO,
                          capture_output=True, text=True, env=env_without_cann())
    assert proc.returncode == 2
    assert "error: CANN not found" in proc.stderr
