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


@pytest.mark.parametrize("acl", ["stand-in", pytest.param("torch_npu", marks=pytest.mark.slow)])
def test_the_bundled_npu_project_is_generated_from_the_declarations(tmp_path, acl):
    # No CANN here: the bundled kernels' host launches are compiled and run with a launch macro that prints the
    # arguments (the aclrtlaunch_<kernel>.h headers CANN's ascendc_library generates from each kernel at build time:
    # no package ships them), against ACL's real headers as torch-npu's wheel ships them, or a stand-in: the
    # compiled tiling gives what the Python one gives, float slope included.
    from aot_ops.ascendc import _bundled as bundled
    from aot_ops.ascendc.runtime import UB_910B
    from aot_ops.ascendc._tiling import evaluate

    project = ascendc_npu.npu_project()
    cmake = (project / "CMakeLists.txt").read_text()
    for name in bundled.KERNELS:
        assert f"kernels/{name}.cpp" in cmake
    stubs = tmp_path / "stubs"
    (stubs / "acl").mkdir(parents=True)
    if acl == "torch_npu":
        from npu_support import fetch_torch_npu

        acl_include = [f"-I{fetch_torch_npu() / 'include' / 'third_party' / 'acl' / 'inc'}"]
    else:
        (stubs / "acl" / "acl.h").write_text("#pragma once\n")
        acl_include = []
    (stubs / "print_launch.h").write_text(
        "#pragma once\n#include <cstdint>\n#include <cstdio>\n#define ACLRT_LAUNCH_KERNEL(k) launch_##k\n"
        "inline void print(void *p) { std::printf(\" %s\", p ? \"address\" : \"null\"); }\n"
        "template <typename T> void print(T v) { std::printf(\" %g\", static_cast<double>(v)); }\n"
        "template <typename... A> void print_launch(uint32_t bd, A... a) {\n"
        "  std::printf(\"%u\", bd); (print(a), ...); std::printf(\"\\n\");\n}\n")
    for name in bundled.KERNELS:
        (stubs / f"aclrtlaunch_{name}.h").write_text(
            "#pragma once\n#include \"print_launch.h\"\n"
            f"template <typename... A> void launch_{name}(uint32_t bd, void *, A... a) {{ print_launch(bd, a...); }}\n")
    (tmp_path / "main.cpp").write_text(
        '#include <cstdint>\nextern "C" int leaky_relu_custom_launch(void *, void **, const int64_t *const *, '
        "const int *, int64_t, int64_t, const double *);\n"
        "int main() {\n  void *buffers[2] = {};\n  int64_t a[1] = {70000}, b[1] = {40};\n"
        "  const int64_t *shapes[1] = {a}, *odd[1] = {b};\n  int ndims[1] = {1};\n  double slope[1] = {0.25};\n"
        f"  return leaky_relu_custom_launch(nullptr, buffers, shapes, ndims, 3, {UB_910B}, slope) * 10 +\n"
        f"         leaky_relu_custom_launch(nullptr, buffers, odd, ndims, 3, {UB_910B}, slope);\n}}\n")
    binary = tmp_path / "host_launch"
    subprocess.run(["g++", "-std=c++17", *acl_include, f"-I{stubs}", str(project / "host_launch.cpp"),
                    str(tmp_path / "main.cpp"), "-o", str(binary)], check=True, capture_output=True, timeout=300)
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    # block_dim, the two (null) buffers, then totalLength, tileLength, negativeSlope.
    expected = evaluate(bundled.KERNELS["leaky_relu_custom"].tiling, [(70000,)], 3, UB_910B, negative_slope=0.25)
    assert run.stdout.split() == ["3", "null", "null", str(expected["totalLength"]), str(expected["tileLength"]),
                                  "0.25"]
    assert run.returncode == 1  # the first launch ran (0), the second was refused (40 elements is no multiple of 16)
