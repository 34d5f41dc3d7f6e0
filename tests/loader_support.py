"""Sources and helpers for the aot_ops.load tests: small plain C++ kernels (no torch, so they compile in well under
a second), a compiler wrapper that records its invocations, and running Python in a fresh process."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# An elementwise float32 add with MindSpore's seven-argument launch signature; the loop lives in a local header so
# the tests can edit either file.
PLAIN_ADD = textwrap.dedent("""\
    #include <cstdint>
    #include "add_loop.h"
    extern "C" int PlainAdd(int nparam, void **params, int *ndims, int64_t **shapes, const char **, void *,
                            void *) {
      int64_t n = 1;
      for (int d = 0; d < ndims[0]; ++d) n *= shapes[0][d];
      add_loop(static_cast<const float *>(params[0]), static_cast<const float *>(params[1]),
               static_cast<float *>(params[2]), n);
      return 0;
    }
""")
ADD_LOOP_H = textwrap.dedent("""\
    #pragma once
    #include <cstdint>
    inline void add_loop(const float *a, const float *b, float *out, int64_t n) {
      for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
    }
""")


def write_plain_add(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "add_loop.h").write_text(ADD_LOOP_H)
    source = folder / "plain_add.cpp"
    source.write_text(PLAIN_ADD)
    return source


def compiler_wrapper(folder: Path) -> tuple[Path, Path]:
    """A `c++` that appends its arguments to a log, optionally sleeps while compiling a source whose path contains
    $AOT_TEST_SLOW_SOURCE (touching $AOT_TEST_STARTED first), then runs g++. Returns (wrapper, log)."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "compiler.log"
    wrapper = folder / "c++"
    wrapper.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        echo "$*" >> {log}
        if [ -n "$AOT_TEST_SLOW_SOURCE" ]; then
          case "$*" in *"$AOT_TEST_SLOW_SOURCE"*) touch "$AOT_TEST_STARTED"; sleep 60;; esac
        fi
        exec g++ "$@"
    """))
    wrapper.chmod(0o755)
    return wrapper, log


def compiled_sources(log: Path, name: str) -> int:
    """How many times the wrapper compiled a file called `name`."""
    if not log.exists():
        return 0
    return sum(1 for line in log.read_text().splitlines() if " -c " in line and name in line)


# Loads a library, calls PlainAdd through ctypes with MindSpore's arguments, prints timing and the result.
LOAD_AND_CALL = textwrap.dedent("""
    import ctypes, json, sys, time
    start = time.perf_counter()
    import aot_ops
    lib = aot_ops.load(sys.argv[1], [sys.argv[2]])
    elapsed = time.perf_counter() - start
    so = ctypes.CDLL(str(lib.path))
    a, b, out = (ctypes.c_float * 3)(1, 2, 3), (ctypes.c_float * 3)(10, 20, 30), (ctypes.c_float * 3)()
    params = (ctypes.c_void_p * 3)(ctypes.addressof(a), ctypes.addressof(b), ctypes.addressof(out))
    shape = (ctypes.c_int64 * 1)(3)
    shapes = (ctypes.POINTER(ctypes.c_int64) * 3)(shape, shape, shape)
    ndims = (ctypes.c_int * 3)(1, 1, 1)
    assert so.PlainAdd(3, params, ndims, shapes, None, None, None) == 0
    print(json.dumps({"rebuilt": lib.rebuilt, "seconds": elapsed, "out": list(out), "path": str(lib.path),
                      "torch_imported": "torch" in sys.modules, "mindspore_imported": "mindspore" in sys.modules}))
""")


def python(script: str, *args, env: dict | None = None, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def env_with(**overrides) -> dict:
    env = dict(os.environ)
    env.update({k: str(v) for k, v in overrides.items()})
    return env
