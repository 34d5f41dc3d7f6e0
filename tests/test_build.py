"""`python -m aot_ops build` and the load guarantees of every built library."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import aot_ops
from aot_ops.__main__ import EXIT_BUILD_FAILED
from support import TEST_KERNELS, OpCell, to_torch


def aot_build(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "aot_ops", "build", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd)


def test_user_source_runs_in_mindspore(user_library, mode):
    import mindspore as ms
    from mindspore import ops

    op = ops.Custom(f"{user_library}:Double", out_shape=lambda x: x, out_dtype=lambda x: x, func_type="aot")
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    out = OpCell(op)(ms.Tensor(x))
    np.testing.assert_array_equal(to_torch(out).numpy(), x * 2)


def test_link_errors_are_reported(tmp_path):
    out = tmp_path / "libunresolved.so"
    proc = aot_build(TEST_KERNELS / "unresolved.cpp", "-o", out)
    assert proc.returncode == EXIT_BUILD_FAILED
    assert "link failed" in proc.stderr and "function_nobody_defines" in proc.stderr
    assert not out.exists()


def test_library_failing_the_rtld_now_check_is_not_written(tmp_path):
    out = tmp_path / "libunresolved.so"
    # Override --no-undefined so the link succeeds: the load check must still refuse the result.
    proc = aot_build(TEST_KERNELS / "unresolved.cpp", "-o", out, "--ldflag=-Wl,--unresolved-symbols=ignore-all")
    assert proc.returncode == EXIT_BUILD_FAILED
    assert "load check (dlopen with RTLD_NOW) failed" in proc.stderr
    assert "undefined symbol: function_nobody_defines" in proc.stderr
    assert not out.exists()


@pytest.mark.slow  # runs the compiler: 7 s
def test_compile_error_shows_file_line_and_message(tmp_path):
    proc = aot_build(TEST_KERNELS / "syntax_error.cpp", "-o", tmp_path / "libbroken.so")
    assert proc.returncode == EXIT_BUILD_FAILED
    assert "syntax_error.cpp:4:" in proc.stderr and "expected primary-expression" in proc.stderr
    assert "full log:" in proc.stderr


FRESH_LOAD = textwrap.dedent("""
    import ctypes, os, sys
    assert "LD_LIBRARY_PATH" not in os.environ
    for path in sys.argv[1:]:
        ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    assert "torch" not in sys.modules
    print("loaded", len(sys.argv) - 1)
""")


def clean_env():
    return {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}


def test_libraries_load_with_rtld_now_without_torch_or_ld_library_path(user_library):
    proc = subprocess.run([sys.executable, "-c", FRESH_LOAD, str(aot_ops.library_path()), user_library],
                          capture_output=True, text=True, env=clean_env())
    assert proc.returncode == 0, proc.stderr
    assert "loaded 2" in proc.stdout


def test_mindspore_runs_the_kernels_without_importing_torch():
    """A MindSpore program that never imports torch (or aot_ops) can still use the library: its rpath finds
    libtorch."""
    script = textwrap.dedent(f"""
        import sys
        import numpy as np, mindspore as ms
        from mindspore import ops
        ms.set_device("CPU")
        op = ops.Custom("{aot_ops.library_path()}:LeakyRelu", out_shape=lambda x: x, out_dtype=lambda x: x,
                        func_type="aot")
        y = op(ms.Tensor(np.array([[0.0, -0.1], [-0.2, 1.0]], np.float32))).asnumpy()
        assert "torch" not in sys.modules
        print(y.tolist())
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=clean_env(),
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    np.testing.assert_allclose(eval(proc.stdout.strip().splitlines()[-1]), [[0, -0.001], [-0.002, 1.0]], rtol=1e-6)


@pytest.mark.parametrize("flag", ["--no-torch"])
def test_plain_cpp_kernel_builds_without_torch(tmp_path, flag):
    source = tmp_path / "plain_add.cpp"
    source.write_text(textwrap.dedent("""
        #include <cstdint>
        #include <ms_ext/c_api.h>
        extern "C" int PlainAdd(int nparam, void **params, int *ndims, int64_t **shapes, const char **,
                                void *, void *) {
          int64_t n = 1;
          for (int d = 0; d < ndims[0]; ++d) n *= shapes[0][d];
          auto *a = static_cast<float *>(params[0]), *b = static_cast<float *>(params[1]);
          auto *out = static_cast<float *>(params[2]);
          for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
          return 0;
        }
    """))
    out = tmp_path / "libplain.so"
    proc = aot_build(source, "-o", out, flag)
    assert proc.returncode == 0, proc.stderr
    needed = subprocess.run(["readelf", "-d", str(out)], capture_output=True, text=True).stdout
    assert "torch" not in needed and "c10" not in needed


def defines_cxx_runtime(library) -> bool:
    """Whether a library carries its own copy of libstdc++ (the static archive linked in)."""
    table = subprocess.run(["nm", "-D", "-C", "--defined-only", str(library)], capture_output=True, text=True,
                           check=True).stdout
    return "std::ios_base::Init::Init" in table or "std::locale::classic" in table


def test_libraries_use_the_shared_cxx_runtime(user_library):
    """A second, never-initialised libstdc++ inside a library crashes the first error message it formats."""
    for library in (aot_ops.library_path(), user_library):
        assert not defines_cxx_runtime(library), library


def test_a_compiler_with_only_the_static_cxx_runtime_links_the_shared_one(tmp_path, monkeypatch):
    """A g++ whose search path holds libstdc++.a alone (the image of a CUDA machine sets CXX to such a wrapper)
    would link the archive into every library; the link names the runtime's shared object instead. The wrapper
    here answers -print-file-name as that g++ does and compiles with the real one."""
    from aot_ops._build import toolchain

    real = toolchain.cxx()
    wrapper = tmp_path / "g++"
    wrapper.write_text(f'#!/bin/sh\nif [ "$1" = "-print-file-name=libstdc++.so" ]; then echo libstdc++.so; exit 0; fi\n'
                       f'exec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CXX", str(wrapper))
    assert toolchain.shared_cxx_runtime_flags(str(wrapper)) == ("-l:libstdc++.so.6",)
    assert toolchain.shared_cxx_runtime_flags(real) == ()
    assert "-l:libstdc++.so.6" in toolchain.link_flags(use_torch=False)
    source = tmp_path / "formats.cpp"
    source.write_text('#include <sstream>\n#include <string>\nextern "C" const char *Format(long v) {\n'
                      '  static std::string s; std::ostringstream o; o << "[" << v << "]"; s = o.str();\n'
                      '  return s.c_str(); }\n')
    out = tmp_path / "libformats.so"
    subprocess.run([str(wrapper), *toolchain.plain_cflags(), str(source), "-o", str(out),
                    *toolchain.link_flags(use_torch=False)], check=True)
    assert not defines_cxx_runtime(out)
    import ctypes

    format_ = ctypes.CDLL(str(out)).Format
    format_.restype = ctypes.c_char_p
    assert format_(ctypes.c_long(42)) == b"[42]"


PLAIN_KERNEL = """
    #include <cstdint>
    #include <ms_ext/c_api.h>
    extern "C" int Zero(int nparam, void **params, int *ndims, int64_t **shapes, const char **, void *, void *) {
      return 0;
    }
"""


def _exported(library) -> set[str]:
    table = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True,
                           check=True).stdout
    return {line.split()[-1] for line in table.splitlines() if line.strip()}


def test_libraries_link_the_runtime_compiled_at_install_and_export_what_a_compiled_one_does(tmp_path):
    """ms_ext's runtime units are compiled once (setup.py, aot_ops/lib/ms_ext_runtime) and linked into each
    library built after; a library compiling them itself exports the same symbols."""
    from aot_ops._build import builder, runtime

    source = tmp_path / "zero.cpp"
    source.write_text(textwrap.dedent(PLAIN_KERNEL))
    installed = runtime.prebuilt()
    assert installed is not None and [o.parent for o in installed] == [runtime.RUNTIME_DIR] * len(installed)
    libraries = {}
    for how, objects in (("installed", None), ("compiled", ())):
        spec = builder.LibrarySpec(name=f"zero_{how}", sources=[source], use_torch=False, runtime_objects=objects)
        build_dir = tmp_path / how
        libraries[how] = builder.build_library(spec, build_dir, tmp_path / f"libzero_{how}.so")
        ninja = (build_dir / "build.ninja").read_text()
        compiles_runtime = all(f"ms_ext/src/{src.name}" in ninja for src, _ in runtime.units())
        links_installed = all(str(obj) in ninja for obj in installed)
        assert (compiles_runtime, links_installed) == ((False, True) if how == "installed" else (True, False)), how
    assert "ms_ext_mapped" in _exported(libraries["installed"]) and "Zero" in _exported(libraries["installed"])
    assert _exported(libraries["installed"]) == _exported(libraries["compiled"])


def test_a_runtime_compiled_from_another_ms_ext_or_compiler_is_not_linked(tmp_path, monkeypatch):
    import json
    import shutil

    from aot_ops._build import runtime

    folder = tmp_path / "ms_ext_runtime"
    shutil.copytree(runtime.RUNTIME_DIR, folder)
    assert runtime.prebuilt(folder) == [folder / o.name for o in runtime.prebuilt()]
    record = json.loads((folder / runtime.RECORD).read_text())
    for key, other in (("ms_ext", "0" * 64), ("cxx", "/usr/bin/another-g++:1:1")):
        changed = dict(record, description=dict(record["description"], **{key: other}))
        (folder / runtime.RECORD).write_text(json.dumps(changed))
        assert runtime.prebuilt(folder) is None, key
    (folder / runtime.RECORD).write_text(json.dumps(record))
    (folder / record["objects"][0]).unlink()  # an object missing: compiled with the library
    assert runtime.prebuilt(folder) is None
