"""Packaging pieces that need no wheel: build records, the command line's exit codes, ninja's progress and jobs,
the RUNPATH of packaged libraries. tests/test_wheel.py installs the real thing."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import aot_ops
from aot_ops._build import build_info, builder
from aot_ops._paths import LIB_DIR
from aot_ops.extension import installed_torch_runpath
from support import REPO


def _library_with_record(tmp_path: Path, record: dict | None) -> Path:
    library = tmp_path / "libx.so"
    library.write_bytes(b"not loaded by these tests")
    if record is not None:
        build_info.record_path(library).write_text(json.dumps(record))
    return library


def test_matching_record_passes_and_is_what_a_build_writes(tmp_path):
    library = _library_with_record(tmp_path, None)
    build_info.write(library)
    assert build_info.read(library) == {"mindspore": "2.10", "torch": "2.13.0"}
    assert aot_ops.check_library(library) == library.resolve()


@pytest.mark.parametrize("record,expected", [
    ({"mindspore": "2.10", "torch": "2.12.1"}, "was built against torch 2.12.1 (installed: 2.13.0"),
    ({"mindspore": "2.9", "torch": "2.13.0"}, "was built against MindSpore 2.9 (installed: 2.10.0)"),
    (None, "has no build record (libx.so.build.json)"),
], ids=["torch", "mindspore", "no-record"])
def test_library_built_for_other_versions_is_refused_with_the_way_out(tmp_path, record, expected):
    library = _library_with_record(tmp_path, record)
    with pytest.raises(aot_ops.StaleLibraryError) as info:
        aot_ops.check_library(library)
    assert expected in str(info.value) and "rebuild the package that ships it" in str(info.value)


def test_bundled_libraries_carry_their_record():
    for library in sorted((REPO / "aot_ops" / "lib").glob("*.so")):
        assert build_info.mismatch(library) is None, library


def test_installed_runpath_climbs_out_of_the_package_to_torch():
    assert installed_torch_runpath("aot_ops.lib.libaot_ops_cpu") == ["$ORIGIN/../../torch/lib"]
    assert installed_torch_runpath("scaled_ops.libscaled_ops") == ["$ORIGIN/../torch/lib"]


def test_max_jobs_reaches_ninja_and_a_bad_value_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("MAX_JOBS", "3")
    assert builder.ninja_command(tmp_path)[-2:] == ["-j", "3"]
    monkeypatch.setenv("MAX_JOBS", "many")
    with pytest.raises(builder.BuildError, match="MAX_JOBS='many' is not a positive number of jobs"):
        builder.ninja_command(tmp_path)


def test_long_builds_stream_ninja_progress(tmp_path, capfd):
    (tmp_path / "build.ninja").write_text("rule touch\n  command = touch $out\n  description = make $out\n"
                                          "build a: touch\nbuild b: touch\n")
    output = builder.run_ninja(tmp_path, progress_after_s=0.0)
    err = capfd.readouterr().err
    assert "aot_ops: [1/2] make" in err and "aot_ops: [2/2] make" in err
    assert output == (tmp_path / "build.log").read_text()
    (tmp_path / "a").unlink()
    builder.run_ninja(tmp_path)  # quick: quiet
    assert "aot_ops: [" not in capfd.readouterr().err


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "aot_ops", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd)


def test_command_line_exit_codes_tell_usage_from_build_failures(tmp_path):
    assert _cli("--version").stdout.strip() == f"aot_ops {aot_ops.__version__}"
    usage = _cli("frobnicate")
    assert usage.returncode == 2 and "invalid choice: 'frobnicate'" in usage.stderr
    source = tmp_path / "broken.cpp"
    source.write_text("int f() { return undeclared; }\n")
    failed = _cli("build", source, "-o", tmp_path / "broken.so", "--no-torch")
    assert failed.returncode == 3 and "broken.cpp:1" in failed.stderr and "undeclared" in failed.stderr


def test_every_documented_name_is_reachable_from_a_fresh_import():
    """`aot_ops.<name>` works without importing the submodule first (names load on first use)."""
    names = sorted(aot_ops.__all__)
    code = ("import aot_ops, sys\n"
            f"missing = [n for n in {names!r} if getattr(aot_ops, n, None) is None]\n"
            "print(missing)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
    for name in ("ascendc", "cuda", "conformance", "extension"):
        assert name in names


def test_one_library_path_names_every_bundled_library():
    assert aot_ops.library_path().name == "libaot_ops_cpu.so"
    assert aot_ops.library_path("ascendc").name == "libaot_ops_ascendc.so"
    with pytest.raises(ValueError, match=r"aot_ops.library_path: unknown library 'tpu' \(one of cpu, ascendc, cuda\)"):
        aot_ops.library_path("tpu")
    cuda_library = LIB_DIR / "libaot_ops_cuda.so"
    if not cuda_library.is_file():  # this machine: no CUDA torch, so setup.py did not build it, and says why
        with pytest.raises(FileNotFoundError, match="libaot_ops_cuda.so was not built: "):
            aot_ops.library_path("cuda")


def test_an_operator_definition_takes_a_backward_kernel_or_a_bprop_not_both():
    from aot_ops._bprops import cotangent_then_inputs
    from aot_ops._opdef import Backward, OpDef

    with pytest.raises(TypeError, match="LeakyRelu: give a backward kernel or a bprop, not both"):
        OpDef(aot_ops.library_path(), "LeakyRelu", backward=Backward("LeakyReluGrad", cotangent_then_inputs),
              bprop=lambda x, out, dout: (dout,))
