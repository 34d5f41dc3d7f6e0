"""`python -m aot_ops doctor`: explains the environment and fails only on what blocks using aot_ops."""
from __future__ import annotations

import subprocess
import sys

import pytest

from aot_ops.tools import doctor
from loader_support import REPO, env_with

pytestmark = pytest.mark.slow  # the doctor in a fresh process, then in this one with compilers and caches taken away


# The doctor's command line in a fresh process, then whether it imported MindSpore (it reads versions from package
# metadata, so that it can explain an environment whose MindSpore does not import).
DOCTOR_THEN_MODULES = ("import sys; from aot_ops.__main__ import main; status = main(['doctor']); "
                       "print('mindspore imported:', 'mindspore' in sys.modules); sys.exit(status)")


def test_doctor_passes_here_prints_a_table_and_does_not_import_mindspore(tmp_path):
    proc = subprocess.run([sys.executable, "-c", DOCTOR_THEN_MODULES], cwd=REPO, capture_output=True, text=True,
                          env=env_with(AOT_OPS_CACHE=tmp_path / "cache"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for row in ("Python", "MindSpore", "numpy", "torch", "C++ ABI", "C++ compiler", "ninja", "nvcc",
                "CANN (Ascend)", "torch_npu", "build cache", "PyNative front"):
        assert any(line.startswith(row) for line in proc.stdout.splitlines()), row
    assert "MindSpore 0: handled" in proc.stdout
    assert not (tmp_path / "cache").exists()  # looking does not create the cache
    assert proc.stdout.splitlines()[-1] == "mindspore imported: False"


def doctor_in_this_process(monkeypatch, capsys, **env) -> tuple[int, str]:
    """`aot_ops doctor` as the command line runs it, in the test's process (the fresh-process run is the test
    above): (exit status, what it printed). The front's probe, a fresh process importing MindSpore, is switched
    off: the checks under test read only the environment."""
    from aot_ops.__main__ import main
    from aot_ops._front import ENV_SWITCH

    for name, value in {ENV_SWITCH: "0", **env}.items():
        monkeypatch.setenv(name, str(value))
    status = main(["doctor"])
    return status, capsys.readouterr().out


def test_unwritable_cache_blocks_use(tmp_path, monkeypatch, capsys):
    (tmp_path / "a_file").write_text("")
    status, out = doctor_in_this_process(monkeypatch, capsys, AOT_OPS_CACHE=tmp_path / "a_file" / "cache")
    assert status == 1
    assert "build cache" in out and "not writable" in out
    assert "block using aot_ops: build cache" in out


def test_missing_compiler_blocks_use(tmp_path, monkeypatch, capsys):
    status, out = doctor_in_this_process(monkeypatch, capsys, CXX=tmp_path / "no-such-c++",
                                         AOT_OPS_CACHE=tmp_path / "cache")
    assert status == 1
    assert "block using aot_ops: C++ compiler" in out


def test_numpy_2_with_mindspore_2_10_is_explained(monkeypatch):
    versions = {"numpy": "2.1.0", "mindspore": "2.10.0"}
    monkeypatch.setattr(doctor, "_version", versions.get)
    finding = doctor.check_numpy()
    assert finding.status == doctor.FAIL and "numpy<2" in finding.detail
    versions["numpy"] = "1.26.4"
    assert doctor.check_numpy().status == doctor.OK


def test_cuda_architecture_list_is_checked(monkeypatch):
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    rows = {f.check: f for f in doctor.check_cuda()}
    if "TORCH_CUDA_ARCH_LIST" not in rows:  # no nvcc: nothing to say about architectures
        assert rows["nvcc"].status == doctor.INFO
        return
    assert rows["TORCH_CUDA_ARCH_LIST"].status == doctor.WARN
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    rows = {f.check: f for f in doctor.check_cuda()}
    assert rows["TORCH_CUDA_ARCH_LIST"].status == doctor.OK
    assert "compute_90,code=sm_90" in rows["TORCH_CUDA_ARCH_LIST"].detail


def test_cann_is_found_through_its_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(tmp_path))
    finding = doctor.check_cann()  # a folder without the runtime an NPU library links
    assert finding.status == doctor.WARN and "has no lib64/libascendcl.so" in finding.detail
    (tmp_path / "lib64").mkdir()
    (tmp_path / "lib64" / "libascendcl.so").write_bytes(b"")
    finding = doctor.check_cann()
    assert finding.status == doctor.OK and str(tmp_path) in finding.detail


def test_torch_npu_is_found_without_importing_it(monkeypatch, tmp_path):
    monkeypatch.setenv("AOT_OPS_TORCH_NPU", str(tmp_path))
    finding = doctor.check_torch_npu()
    assert finding.status == doctor.INFO and finding.detail.startswith("not installed")
    (tmp_path / "include" / "torch_npu").mkdir(parents=True)
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libtorch_npu.so").write_bytes(b"")
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    monkeypatch.delenv("ASCEND_TOOLKIT_HOME", raising=False)
    finding = doctor.check_torch_npu()
    assert str(tmp_path) in finding.detail
    if doctor.npu.find_cann() is None:  # the usual machine: headers found, nothing to link the runtime against
        assert finding.status == doctor.INFO and "NPU libraries cannot link: the CANN toolkit is not found" in \
            finding.detail


def test_cache_another_user_controls_blocks_use(tmp_path, monkeypatch):
    import os

    import pytest

    if os.geteuid() != 0:
        pytest.skip("making a folder owned by another user needs root")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 4242, 4242)
    monkeypatch.setenv("AOT_OPS_CACHE", str(theirs))
    finding = doctor.check_cache()
    assert (finding.status, finding.detail) == (doctor.FAIL, f"{theirs} belongs to another user (uid 4242)")


def test_white_list_that_leaves_out_the_cache_is_reported(tmp_path, monkeypatch):
    allowed = tmp_path / "allowed"
    monkeypatch.setenv("MS_CUSTOM_AOT_WHITE_LIST", str(allowed))
    monkeypatch.setenv("AOT_OPS_CACHE", str(tmp_path / "cache"))
    finding = doctor.check_white_list()
    assert finding.status == doctor.WARN
    assert f"the build cache ({tmp_path / 'cache'})" in finding.detail and "outside it" in finding.detail
    monkeypatch.setenv("MS_CUSTOM_AOT_WHITE_LIST", "/")  # everything inside
    assert doctor.check_white_list().status == doctor.OK
