"""Packaging pieces that need no wheel: build records, the command line's exit codes, ninja's progress and jobs,
the RUNPATH of packaged libraries. tests/test_wheel.py installs the real thing."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import aot_ops
from aot_ops._build import build_info, builder
from aot_ops._native.paths import LIB_DIR
from aot_ops.extension import installed_torch_runpath
from support import REPO

TORCH = torch.__version__.split("+")[0]  # the installed release, as a build record names it


def _library_with_record(tmp_path: Path, record: dict | None) -> Path:
    library = tmp_path / "libx.so"
    library.write_bytes(b"not loaded by these tests")
    if record is not None:
        build_info.record_path(library).write_text(json.dumps(record))
    return library


def test_matching_record_passes_and_is_what_a_build_writes(tmp_path):
    library = _library_with_record(tmp_path, None)
    build_info.write(library)
    assert build_info.read(library) == {"mindspore": "2.10", "torch": TORCH}
    assert aot_ops.check_library(library) == library.resolve()


@pytest.mark.parametrize("record,expected", [
    ({"mindspore": "2.10", "torch": "2.12.1"}, f"was built against torch 2.12.1 (installed: {TORCH}"),
    ({"mindspore": "2.9", "torch": TORCH}, "was built against MindSpore 2.9 (installed: 2.10.0)"),
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
    with pytest.raises(ValueError, match=r"aot_ops.library_path: unknown library 'tpu' \(one of cpu, ascendc, cuda, "
                                         r"npu\)"):
        aot_ops.library_path("tpu")
    cuda_library = LIB_DIR / "libaot_ops_cuda.so"
    if not cuda_library.is_file():  # this machine: no CUDA torch, so setup.py did not build it, and says why
        with pytest.raises(FileNotFoundError, match="libaot_ops_cuda.so was not built: "):
            aot_ops.library_path("cuda")
    if not (LIB_DIR / "libaot_ops_npu.so").is_file():  # no torch_npu and CANN: the same
        with pytest.raises(FileNotFoundError, match="libaot_ops_npu.so was not built: torch_npu is not installed"):
            aot_ops.library_path("npu")


def test_an_operator_definition_takes_a_backward_kernel_or_a_bprop_not_both():
    from aot_ops._core.bprops import cotangent_then_inputs
    from aot_ops._core.opdef import Backward, OpDef

    with pytest.raises(TypeError, match="LeakyRelu: give a backward kernel or a bprop, not both"):
        OpDef(aot_ops.library_path(), "LeakyRelu", backward=Backward("LeakyReluGrad", cotangent_then_inputs),
              bprop=lambda x, out, dout: (dout,))


def run_paths(library: Path) -> list[str]:
    """The RPATH and RUNPATH entries of a shared library."""
    dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    entries = []
    for line in dynamic.splitlines():
        if "(RPATH)" in line or "(RUNPATH)" in line:
            entries += line.split("[", 1)[1].rsplit("]", 1)[0].split(":")
    return entries


def shipped_libraries() -> list[Path]:
    package = REPO / "aot_ops"
    return sorted(p for p in package.rglob("*.so") if ".venv" not in p.parts)


def test_every_shipped_library_searches_only_absolute_or_origin_relative_folders():
    """A relative entry is searched from the caller's working directory: a library found there would be loaded."""
    libraries = shipped_libraries()
    assert {p.name for p in libraries} >= {"libaot_ops_cpu.so", "libaot_ops_ascendc.so", "_pynative_front.so"}
    for library in libraries:
        entries = run_paths(library)
        assert entries, f"{library.name} has no RPATH/RUNPATH"
        for entry in entries:
            assert entry.startswith(("/", "$ORIGIN")), f"{library.name} searches {entry!r}"


def test_the_fronts_link_line_names_mindspores_folders():
    from aot_ops._front.build import link_flags

    flags = ["-shared", "-Wl,-z,now", "-Wl,--disable-new-dtags,--rpath", "-s", "-lmindspore_core"]
    fixed = link_flags(flags, "/env/mindspore/lib")  # an editable install: the front stays in the checkout
    assert not any(f.endswith("--rpath") or "--disable-new-dtags" in f for f in fixed)
    assert "-Wl,--enable-new-dtags" in fixed  # RUNPATH: below LD_LIBRARY_PATH, not inherited
    assert fixed[-1] == "'-Wl,-rpath,$$ORIGIN/../../mindspore/lib:/env/mindspore/lib'"
    # a wheel: nothing of the build environment (pip's temporary folder under /tmp) is searched
    assert link_flags(flags, None)[-1] == "'-Wl,-rpath,$$ORIGIN/../../mindspore/lib'"


TORCH_ELSEWHERE = '''
import ctypes, os, sys
from pathlib import Path
import aot_ops
from aot_ops._build import bundled as _bundled
_bundled.LIB_DIR = Path(sys.argv[1])
path = aot_ops.library_path()
ctypes.CDLL(str(path), mode=os.RTLD_NOW | os.RTLD_LOCAL)   # what MindSpore's Custom does with the path
print("loaded", path.name, "torch imported:", "torch" in sys.modules)
'''


def test_library_path_hands_out_a_library_that_loads_with_torch_in_another_site_packages(tmp_path):
    """A bundled library installed where `$ORIGIN/../../torch/lib` holds no torch (torch in another site-packages):
    the path library_path() gives loads in a process that never imported torch."""
    from aot_ops._native.paths import LIBRARIES

    source = tmp_path / "needs_torch.cpp"
    source.write_text('#include <ATen/ops/empty.h>\n'
                      'extern "C" long Elements() { return at::empty({2, 3}).numel(); }\n')
    lib_dir = tmp_path / "site" / "aot_ops" / "lib"
    library = builder.build_library(
        builder.LibrarySpec(name="needs_torch", sources=[source], torch_runpath=["$ORIGIN/../../torch/lib"]),
        tmp_path / "build", lib_dir / LIBRARIES["cpu"])
    build_info.write(library)
    assert not (lib_dir.parent.parent / "torch").exists()
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    proc = subprocess.run([sys.executable, "-c", TORCH_ELSEWHERE, str(lib_dir)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"loaded {LIBRARIES['cpu']} torch imported: False" in proc.stdout


def test_every_exception_class_of_the_package_derives_from_aot_ops_error():
    """`except aot_ops.Error` catches whatever aot_ops raises of its own, and the built-in each class extends."""
    import importlib
    import inspect
    import pkgutil

    found = {}
    package = Path(aot_ops.__file__).parent
    for info in pkgutil.walk_packages([str(package)], "aot_ops."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            # Warning categories are not errors (CompileFallbackWarning: a graph runs interpreted, not a failure).
            if (inspect.isclass(value) and issubclass(value, BaseException) and not issubclass(value, Warning)
                    and value.__module__ == info.name):
                found[f"{info.name}.{name}"] = value
    assert len(found) >= 14, sorted(found)
    outside = sorted(name for name, cls in found.items() if not issubclass(cls, aot_ops.Error))
    assert not outside, outside
    assert issubclass(aot_ops.PortError, RuntimeError) and issubclass(aot_ops.BuildError, RuntimeError)
