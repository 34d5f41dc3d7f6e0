"""Cold build and warm load of one small ATen source: aot_ops.load against torch.utils.cpp_extension.load.

    .venv/bin/python benchmarks/build_and_load.py [--warm-runs 3]

Every measurement runs in a fresh interpreter with an empty (cold) or filled (warm) cache of its own, and times
only the load call (after one untimed build that brings torch's headers into the page cache); torch is imported before the clock starts in both cases (aot_ops needs torch's ABI flag for
a torch-using source, cpp_extension imports torch anyway). aot_ops builds four more translation units (the ms_ext
runtime every aot library links) and load-checks the result in a fresh interpreter, which cpp_extension does not.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SOURCE = textwrap.dedent("""\
    #include <cstdint>
    #include <ATen/ops/from_blob.h>
    #include <ATen/ops/leaky_relu.h>

    extern "C" int LeakyReluF32(int, void **params, int *ndims, int64_t **shapes, const char **, void *, void *) {
      std::vector<int64_t> sizes(shapes[0], shapes[0] + ndims[0]);
      auto options = at::TensorOptions().dtype(at::kFloat);
      at::Tensor x = at::from_blob(params[0], sizes, options), y = at::from_blob(params[1], sizes, options);
      at::leaky_relu_out(y, x, 0.01);
      return 0;
    }
""")

AOT_OPS = textwrap.dedent("""
    import sys, time, torch, aot_ops
    start = time.perf_counter()
    lib = aot_ops.load("bench_leaky_relu", [sys.argv[1]])
    print(time.perf_counter() - start, lib.rebuilt)
""")

CPP_EXTENSION = textwrap.dedent("""
    import sys, time, torch
    from torch.utils import cpp_extension
    start = time.perf_counter()
    cpp_extension.load("bench_leaky_relu", [sys.argv[1]], is_python_module=False, build_directory=sys.argv[2])
    print(time.perf_counter() - start, None)
""")


def timed(script: str, *args: str, env: dict) -> float:
    proc = subprocess.run([sys.executable, "-c", script, *args], cwd=REPO, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    return float(proc.stdout.split()[-2])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--warm-runs", type=int, default=3)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        source = tmp / "leaky_relu.cpp"
        source.write_text(SOURCE)
        # Untimed: the first compile of a process tree also pays for reading torch's headers from disk.
        timed(AOT_OPS, str(source), env=dict(os.environ, AOT_OPS_CACHE=str(tmp / "warm_up")))
        env = dict(os.environ, AOT_OPS_CACHE=str(tmp / "aot_cache"))
        results["aot_ops.load cold"] = timed(AOT_OPS, str(source), env=env)
        results["aot_ops.load warm"] = statistics.median(
            timed(AOT_OPS, str(source), env=env) for _ in range(args.warm_runs))
        build = tmp / "cpp_extension"
        build.mkdir()
        results["cpp_extension.load cold"] = timed(CPP_EXTENSION, str(source), str(build), env=env)
        results["cpp_extension.load warm"] = statistics.median(
            timed(CPP_EXTENSION, str(source), str(build), env=env) for _ in range(args.warm_runs))
    for what, seconds in results.items():
        print(f"{what:<26} {seconds:8.3f} s")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
